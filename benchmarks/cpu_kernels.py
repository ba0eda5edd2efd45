"""What ssft's CPU inference kernels (``ssft.adapters.cpu_kernels``) bring, and where a CPU training step goes.

    SSFT_DATA_HOME=../shared/data python benchmarks/cpu_kernels.py [--docs 96] [--repeats 3] [--write]

- ``ops``: one linear layer (384 → 1536, all-MiniLM-L6-v2's feed-forward) + exact GELU, PyTorch (``F.linear`` then
  ``F.gelu``) vs the fused oneDNN call, at 1 to 8192 rows (tokens), one thread, medians; and the memory bandwidth
  one thread gets (``x * 2`` over a 50 MB tensor), which is why the separate GELU pass costs so much here.
- ``encode``: ``ssft.eval.retrieve.encode_corpus`` of NFCorpus documents (all-MiniLM-L6-v2 dense model, 256 tokens,
  batch 32) with the kernels and without (``SSFT_CPU_KERNELS=0``), alternated repeat by repeat, at 1 and 2
  threads: documents / s (wall-clock) and how far the vectors differ.
- ``train_profile``: where one bi-encoder training step goes (torch.profiler, one thread, 16 queries + 32
  documents × 128 tokens, forward + backward + AdamW): self CPU time by operator, the largest first. Training
  never uses the kernels.
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


def median_ms(fn, repeats: int = 7, inner: int = 1) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner)
    return 1000 * statistics.median(times)


def ops_part() -> list[str]:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    lines = ["### Linear (384 → 1536) + exact GELU, one thread", "",
             "| rows (tokens) | PyTorch ms | oneDNN fused ms | speed-up |", "|---:|---:|---:|---:|"]
    for rows in (1, 16, 128, 512, 2048, 8192):
        x, w, b = torch.randn(rows, 384), torch.randn(1536, 384) * 0.05, torch.randn(1536)
        inner = max(1, 2048 // rows)
        with torch.inference_mode():
            plain = median_ms(lambda: F.gelu(F.linear(x, w, b)), inner=inner)
            fused = median_ms(lambda: torch.ops.mkldnn._linear_pointwise(x, w, b, "gelu", [], "none"), inner=inner)
        lines.append(f"| {rows} | {plain:.3f} | {fused:.3f} | {plain / fused:.2f}× |")
    big = torch.randn(32 * 256, 1536)
    ms = median_ms(lambda: big * 2)
    lines += ["", f"Memory bandwidth of one thread: `x * 2` over a {big.numel() * 4 / 1e6:.0f} MB tensor takes {ms:.1f} ms "
              f"(~{2 * big.numel() * 4 / ms / 1e6:.1f} GB/s read + write)."]
    return lines


def encode_part(docs: int, repeats: int) -> list[str]:
    import numpy as np
    import torch

    from ssft.adapters import cpu_kernels
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.data.beir import load_dataset
    from ssft.eval.retrieve import encode_corpus

    dataset = load_dataset("nfcorpus")
    texts = [dataset.corpus[d].full_text for d in sorted(dataset.corpus)[:docs]]
    model = MODELS.get("dense").build(ModelConfig(architecture="dense", name=MODEL, max_length=256), "full", {})
    model.requires_grad_(False)

    def encode(kernels: bool) -> tuple[float, np.ndarray]:
        os.environ["SSFT_CPU_KERNELS"] = "1" if kernels else "0"
        if not kernels:
            cpu_kernels.remove_cpu_kernels(model)
        model.backbone.cpu_kernels_installed = False  # install (or not) anew on the next inference
        start = time.perf_counter()
        vectors = encode_corpus(model, texts, 32)
        return len(texts) / (time.perf_counter() - start), vectors

    lines = [f"### Encoding {docs} NFCorpus documents (encode_corpus, all-MiniLM-L6-v2, 256 tokens, batch 32)", "",
             "| threads | with kernels docs/s | without docs/s | speed-up | runs each |", "|---:|---:|---:|---:|---:|"]
    diff = cosine = None
    for threads in (1, 2):
        torch.set_num_threads(threads)
        encode(True)  # warm-up
        speed = {True: [], False: []}
        for repeat in range(repeats):
            for kernels in ((True, False) if repeat % 2 == 0 else (False, True)):
                rate, vectors = encode(kernels)
                speed[kernels].append(rate)
                if kernels:
                    fast = vectors
                else:
                    plain = vectors
            diff = float(np.abs(fast - plain).max())
            cosine = float((fast * plain).sum(1).min())
        on, off = statistics.median(speed[True]), statistics.median(speed[False])
        lines.append(f"| {threads} | {on:.2f} | {off:.2f} | {on / off:.2f}× | {repeats} |")
    os.environ.pop("SSFT_CPU_KERNELS", None)
    lines += ["", f"Vectors with and without the kernels: largest difference {diff:.1e}, smallest cosine {cosine:.7f}."]
    return lines


def train_profile_part() -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.data.beir import load_dataset
    from ssft.losses import ContrastiveLoss

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dataset = load_dataset("nfcorpus")
    ids = sorted(dataset.corpus)
    queries = [dataset.queries[q] for q in sorted(dataset.qrels("train"))[:16]]
    documents = [dataset.corpus[d].full_text for d in ids[:32]]
    model = MODELS.get("dense").build(ModelConfig(architecture="dense", name=MODEL, max_length=128, query_max_length=128),
                                      "full", {})
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-5, fused=True)
    batch = model.tokenize([q for q in queries for _ in range(2)], documents)
    loss_fn = ContrastiveLoss()

    def step():
        scores = model(**batch, group_size=2)
        loss_fn(scores).backward()
        optimizer.step()
        optimizer.zero_grad()

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            step()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    lines = ["### One bi-encoder training step, self CPU time by operator (one thread, 2 steps profiled)", "",
             f"Step: {total / 2 / 1e6:.2f} s.", "", "| operator | share |", "|---|---:|"]
    lines += [f"| `{e.key}` | {100 * e.self_cpu_time_total / total:.1f} % |" for e in events[:10]]
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="ops,encode,train_profile")
    p.add_argument("--docs", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    parts = [x for x in a.parts.split(",") if x]
    lines = ["## CPU inference kernels and a CPU training step", "",
             f"`python benchmarks/cpu_kernels.py --parts {','.join(parts)} --docs {a.docs} --repeats {a.repeats}` "
             f"on {os.cpu_count()} CPU cores (x86-64, AVX-512), torch fp32.", ""]
    for part in parts:
        if part == "ops":
            lines += ops_part()
        elif part == "encode":
            lines += encode_part(a.docs, a.repeats)
        elif part == "train_profile":
            lines += train_profile_part()
        else:
            p.error(f"--parts: unknown part '{part}' (ops, encode, train_profile)")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if a.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report import write_section

        write_section("cpu_kernels", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
