"""The bad-input matrix, first round: recipes, model names, dataset and run files, output folders, the CLIs.
Each case: (id, CLI module, argv builder taking a World, text the one-line error must contain[, "real"])."""
from __future__ import annotations

import json

from tests.bad_input_world import (
    RUN_ROWS_OK,
    _bad_corpus,
    _corrupt_base_model,
    _corrupt_checkpoint,
    _finished_run,
    _model_without_config,
    _other_recipe_checkpoints,
    _qrels_bad_score,
    _rerank_corrupt_weights,
    _rerank_no_adapter,
    _rerank_no_model,
    _rerank_spec,
    _train,
    _truncated_qrels,
)

# (id, CLI module, argv builder, culprit the message must name[, real interpreter])
CASES = [
    # ---- ssft-train: the recipe file and overrides
    ("train-recipe-missing", "ssft.train", lambda w: [str(w.root / "nope.yaml")], "recipe file not found"),
    ("train-recipe-is-a-list", "ssft.train", lambda w: [str(w.file("list.yaml", "- model\n- data\n"))],
     "a recipe must be a mapping of sections, got list", "real"),
    ("train-recipe-malformed", "ssft.train", lambda w: [str(w.file("bad.yaml", "model: [\n"))], "malformed YAML"),
    ("train-recipe-not-utf8", "ssft.train", lambda w: [str(w.file("bin.yaml", b"\xff\xfe\x00model"))], "not a UTF-8 text file"),
    ("train-unknown-section", "ssft.train", lambda w: _train(w, extra="modle: {name: x}\n"), "unknown section 'modle'"),
    ("train-unknown-model-key", "ssft.train", lambda w: _train(w, "model.nmae=x"), "unknown key 'nmae'"),
    ("train-seed-not-int", "ssft.train", lambda w: _train(w, "seed=abc"), "seed: expected an integer"),
    ("train-override-no-equals", "ssft.train", lambda w: _train(w, "training.learning_rate"), "expected key=value"),
    ("train-override-empty-key", "ssft.train", lambda w: _train(w, "=3"), "empty key"),
    ("train-override-into-value", "ssft.train", lambda w: _train(w, "model.name.x=1"), "'model.name' is not a section"),
    ("train-unknown-training-key", "ssft.train", lambda w: _train(w, "training.learnig_rate=1"), "training.learnig_rate"),
    ("train-training-wrong-type", "ssft.train", lambda w: _train(w, "training.learning_rate=fast"),
     "training.learning_rate: expected a number"),
    ("train-training-bad-value", "ssft.train", lambda w: _train(w, "training.lr_scheduler_type=bogus"), "training:"),
    ("train-unknown-method", "ssft.train", lambda w: _train(w, "adapter.method=lorra"), "unknown fine-tuning method 'lorra'"),
    ("train-unknown-adapter-option", "ssft.train", lambda w: _train(w, "adapter.rank=4"), "unknown option 'rank'"),
    ("train-unknown-loss", "ssft.train", lambda w: _train(w, "loss=hinge"), "unknown loss 'hinge'"),
    ("train-unknown-metric", "ssft.train", lambda w: _train(w, "eval.metrics=[nDCG@x]"), "unknown metric 'nDCG@x'"),
    ("train-hybrid-with-epochs", "ssft.train",
     lambda w: _train(w, "adapter={method: hybrid, first: hidden_prefix, second: lora}"), "training.num_train_epochs"),
    ("train-semi-siamese-on-cross", "ssft.train", lambda w: _train(w, "adapter.method=ss_lora"), "needs a bi-encoder"),
    # ---- model names and folders
    ("train-model-unknown-offline", "ssft.train", lambda w: _train(w, "model.name=nobody/no-such-model"),
     "model 'nobody/no-such-model' not found"),
    ("train-model-folder-missing", "ssft.train", lambda w: _train(w, f"model.name={w.root / 'gone'}"), "not found"),
    ("train-model-without-config", "ssft.train", _model_without_config, "has no config.json"),
    ("train-model-corrupt-weights", "ssft.train", _corrupt_base_model, "could not be loaded"),
    # ---- dataset files
    ("train-dataset-missing", "ssft.train", lambda w: _train(w, f"data.dataset={w.root / 'nodata'}"), "not found"),
    ("train-corpus-bad-json", "ssft.train", _bad_corpus, "corpus.jsonl:7: invalid JSON"),
    ("train-qrels-truncated", "ssft.train", _truncated_qrels, "train.tsv:6: expected 'query-id<TAB>corpus-id<TAB>score'"),
    ("train-qrels-bad-score", "ssft.train", _qrels_bad_score, "train.tsv:6: score 'yes' is not a number"),
    ("train-split-missing", "ssft.train", lambda w: _train(w, "data.test_split=heldout"), "no split 'heldout'"),
    # ---- run files
    ("train-run-file-missing", "ssft.train", lambda w: _train(w, f"eval.first_stage={w.root / 'none.trec'}"),
     "run file not found"),
    ("train-run-file-bad-score", "ssft.train",
     lambda w: _train(w, f"eval.first_stage={w.run_file(['q6 Q0 d5 1 high bm25'])}"),
     "first.trec:1: score 'high' is not a number"),
    ("train-run-file-columns", "ssft.train",
     lambda w: _train(w, f"eval.first_stage={w.run_file([RUN_ROWS_OK[0], 'q5 d6 1.5'])}"), "first.trec:2: expected 6 columns"),
    # ---- output folders and checkpoints
    ("train-finished-run", "ssft.train", _finished_run, "holds a finished run (metrics.json); pass --overwrite"),
    ("train-checkpoints-other-recipe", "ssft.train", _other_recipe_checkpoints,
     "checkpoints of a different recipe (seed differs)"),
    ("train-checkpoint-corrupt", "ssft.train", _corrupt_checkpoint, "checkpoint-4/ranker: the saved model cannot be loaded",
     "out-may-change"),
    # ---- command line
    ("train-no-arguments", "ssft.train", lambda w: [], "required: recipe"),
    ("train-unknown-flag", "ssft.train", lambda w: _train(w, "--bogus"), "unrecognized arguments: --bogus"),
    # ---- ssft-rerank
    ("rerank-run-folder-missing", "ssft.rerank", lambda w: w.rerank(run_dir=w.root / "no-run"), "run folder not found"),
    ("rerank-run-without-model", "ssft.rerank", _rerank_no_model, "no trained model"),
    ("rerank-corrupt-weights", "ssft.rerank", _rerank_corrupt_weights, "the saved model cannot be loaded"),
    ("rerank-spec-not-json", "ssft.rerank", lambda w: _rerank_spec(w, "{architecture: cross"), "ssft_model.json: invalid JSON"),
    ("rerank-spec-unknown-architecture", "ssft.rerank",
     lambda w: _rerank_spec(w, json.dumps({"architecture": "tower", "base_model": "x", "method": "lora"})),
     "unknown model architecture 'tower'"),
    ("rerank-adapter-missing", "ssft.rerank", _rerank_no_adapter, "no adapter/ or backbone/ folder"),
    ("rerank-unknown-metric", "ssft.rerank", lambda w: w.rerank("--metrics", "nDCG@10,MAP@x"), "unknown metric 'MAP@x'"),
    ("rerank-run-file-bad-score", "ssft.rerank",
     lambda w: w.rerank(first_stage=str(w.run_file([RUN_ROWS_OK[0], "q5 Q0 d6 2 n/a bm25"]))),
     "first.trec:2: score 'n/a' is not a number"),
    ("rerank-split-missing", "ssft.rerank", lambda w: [a if a != "test" else "heldout" for a in w.rerank()],
     "no split 'heldout'"),
    ("rerank-depth-zero", "ssft.rerank", lambda w: w.rerank("--depth", "0"), "--depth must be >= 1"),
    ("rerank-missing-data-flag", "ssft.rerank", lambda w: [str(w.ranker), "--split", "test", "--first-stage", "bm25",
                                                           "--output", str(w.out)], "required: --data", "real"),
    # ---- ssft-sweep
    ("sweep-grid-missing", "ssft.sweep", lambda w: [str(w.root / "grid.yaml")], "grid file not found"),
    ("sweep-grid-is-a-list", "ssft.sweep", lambda w: [str(w.grid("- recipe.yaml\n"))], "expected a mapping"),
    ("sweep-unknown-key", "ssft.sweep", lambda w: [str(w.grid("recipe: recipe.yaml\noutput_root: OUT\ngird: {}\n"))],
     "unknown key 'gird'"),
    ("sweep-value-not-a-list", "ssft.sweep",
     lambda w: (w.recipe(), [str(w.grid("recipe: recipe.yaml\noutput_root: OUT\ngrid: {seed: 1}\n"))])[1],
     "grid.seed: expected a non-empty list"),
    ("sweep-base-recipe-missing", "ssft.sweep",
     lambda w: [str(w.grid("recipe: missing.yaml\noutput_root: OUT\n"))], "base recipe not found", "real"),
    ("sweep-bad-grid-value", "ssft.sweep",
     lambda w: (w.recipe(), [str(w.grid("recipe: recipe.yaml\noutput_root: OUT\ngrid: {adapter.method: [lora, lorra]}\n"))])[1],
     "unknown fine-tuning method 'lorra'"),
    ("sweep-folds-k", "ssft.sweep",
     lambda w: (w.recipe(), [str(w.grid("recipe: recipe.yaml\noutput_root: OUT\nfolds: {k: 2}\n"))])[1], "folds.k: must be"),
]


