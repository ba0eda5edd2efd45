"""Benchmark: monoBERT cross-encoders from all-MiniLM-L6-v2 with full / lora / lora++ / prefix / prompt,
the same training budget each, reranking NFCorpus's BM25 top-100 on the test queries.

    SSFT_DATA_HOME=../shared/data python benchmarks/cross_methods.py [--seeds 42] [--methods full,lora,...]

Runs are resumable (a run folder with metrics.json is reused). Training throughput (pairs/s) and peak
memory (max RSS) are measured in a separate process per method, side by side, with the same batches.
Writes the 'cross_methods' section of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RECIPE = ROOT / "recipes" / "bench_nfcorpus_cross.yaml"
# learning rates of the backbone / adapter per method (the head has model.head_learning_rate)
METHOD_OVERRIDES = {
    "full": ["training.learning_rate=5e-5"],
    "lora": ["training.learning_rate=1e-3"],
    "lora++": ["training.learning_rate=1e-3"],
    "prefix": ["training.learning_rate=1e-2"],
    "prompt": ["training.learning_rate=1e-2"],
}
METRICS = ["nDCG@10", "P@20", "nDCG@20"]


def train_run(method: str, seed: int, out_root: Path, extra: list[str]) -> dict:
    out = out_root / f"{method}-s{seed}"
    if not (out / "metrics.json").is_file():
        cmd = [sys.executable, "-m", "ssft.train", str(RECIPE), f"adapter.method={method}", f"seed={seed}",
               f"training.output_dir={out}", *METHOD_OVERRIDES[method], *extra]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
    return {"metrics": json.loads((out / "metrics.json").read_text()), "info": json.loads((out / "run_info.json").read_text())}


def throughput(method: str, steps: int = 6, batch_pairs: int = 32, max_length: int = 128) -> dict:
    """Run in a fresh process: pairs/s of training steps (median) and the process's peak RSS."""
    code = f"""
import json, resource, statistics, time, torch
from ssft.data.beir import load_dataset
from ssft.models.cross import CrossEncoder
from ssft.config.recipe import ModelConfig
torch.manual_seed(0)
ds = load_dataset("nfcorpus")
docs = [d.full_text for d in list(ds.corpus.values())[:{batch_pairs}]]
queries = list(ds.queries.values())[:{batch_pairs}]
ranker = CrossEncoder.build(ModelConfig(max_length={max_length}), "{method}", {{}}).train()
opt = torch.optim.AdamW([p for p in ranker.parameters() if p.requires_grad], lr=1e-5)
batch = ranker.tokenize(queries, docs)
times = []
for _ in range({steps}):
    t = time.perf_counter(); opt.zero_grad(); ranker(**batch).sum().backward(); opt.step(); times.append(time.perf_counter() - t)
ranker.eval()
with torch.inference_mode():
    t = time.perf_counter(); ranker(**batch); infer = time.perf_counter() - t
print(json.dumps({{"train_pairs_per_s": {batch_pairs} / statistics.median(times[1:]),
                  "infer_pairs_per_s": {batch_pairs} / infer,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from report import write_section

    parser = argparse.ArgumentParser()
    parser.add_argument("--methods", default="full,lora,lora++,prefix,prompt")
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench" / "cross"))
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("overrides", nargs="*", help="extra key=value recipe overrides for every run")
    ns = parser.parse_args()
    methods = ns.methods.split(",")
    seeds = [int(s) for s in ns.seeds.split(",")]
    started = time.time()
    runs = {m: [train_run(m, s, Path(ns.out), ns.overrides) for s in seeds] for m in methods}
    speed = {} if ns.skip_throughput else {m: throughput(m) for m in methods}

    first = next(iter(runs.values()))[0]
    info = first["info"]
    bm25 = first["metrics"]["bm25"]
    lines = [
        "## Cross-encoder fine-tuning methods on NFCorpus (BM25 top-100 rerank, all 323 test queries)",
        "",
        f"Command: `SSFT_DATA_HOME=../shared/data python benchmarks/cross_methods.py --seeds {ns.seeds}"
        + (" " + " ".join(ns.overrides) if ns.overrides else "") + "`",
        f"Recipe: `{RECIPE.relative_to(ROOT)}`; all-MiniLM-L6-v2; seeds {ns.seeds}; 2 CPU cores.",
        "Budget, the same for each method: " + "; ".join(info["notes"][:2]) + ".",
        "Per-method backbone/adapter learning rates: "
        + ", ".join(f"{m} {METHOD_OVERRIDES[m][0].split('=')[1]}" for m in methods) + "; ranker head as in the recipe.",
        "",
        "| method | trainable params | " + " | ".join(METRICS)
        + " | + BM25 interp. nDCG@10 (α) | train pairs/s | infer pairs/s | peak RSS MB |",
        "|---|---:|" + "---:|" * len(METRICS) + "---:|---:|---:|---:|",
        "| BM25 (bm25s) | – | " + " | ".join(f"{bm25[k]:.4f}" for k in METRICS) + " | – | – | – | – |",
    ]
    for m, rs in runs.items():
        vals = {k: statistics.mean(r["metrics"]["test"][k] for r in rs) for k in METRICS}
        fused = [r["metrics"].get("test+bm25", {}).get("nDCG@10") for r in rs]
        alphas = [r["info"].get("interpolation_alpha") for r in rs]
        fused_cell = (f"{statistics.mean(fused):.4f} ({', '.join(f'{a:.2f}' for a in alphas)})"
                      if all(f is not None for f in fused) else "–")
        sp = speed.get(m, {})
        lines.append(
            f"| {m} | {rs[0]['info']['trainable_parameters']:,} | " + " | ".join(f"{vals[k]:.4f}" for k in METRICS)
            + f" | {fused_cell} | {sp.get('train_pairs_per_s', float('nan')):.1f} "
              f"| {sp.get('infer_pairs_per_s', float('nan')):.1f}"
            + f" | {sp.get('peak_rss_mb', float('nan')):.0f} |"
        )
    lines += [
        "",
        "Model scores alone are the metric columns; the interpolation column (α·model + (1−α)·BM25, min-max per query, "
        "α tuned on dev) is reported separately.",
        "Throughput: median of 5 training steps of 32 pairs × 128 tokens, measured in one process per method, "
        "one after another in the same run.",
        f"Benchmark wall time: {time.time() - started:.0f} s (runs reused from earlier invocations count 0).",
    ]
    write_section("cross_methods", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
