"""Were ssft's CPU inference kernels worth keeping? ssft reranking and encoding with and without them, in the same
precision (fp32, and bf16 under autocast), side by side in one run.

    SSFT_DATA_HOME=../shared/data python benchmarks/cpu_kernels.py [--repeats 3] [--threads 1] [--write]

The kernels (``ssft.adapters.cpu_kernels`` until issue 19 removed them) routed every ``nn.Linear`` of the encoder
through oneDNN's private ``torch.ops.mkldnn._linear_pointwise`` op, and fused each feed-forward block's dense layer
with its exact GELU, for fp32 inference without gradient, on at least 128 tokens. The same patch is kept here (and
only here) so the measurement that decided their removal can be run again:

- ``rerank``: ``prediction_trainer(cross-encoder).score`` of NFCorpus test queries × their BM25 top candidates
  (all-MiniLM-L6-v2, 256 tokens, batch 32): pairs / s.
- ``encode``: ``encode_corpus`` of NFCorpus documents with the dense all-MiniLM-L6-v2 (256 tokens, batch 32): docs / s.

Each (precision, kernels) configuration runs once per repeat, in an order that rotates repeat by repeat
(interleaved, so a busy shared machine slows all alike); medians over repeats.
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
MIN_ROWS = 128  # the removed module's threshold: calls of fewer tokens kept PyTorch's forward


def install_kernels(model) -> int:
    """The removed ``use_cpu_kernels``: instance forwards on every plain nn.Linear (oneDNN linear) and every dense +
    exact-GELU block (fused), used for fp32 CPU tensors without grad or autocast; the original forward elsewhere."""
    import torch
    from torch import nn
    from transformers.activations import GELUActivation

    def needs_original(x) -> bool:
        return (x.dtype != torch.float32 or x.dim() < 2 or x.numel() < MIN_ROWS * x.shape[-1]
                or torch.is_autocast_enabled("cpu") or torch.is_grad_enabled())

    def linear(x, layer, post):
        bias = layer.bias.detach() if layer.bias is not None else None
        return torch.ops.mkldnn._linear_pointwise(x, layer.weight.detach(), bias, post, [], "none" if post == "gelu" else "")

    def plain_forward(layer):
        return lambda x: nn.Linear.forward(layer, x) if needs_original(x) else linear(x, layer, "none")

    def fused_forward(block):
        return lambda h: type(block).forward(block, h) if needs_original(h) else linear(h, block.dense, "gelu")

    count = 0
    for module in model.modules():
        act = getattr(module, "intermediate_act_fn", None)
        if type(module) is nn.Linear:
            module.forward = plain_forward(module)
            count += 1
        elif (type(getattr(module, "dense", None)) is nn.Linear and isinstance(act, GELUActivation)
              and act.act is nn.functional.gelu):
            module.forward = fused_forward(module)
            count += 1
    return count


def remove_kernels(model) -> None:
    for module in model.modules():
        module.__dict__.pop("forward", None)


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
    p.add_argument("--queries", type=int, default=16, help="rerank: NFCorpus test queries")
    p.add_argument("--candidates", type=int, default=20, help="rerank: BM25 candidates per query")
    p.add_argument("--docs", type=int, default=128, help="encode: NFCorpus documents")
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

    def rerank(prec: str):
        start = time.perf_counter()
        scores = prediction_trainer(cross, 32, precision=prec).score(pairs)
        return len(pairs) / (time.perf_counter() - start), scores

    def encode(prec: str):
        start = time.perf_counter()
        with precision.inference(dense, prec) as model:
            vectors = encode_corpus(model, texts, 32)
        return len(texts) / (time.perf_counter() - start), vectors

    tasks = {"rerank": (rerank, cross, "pairs/s"), "encode": (encode, dense, "docs/s")}
    configs = [(task, prec, kernels) for task in tasks for prec in ("fp32", "bf16") for kernels in (True, False)]
    rates = {c: [] for c in configs}
    outputs = {}
    for task, prec, kernels in configs[:1] + configs[2:3]:  # warm-up
        tasks[task][0](prec)
    loads = []
    for repeat in range(a.repeats):
        order = configs[repeat % len(configs):] + configs[: repeat % len(configs)]
        for task, prec, kernels in order:
            fn, model, _ = tasks[task]
            if kernels:
                install_kernels(model)
            try:
                rate, out = fn(prec)
            finally:
                remove_kernels(model)
            rates[(task, prec, kernels)].append(rate)
            outputs[(task, prec, kernels)] = out
        loads.append(os.getloadavg()[0])
    lines = ["## CPU inference kernels: with and without, same precision (the decision of issue 19)", "",
             f"`python benchmarks/cpu_kernels.py --repeats {a.repeats} --threads {a.threads} --queries {a.queries} "
             f"--candidates {a.candidates} --docs {a.docs}`: all-MiniLM-L6-v2, 256 tokens, batch 32, {a.threads} "
             f"thread(s); CPU flags: {cpu_flags()}; {os.cpu_count()} cores shared with other jobs (1-minute load average "
             f"{min(loads):.1f}–{max(loads):.1f} during the run). Medians of {a.repeats} interleaved repeats.", "",
             "| task | precision | with kernels | without | kernels' speed-up | max abs difference of outputs |",
             "|---|---|---:|---:|---:|---:|"]
    speedups = {}
    for task, (_, _, unit) in tasks.items():
        for prec in ("fp32", "bf16"):
            on, off = statistics.median(rates[(task, prec, True)]), statistics.median(rates[(task, prec, False)])
            speedups[(task, prec)] = on / off
            diff = float(np.abs(np.asarray(outputs[(task, prec, True)]) - np.asarray(outputs[(task, prec, False)])).max())
            lines.append(f"| {task} | {prec} | {on:.1f} {unit} | {off:.1f} {unit} | {on / off:.2f}× | {diff:.1e} |")
    lines += ["", "bf16 against fp32, both without the kernels: " + ", ".join(
        f"{task} {statistics.median(rates[(task, 'bf16', False)]) / statistics.median(rates[(task, 'fp32', False)]):.2f}×"
        for task in tasks) + "."]
    best = max(speedups.values())
    verdict = ("kept: they add ≥ 1.1× in some precision" if best >= 1.1 else
               f"removed: at most {best:.2f}× on top of ssft without them in the same precision (the bar was 1.1×); under "
               f"bf16 autocast they never ran, and a private torch op is a liability")
    lines += ["", f"Decision: {verdict}.", ""]
    text = "\n".join(lines)
    print(text)
    if a.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report import write_section

        write_section("cpu_kernels", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
