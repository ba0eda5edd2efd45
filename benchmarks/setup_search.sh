#!/usr/bin/env bash
# The set-up search behind the quickstart and benchmark recipes: short LoRA / full runs on NFCorpus
# that differ in loss, learning rates and negatives. Each prints the best dev nDCG@10 (80 dev queries,
# BM25 top-20). Run from the repository root:  SSFT_DATA_HOME=../shared/data bash benchmarks/setup_search.sh
# About 25 minutes on 2 CPU cores. Figures: BENCHMARKS.md, section "Set-up search".
set -euo pipefail
# what the quickstart recipe held when the search ran, spelled out so later recipe edits do not change it
base="loss=pairwise_softmax data.negatives=bm25 data.negatives_depth=30 data.num_negatives=3
      data.max_train_queries=800 data.max_positives_per_query=2 data.max_validation_queries=80 data.max_test_queries=2
      eval.interpolation=auto training.eval_strategy=steps training.logging_steps=20"
run() {
  name=$1; shift
  ssft-train recipes/quickstart.yaml training.output_dir=runs/setup_search/$name $base "$@" >/dev/null 2>&1
  python - "$name" <<'PY'
import json, sys
info = json.load(open(f"runs/setup_search/{sys.argv[1]}/run_info.json"))
hist = [round(h["eval_nDCG@10"], 4) for h in info["validation_history"]]
print(f"{sys.argv[1]:18s} train loss {info['train_loss']:.4f}  dev nDCG@10 per evaluation {hist}  alpha {info['interpolation_alpha']}")
PY
}
run pw_lora          training.max_steps=60 training.eval_steps=30
run ce_lora          training.max_steps=60 training.eval_steps=30 loss=listwise_ce
run ce_lora_hot      training.max_steps=80 training.eval_steps=40 loss=listwise_ce training.learning_rate=3e-3 model.head_learning_rate=1e-2
run ce_full          training.max_steps=80 training.eval_steps=40 loss=listwise_ce "adapter={method: full}" training.learning_rate=1e-4
run ce_full_random   training.max_steps=80 training.eval_steps=40 loss=listwise_ce "adapter={method: full}" training.learning_rate=5e-5 data.negatives=random
