"""Are ssft's CPU inference kernels worth keeping? ssft reranking and encoding with and without them, in the same
precision (fp32, and bf16: ssft's bf16 inference, bfloat16 copies of the weights), side by side in one run (issue 19's
decision).

    SSFT_DATA_HOME=../shared/data python benchmarks/cpu_kernels_precision.py [--repeats 3] [--threads 1] [--write]

The kernels (``ssft.adapters.cpu_kernels``) route every ``nn.Linear`` of the encoder through oneDNN's private
``torch.ops.mkldnn._linear_pointwise`` op and fuse each feed-forward block's dense layer with its exact GELU, for fp32
and bf16 (bf16 weights) inference without gradient on at least 128 tokens; under autocast they step aside by design
(``benchmarks/cpu_kernels.py``: the kernels themselves, op by op, in fp32). Measured here:

- ``rerank``: ``prediction_trainer(cross-encoder).score`` of NFCorpus test queries × their BM25 top candidates
  (all-MiniLM-L6-v2, 256 tokens, batch 32): pairs per CPU-second.
- ``encode``: ``encode_corpus`` of NFCorpus documents with the dense all-MiniLM-L6-v2 (256 tokens, batch 32): documents
  per CPU-second.

Each (task, precision, kernels) configuration runs once per repeat, in an order that rotates repeat by repeat
(interleaved, so a busy shared machine slows all alike); medians over repeats. Throughput is per CPU-second of the
(one-thread) process: on a shared machine wall-clock swings with the other jobs' load, CPU time much less.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def set_kernels(model, on: bool) -> None:
    """With: installed again on the next CPU forward without gradient (what ssft does by itself). Without: removed and
    kept off (the backbones marked as done)."""
    from ssft.adapters.backbone import Backbone
    from ssft.adapters.cpu_kernels import remove_cpu_kernels

    remove_cpu_kernels(model)
    for module in model.modules():
        if isinstance(module, Backbone):
            module.cpu_kernels_installed = not on


def cpu_flags() -> str:
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    return ", ".join(f for f in ("avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8") if f in flags) or "none"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--queries", type=int, default=8, help="rerank: NFCorpus test queries")
    p.add_argument("--candidates", type=int, default=20, help="rerank: BM25 candidates per query")
    p.add_argument("--docs", type=int, default=96, help="encode: NFCorpus documents")
    p.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import torch

    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.core import precision
    from ssft.data.beir import load_dataset
    from ssft.data.examples import PairDataset
    from ssft.firststage.bm25 import BM25
    from ssft.models.corpus import encode_corpus
    from ssft.training.prediction import prediction_trainer

    torch.set_num_threads(a.threads)
    dataset = load_dataset("nfcorpus")
    qids = sorted(dataset.qrels("test"))[: a.queries]
    run = BM25(dataset).search({q: dataset.queries[q] for q in qids}, a.candidates)
    pairs = PairDataset(run, a.candidates, dataset)
    texts = [dataset.corpus[d].full_text for d in sorted(dataset.corpus)[: a.docs]]
    cross = MODELS.get("cross").build(ModelConfig(name=MODEL, max_length=256), "full", {}).eval().requires_grad_(False)
    dense = MODELS.get("dense").build(ModelConfig(architecture="dense", name=MODEL, max_length=256), "full", {})
    dense.eval().requires_grad_(False)

    # throughput per CPU-second of this (one-thread) process: on a shared machine wall-clock swings with the other
    # jobs' load, CPU time much less
    def rerank(prec: str):
        start = time.process_time()
        scores = prediction_trainer(cross, 32, precision=prec).score(pairs)
        return len(pairs) / (time.process_time() - start), scores

    def encode(prec: str):
        start = time.process_time()
        with precision.inference(dense, prec) as model:
            vectors = encode_corpus(model, texts, 32)
        return len(texts) / (time.process_time() - start), vectors

    tasks = {"rerank": (rerank, cross, "pairs/CPU-s"), "encode": (encode, dense, "docs/CPU-s")}
    configs = [(task, prec, kernels) for task in tasks for prec in ("fp32", "bf16") for kernels in (True, False)]
    rates = {c: [] for c in configs}
    outputs = {}
    for task, prec, kernels in configs[:1] + configs[4:5]:  # warm-up
        tasks[task][0](prec)
    loads = []
    for repeat in range(a.repeats):
        order = configs[repeat % len(configs):] + configs[: repeat % len(configs)]
        for task, prec, kernels in order:
            fn, model, _ = tasks[task]
            set_kernels(model, kernels)
            rate, out = fn(prec)
            rates[(task, prec, kernels)].append(rate)
            outputs[(task, prec, kernels)] = out
        loads.append(os.getloadavg()[0])
    lines = ["## CPU inference kernels with and without, same precision: the decision to keep them", "",
             f"`python benchmarks/cpu_kernels_precision.py --repeats {a.repeats} --threads {a.threads} --queries {a.queries} "
             f"--candidates {a.candidates} --docs {a.docs}`: all-MiniLM-L6-v2, 256 tokens, batch 32, {a.threads} "
             f"thread(s); CPU flags: {cpu_flags()}; {os.cpu_count()} cores shared with other jobs (1-minute load average "
             f"{min(loads):.1f}–{max(loads):.1f} during the run). Throughput per CPU-second of the process (steadier than "
             f"wall-clock on a shared machine), medians of {a.repeats} interleaved repeats.", "",
             "| task | precision | with kernels | without | kernels' speed-up | max abs difference of outputs |",
             "|---|---|---:|---:|---:|---:|"]
    speedups = {}
    for task, (_, _, unit) in tasks.items():
        for prec in ("fp32", "bf16"):
            on, off = statistics.median(rates[(task, prec, True)]), statistics.median(rates[(task, prec, False)])
            speedups[(task, prec)] = on / off
            diff = float(np.abs(np.asarray(outputs[(task, prec, True)]) - np.asarray(outputs[(task, prec, False)])).max())
            lines.append(f"| {task} | {prec} | {on:.2f} {unit} | {off:.2f} {unit} | {on / off:.2f}× | {diff:.1e} |")
    lines += ["", "bf16 against fp32, both without the kernels: " + ", ".join(
        f"{task} {statistics.median(rates[(task, 'bf16', False)]) / statistics.median(rates[(task, 'fp32', False)]):.2f}×"
        for task in tasks) + "."]
    best = max(speedups.values())
    fp32 = max(v for (task, prec), v in speedups.items() if prec == "fp32")
    bf16 = max(v for (task, prec), v in speedups.items() if prec == "bf16")
    verdict = (f"kept — on top of ssft without them, in the same precision, they add up to {fp32:.2f}× in fp32 and up "
               f"to {bf16:.2f}× in bf16 (the bar was 1.1×)" if best >= 1.1 else
               f"remove them: at most {best:.2f}× on top of ssft without them in the same precision (the bar was 1.1×)")
    lines += ["", f"Decision: {verdict}.", ""]
    text = "\n".join(lines)
    print(text)
    if a.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report import write_section

        write_section("cpu_kernels_precision", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
