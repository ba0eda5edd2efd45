"""ColBERT corpus index: recall@100 of the approximate token index against exhaustive MaxSim, index size, latency.

    SSFT_DATA_HOME=../shared/data python benchmarks/colbert_index.py --data nfcorpus --split test \
        --work /tmp/colbert-nfcorpus

Builds a ColBERT model on ``--model`` (default all-MiniLM-L6-v2, its projection to ``--dim`` untrained unless ``--dim``
is the hidden size: recall against exhaustive MaxSim measures the index, not the model), encodes the corpus with
``ssft.encode`` (token shards + an ``--index`` token index; ``--work`` keeps them, a second run resumes), then for every
query of ``--split``: the exhaustive MaxSim top-100 (every document scored) and the index's top-100 at each
``--token-k`` / ``--nprobe``, their overlap (recall@100 of exhaustive), the documents re-scored per query, and the
median latency per query (query encoding, token search, MaxSim re-scoring; one query at a time). Writes the
``colbert-index`` section of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import write_section  # noqa: E402


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--data", default="nfcorpus")
    parser.add_argument("--split", default="test")
    parser.add_argument("--dim", type=int, default=128, help="ColBERT token dimension (projection untrained)")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--query-length", type=int, default=32)
    parser.add_argument("--index", default="ivfpq", help="token index kind (ssft-encode --index)")
    parser.add_argument("--nprobe", default="16,32", help="IVF lists searched, comma-separated")
    parser.add_argument("--token-k", default="64,128,256,512", help="tokens fetched per query token, comma-separated")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--latency-queries", type=int, default=50, help="queries timed one at a time")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--work", type=Path, required=True, help="folder for the token shards and the index")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave BENCHMARKS.md as it is")
    ns = parser.parse_args()

    import faiss
    import torch

    import ssft
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.data.beir import load_dataset
    from ssft.eval.colbert_index import load_late_index
    from ssft.models.corpus import encode_query_tokens

    torch.manual_seed(0)
    load = [os.getloadavg()[0]]
    cfg = ModelConfig(architecture="colbert", name=ns.model, max_length=ns.max_length,
                      query_max_length=ns.query_length, colbert_dim=ns.dim)
    ranker = ssft.load(MODELS.get("colbert").build(cfg, "full", {}), precision=ns.precision)
    dataset = load_dataset(ns.data)
    start = time.perf_counter()
    encoded = ssft.encode(ranker, ns.data, ns.work, index=ns.index, precision=ns.precision, shard_size=1000)
    build_s = time.perf_counter() - start
    late = load_late_index(ns.work, dataset)
    qids = sorted(q for q in dataset.qrels(ns.split) if q in dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    queries = encode_query_tokens(ranker, texts)

    start = time.perf_counter()
    reference = late.exhaustive(queries, ns.depth)
    exhaustive_ms = 1000 * (time.perf_counter() - start) / len(queries)
    truth = [{u for u, _ in hits} for hits in reference]

    rows = []
    for nprobe in [int(x) for x in ns.nprobe.split(",")]:
        try:
            faiss.extract_index_ivf(late.index).nprobe = nprobe
        except RuntimeError:  # not an IVF index: nprobe does not apply
            if rows:
                break
        for token_k in [int(x) for x in ns.token_k.split(",")]:
            found = late.search(queries, ns.depth, token_k)
            candidates = list(late.last_candidates)
            recall = float(np.mean([len({u for u, _ in f} & t) / max(1, len(t)) for f, t in zip(found, truth)]))
            times = []
            for text in texts[: ns.latency_queries]:  # one query at a time, as a server answers them
                t0 = time.perf_counter()
                late.search(encode_query_tokens(ranker, [text]), ns.depth, token_k)
                times.append(time.perf_counter() - t0)
            rows.append((nprobe, token_k, recall, statistics.median(candidates), 1000 * statistics.median(times)))
            print(f"nprobe {nprobe} token_k {token_k}: recall@{ns.depth} {recall:.4f}, "
                  f"candidates {statistics.median(candidates):.0f}, {rows[-1][-1]:.1f} ms/query", flush=True)

    load.append(os.getloadavg()[0])
    info = encoded["index"]
    index_bytes = (ns.work / "index.faiss").stat().st_size
    shard_bytes = _size(ns.work / "shards")
    tokens = int(late.store.lengths.sum())
    cores = len(os.sched_getaffinity(0))
    table = "\n".join(f"| {n} | {k} | {r:.4f} | {c:.0f} ({100 * c / len(dataset.corpus):.0f}% of the corpus) | {ms:.0f} |"
                      for n, k, r, c, ms in rows)
    body = f"""## ColBERT corpus index: recall against exhaustive MaxSim

Model: {ns.model} as a ColBERT backbone, token dimension {ns.dim} (projection **untrained**: recall against exhaustive
MaxSim measures the index, not ranking quality), documents {ns.max_length} tokens, queries {ns.query_length},
documents and queries encoded as {encoded['manifest']['precision']} (`ssft.encode`'s default backend,
`--backend auto`, at `--precision {ns.precision}`). Corpus: {ns.data}, {len(dataset.corpus):,} documents, {tokens:,}
scored token vectors; queries: the
{len(qids)} of `{ns.split}`. Index: `ssft-encode --index {ns.index}` → faiss `{info['factory']}` over the token
vectors; candidates = the documents of the `token_k` nearest document tokens of every query token, re-scored by exact
MaxSim from the float16 shards. Recall@{ns.depth} = overlap of the index's top-{ns.depth} with exhaustive MaxSim's
(every document scored). Latency: median over {min(ns.latency_queries, len(texts))} queries, one at a time
(query encoding + token search + MaxSim), faiss and the MaxSim re-scoring on the machine's {cores} cores (load average
{load[0]:.1f} at the start, {load[1]:.1f} at the end: absolute times are loose, the columns compare with each other).

| nprobe | token_k | recall@{ns.depth} vs exhaustive | documents re-scored (median) | ms / query |
|---:|---:|---:|---:|---:|
{table}

Exhaustive MaxSim (every document, no index): {exhaustive_ms:.0f} ms / query (query encoding excluded).
On disk: index.faiss {index_bytes / 2**20:.1f} MiB ({index_bytes / tokens:.1f} bytes per token), token shards
(float16, the re-scoring store) {shard_bytes / 2**20:.1f} MiB; encoding + index build {build_s:.0f} s (0 s when
resumed from `--work`).
"""
    print(body)
    if not ns.no_write:
        write_section("colbert-index", body)


if __name__ == "__main__":
    main()
