"""A cross-encoder's serving graph with its last layer computed for [CLS] only, against the full last layer: the same
OpenVINO runtime and precision, the same (query, passage) pairs of real text, scores compared.

    SSFT_DATA_HOME=../shared/data python benchmarks/first_token_layer.py [--dataset nfcorpus] [--queries 16] \
        [--docs 16] [--max-length 256] [--repeats 5] [--precision fp32] [--write]

The pairs: ``--queries`` test queries of the dataset, each with ``--docs`` documents drawn at random from its corpus
(seed 0), so the lengths are the corpus's own. The model: a cross-encoder built from all-MiniLM-L6-v2 (its [CLS]
head untrained: speed and score equality only). Each arm is converted and compiled once, then
``Ranker.predict`` over all pairs is timed in CPU-seconds (``time.process_time``, this process) and wall seconds,
the arms interleaved ``--repeats`` times; medians reported. ``--write``: BENCHMARKS.md § first_token_layer.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_section  # noqa: E402

from ssft.config.model import ModelConfig  # noqa: E402
from ssft.config.registry import MODELS  # noqa: E402
from ssft.data.beir import load_dataset  # noqa: E402
from ssft.models.interop import openvino as ov  # noqa: E402

CHECKPOINT = "sentence-transformers/all-MiniLM-L6-v2"


def pairs_of(dataset: str, queries: int, docs: int) -> list[tuple[str, str]]:
    ds = load_dataset(dataset)
    rng = random.Random(0)
    qids = sorted(ds.qrels("test"))[:queries]
    corpus = sorted(ds.corpus)
    return [(ds.queries[q], ds.corpus[d].full_text) for q in qids for d in rng.sample(corpus, docs)]


def served(max_length: int, precision: str, first_token_layer: bool):
    torch.manual_seed(0)
    ranker = MODELS.get("cross").build(ModelConfig(architecture="cross", name=CHECKPOINT, max_length=max_length),
                                       "full", {})
    swap = ov.first_token_last_layer
    if not first_token_layer:
        ov.first_token_last_layer = lambda model: False  # the graph keeps its full last layer
    try:
        ranker, backend, _ = ov.serve(ranker, "openvino", precision)
    finally:
        ov.first_token_last_layer = swap
    assert backend == "openvino"
    return ranker


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="nfcorpus")
    p.add_argument("--queries", type=int, default=16)
    p.add_argument("--docs", type=int, default=16)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    pairs = pairs_of(a.dataset, a.queries, a.docs)
    arms = {"full last layer": served(a.max_length, a.precision, False),
            "[CLS]-only last layer": served(a.max_length, a.precision, True)}
    cpu: dict[str, list[float]] = {k: [] for k in arms}
    wall: dict[str, list[float]] = {k: [] for k in arms}
    scores = {}
    for _ in range(a.repeats):
        for name, ranker in arms.items():
            c0, w0 = time.process_time(), time.perf_counter()
            scores[name] = ranker.predict(pairs, batch_size=a.batch_size)
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
    names = list(arms)
    diff = float(np.max(np.abs(scores[names[0]] - scores[names[1]])))
    same_order = bool((np.argsort(-scores[names[0]]) == np.argsort(-scores[names[1]])).all())
    rows = [f"| {n} | {len(pairs) / statistics.median(cpu[n]):.1f} | {len(pairs) / statistics.median(wall[n]):.1f} |"
            for n in names]
    ratio = statistics.median(cpu[names[0]]) / statistics.median(cpu[names[1]])
    body = "\n".join([
        "## A cross-encoder's last layer for [CLS] only (OpenVINO serving graph)", "",
        f"{len(pairs)} (query, document) pairs of {a.dataset} ({a.queries} test queries x {a.docs} random documents), "
        f"all-MiniLM-L6-v2 cross-encoder, max_length {a.max_length}, batch {a.batch_size}, OpenVINO {a.precision}, "
        f"{torch.get_num_threads()} threads; medians of {a.repeats} interleaved repeats.", "",
        "| serving graph | pairs / CPU-s | pairs / s (wall) |", "|---|---:|---:|", *rows, "",
        f"[CLS]-only against full: {ratio:.2f}x per CPU-second; scores differ by at most {diff:.2e} "
        f"(same order: {same_order}).", ""])
    print(body)
    if a.write:
        write_section("first_token_layer", body)


if __name__ == "__main__":
    main()
