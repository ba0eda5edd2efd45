"""ColBERT corpus index: recall@100 of the approximate token index against exhaustive MaxSim, index size, latency.

    SSFT_DATA_HOME=../shared/data python benchmarks/colbert_index.py --data nfcorpus --split test \
        --work /tmp/colbert-nfcorpus [--plaid-cache /tmp/nfc.plaid] [--simulate-docs 1000000]

Builds a ColBERT model on ``--model`` (default all-MiniLM-L6-v2, its projection to ``--dim`` started as a training run
starts it, ``--projection pca``: the top principal directions of the corpus's token states, or ``random``; nothing
trained: recall against exhaustive MaxSim measures the index, not the model), encodes the corpus with
``ssft.encode`` (token shards + an ``--index`` token index; ``--work`` keeps them, a second run resumes), then for every
query of ``--split``: the exhaustive MaxSim top-100 (every document scored) and the index's top-100 at each
``--token-k`` / ``--nprobe``, their overlap (recall@100 of exhaustive), the documents re-scored per query, and the
median latency per query (query encoding, token search, MaxSim re-scoring; one query at a time). Writes the
``colbert-index`` section of BENCHMARKS.md.

PLAID rows (``--plaid``: ``ncells:ndocs:rescore:threshold:exact`` settings, ``ssft.eval.plaid``): the same shards
compressed (``--ncentroids`` k-means centroids, 2-bit residuals; ``--plaid-cache`` keeps the built index for a second
run), searched with each setting, scored as above (recall@100 against exhaustive MaxSim on the float16 tokens,
documents decompressed, ms per query with the query tokens given, beside exhaustive MaxSim timed on the same
queries). ``--simulate-docs`` adds the same rows on a synthetic corpus of that many documents (``--sim-tokens`` tokens
each on average, ``--sim-dim`` dimensions, drawn around 1,000 topic centres as ``benchmarks/scale_simulation.py``
draws its dense corpus).
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

PROJECTIONS = {"pca": "started as ssft-train starts it: the top principal directions of the corpus's token states",
               "random": "**random**"}


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--data", default="nfcorpus")
    parser.add_argument("--split", default="test")
    parser.add_argument("--dim", type=int, default=128, help="ColBERT token dimension")
    parser.add_argument("--projection", default="pca", choices=["pca", "random"],
                        help="the projection's start: pca (as ssft-train starts it, fitted to the corpus) or random")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--query-length", type=int, default=32)
    parser.add_argument("--index", default="ivfpq", help="token index kind (ssft-encode --index)")
    parser.add_argument("--nprobe", default="16,32", help="IVF lists searched, comma-separated")
    parser.add_argument("--token-k", default="64,128,256,512", help="tokens fetched per query token, comma-separated")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--latency-queries", type=int, default=50, help="queries timed one at a time")
    parser.add_argument("--queries", type=int, default=0, help="evenly spaced queries of --split measured (0: all)")
    parser.add_argument("--plaid", default="4:1000:250:0.4:1,4:2000:363:0.4:1,4:2000:363:none:1,4:2000:363:none:0",
                        help="PLAID settings ncells:ndocs:rescore:threshold:exact, comma-separated ('' for none)")
    parser.add_argument("--ncentroids", type=int, default=None, help="PLAID centroids (default: ColBERTv2's rule)")
    parser.add_argument("--plaid-cache", type=Path, default=None, help="file keeping the built PLAID index")
    parser.add_argument("--simulate-docs", type=int, default=0, help="synthetic corpus size for PLAID scale rows")
    parser.add_argument("--sim-tokens", type=int, default=6)
    parser.add_argument("--sim-dim", type=int, default=32)
    parser.add_argument("--sim-ncentroids", type=int, default=2048)
    parser.add_argument("--sim-queries", type=int, default=20)
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
                      query_max_length=ns.query_length, colbert_dim=ns.dim, projection_start=ns.projection)
    model = MODELS.get("colbert").build(cfg, "full", {})
    dataset = load_dataset(ns.data)
    if ns.projection == "pca":  # as ssft-train starts a run (ssft.pipeline.build)
        print(model.fit_start([d.full_text for d in dataset.corpus.values()], seed=0), flush=True)
    ranker = ssft.load(model, precision=ns.precision)
    start = time.perf_counter()
    encoded = ssft.encode(ranker, ns.data, ns.work, index=ns.index, precision=ns.precision, shard_size=1000)
    build_s = time.perf_counter() - start
    late = load_late_index(ns.work, dataset)
    qids = sorted(q for q in dataset.qrels(ns.split) if q in dataset.queries)
    if ns.queries:
        qids = qids[:: max(1, len(qids) // ns.queries)][: ns.queries]
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

    plaid_rows, plaid_info = [], {}
    if ns.plaid:
        plaid_rows, plaid_info = _plaid_rows(ns, late.store, queries, truth)
    simulated = _simulate(ns) if ns.simulate_docs else None

    load.append(os.getloadavg()[0])
    info = encoded["index"]
    index_bytes = (ns.work / "index.faiss").stat().st_size
    shard_bytes = _size(ns.work / "shards")
    tokens = int(late.store.lengths.sum())
    cores = len(os.sched_getaffinity(0))
    table = "\n".join(f"| {n} | {k} | {r:.4f} | {c:.0f} ({100 * c / len(dataset.corpus):.0f}% of the corpus) | {ms:.0f} |"
                      for n, k, r, c, ms in rows)
    subset = f" (evenly spaced, `--queries {ns.queries}`)" if ns.queries else ""
    isa = _vector_isa()
    body = f"""## ColBERT corpus index: recall against exhaustive MaxSim

Model: {ns.model} as a ColBERT backbone, token dimension {ns.dim} (projection {PROJECTIONS[ns.projection]}, nothing
trained: recall against exhaustive MaxSim measures the index, not ranking quality), documents {ns.max_length} tokens,
queries {ns.query_length},
documents and queries encoded as {encoded['manifest']['precision']} (`ssft.encode`'s default backend,
`--backend auto`, at `--precision {ns.precision}`). Corpus: {ns.data}, {len(dataset.corpus):,} documents, {tokens:,}
scored token vectors; queries: the
{len(qids)} of `{ns.split}`{subset}. Index: `ssft-encode --index {ns.index}` → faiss `{info['factory']}` over the token
vectors; candidates = the documents of the `token_k` nearest document tokens of every query token, re-scored by exact
MaxSim from the float16 shards. Recall@{ns.depth} = overlap of the index's top-{ns.depth} with exhaustive MaxSim's
(every document scored). Latency: median over {min(ns.latency_queries, len(texts))} queries, one at a time
(query encoding + token search + MaxSim), faiss and the MaxSim re-scoring on the machine's {cores} cores ({isa}; load average
{load[0]:.1f} at the start, {load[1]:.1f} at the end: absolute times are loose, the columns compare with each other).

| nprobe | token_k | recall@{ns.depth} vs exhaustive | documents re-scored (median) | ms / query |
|---:|---:|---:|---:|---:|
{table}

Exhaustive MaxSim (every document, no index): {exhaustive_ms:.0f} ms / query (query encoding excluded).
On disk: index.faiss {index_bytes / 2**20:.1f} MiB ({index_bytes / tokens:.1f} bytes per token), token shards
(float16, the re-scoring store) {shard_bytes / 2**20:.1f} MiB; encoding + index build {build_s:.0f} s (0 s when
resumed from `--work`).
{_plaid_section(ns, plaid_rows, plaid_info, len(dataset.corpus), tokens, simulated)}"""
    print(body)
    if not ns.no_write:
        write_section("colbert-index", body)


def _vector_isa() -> str:
    """The CPU's widest vector instructions, from /proc/cpuinfo's flags (what numpy and faiss kernels run on)."""
    info = Path("/proc/cpuinfo")
    flags = set(info.read_text().split()) if info.is_file() else set()
    if "avx512f" in flags:
        return "AVX-512" + (" with VNNI" if "avx512_vnni" in flags else "")
    return "AVX2 only, no AVX-512" if "avx2" in flags else "no AVX2"


def _settings(text: str) -> list[dict]:
    out = []
    for item in filter(None, text.split(",")):
        ncells, ndocs, rescore, threshold, exact = item.split(":")
        out.append({"ncells": int(ncells), "ndocs": int(ndocs), "rescore": int(rescore),
                    "threshold": -1e30 if threshold == "none" else float(threshold), "exact": exact == "1"})
    return out


def _plaid_index(ns, parts, lengths, ncentroids, cache):
    """(PlaidIndex, build seconds or None when read from ``cache``)."""
    from ssft.eval.plaid import PlaidIndex, default_centroids

    k = ncentroids or default_centroids(int(lengths.sum()))
    if cache is not None and cache.is_file():
        plaid = PlaidIndex.load(cache, mmap=False)
        if plaid.meta["tokens"] == int(lengths.sum()) and plaid.meta["ncentroids"] == k and plaid.meta["seed"] == 0:
            return plaid, None
    start = time.perf_counter()
    plaid = PlaidIndex.build(parts, lengths, ncentroids=k, seed=0)
    built = time.perf_counter() - start
    if cache is not None:
        plaid.save(cache)
    return plaid, built


def _exhaustive(parts, lengths, queries, depth):
    """(top-``depth`` unit sets, ms per query): exact MaxSim of every unit on the float16 tokens, scored a part at a
    time (one matrix product and one segment max per part, no per-document loop)."""
    starts, units = [], 0
    counts = np.concatenate([[0], np.cumsum(lengths)])
    for part in parts:  # the units each part holds, whole
        stop = int(np.searchsorted(counts, counts[units] + part.shape[0]))
        starts.append((units, stop))
        units = stop
    out, start = [], time.perf_counter()
    for q in queries:
        scores = np.empty(len(lengths), dtype=np.float32)
        for part, (lo, hi) in zip(parts, starts):
            sims = q @ np.asarray(part, dtype=np.float32).T
            scores[lo:hi] = np.maximum.reduceat(sims, counts[lo:hi] - counts[lo], axis=1).sum(axis=0)
        order = np.lexsort((np.arange(len(scores)), -scores))[:depth]
        out.append(set(order.tolist()))
    return out, 1000 * (time.perf_counter() - start) / len(queries)


def _measure(late, queries, truth, depth, settings):
    start = time.perf_counter()
    found = late.search(queries, depth, **settings)
    ms = 1000 * (time.perf_counter() - start) / len(queries)
    recall = float(np.mean([len({u for u, _ in f} & t) / max(1, len(t)) for f, t in zip(found, truth)]))
    stats = late.last_stats
    return {**settings, "recall": recall, "ms": ms,
            "candidates": statistics.median(s["candidates"] for s in stats),
            "rescored": statistics.median(s["rescored"] for s in stats)}


def _plaid_rows(ns, store, queries, truth):
    from ssft.eval.colbert_index import PlaidLateIndex

    fast, exhaustive_ms = _exhaustive(store.parts, store.lengths, queries, ns.depth)
    assert fast == truth, "the part-wise exhaustive MaxSim differs from LateIndex.exhaustive"
    plaid, built = _plaid_index(ns, store.parts, store.lengths, ns.ncentroids, ns.plaid_cache)
    late = PlaidLateIndex(plaid, [str(i) for i in range(store.units)], store=store)
    rows = []
    for settings in _settings(ns.plaid):
        rows.append(_measure(late, queries, truth, ns.depth, settings))
        print("plaid", rows[-1], flush=True)
    ceilings = _ceilings(plaid, queries, truth, ns.depth)
    print("plaid ceilings", ceilings, flush=True)
    return rows, {"built": built, "bytes": plaid.nbytes(), "per_token": plaid.bytes_per_token(),
                  "k": plaid.meta["ncentroids"], "bits": plaid.bits, "exhaustive_ms": exhaustive_ms,
                  "train": plaid.meta["train_tokens"], "ceilings": ceilings}


def _ceilings(plaid, queries, truth, depth) -> dict[str, float]:
    """Recall@``depth`` against exhaustive MaxSim of the index's two approximate scores with every document scored,
    nothing pruned: MaxSim on the decompressed vectors (no pruning over these codes recalls more) and the
    centroid-only MaxSim that picks the documents to decompress."""
    units = np.arange(plaid.units)
    found = {"decompressed": [], "centroids": []}
    for q in queries:
        q = np.ascontiguousarray(q, dtype=np.float32)
        for name, scores in (("decompressed", plaid.maxsim(q, units)),
                             ("centroids", plaid.centroid_scores(q @ plaid.centroids.T, units))):
            order = np.lexsort((units, -scores))[:depth]
            found[name].append(set(order.tolist()))
    return {name: float(np.mean([len(f & t) / max(1, len(t)) for f, t in zip(sets, truth)]))
            for name, sets in found.items()}


def _simulate(ns):
    """PLAID on a synthetic corpus of ``--simulate-docs`` documents (module docstring)."""
    from ssft.eval.colbert_index import PlaidLateIndex, TokenStore

    rng = np.random.default_rng(7)
    centres = rng.standard_normal((1000, ns.sim_dim)).astype(np.float32)
    lengths = rng.integers(max(1, ns.sim_tokens // 2), ns.sim_tokens + ns.sim_tokens // 2 + 1, ns.simulate_docs)
    topics = rng.integers(0, 1000, (ns.simulate_docs, 3))
    parts, chunk = [], 100_000
    for lo in range(0, ns.simulate_docs, chunk):  # each document's tokens around its own 3 topics
        n = lengths[lo : lo + chunk]
        own = np.repeat(topics[lo : lo + chunk], n, axis=0)[np.arange(int(n.sum())), rng.integers(0, 3, int(n.sum()))]
        x = centres[own] + 0.6 * rng.standard_normal((len(own), ns.sim_dim), dtype=np.float32)
        parts.append((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16))
    store = TokenStore(parts, lengths)
    queries = []
    for _ in range(ns.sim_queries):  # 8 tokens around 2 topics
        q = centres[rng.integers(0, 1000, 2)][rng.integers(0, 2, 8)] + 0.6 * rng.standard_normal((8, ns.sim_dim))
        queries.append((q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32))
    truth, exhaustive_ms = _exhaustive(parts, lengths, queries, ns.depth)
    plaid, built = _plaid_index(ns, parts, lengths, ns.sim_ncentroids, None)
    late = PlaidLateIndex(plaid, [str(i) for i in range(store.units)], store=store)
    rows = []
    for settings in _settings(ns.plaid):
        rows.append(_measure(late, queries, truth, ns.depth, settings))
        print("simulated", rows[-1], flush=True)
    return {"rows": rows, "exhaustive_ms": exhaustive_ms, "built": built, "per_token": plaid.bytes_per_token(),
            "tokens": int(lengths.sum()), "k": plaid.meta["ncentroids"]}


def _plaid_table(rows, units, exhaustive_ms, depth):
    lines = [f"| {r['ncells']} | {r['ndocs']} | {r['rescore']} | "
             f"{'none' if r['threshold'] < -1e29 else r['threshold']} | {'float16' if r['exact'] else 'decompressed'} | "
             f"{r['recall']:.4f} | {r['candidates']:.0f} | {r['rescored']:.0f} ({100 * r['rescored'] / units:.1f}%) | "
             f"{r['ms']:.0f} | {exhaustive_ms / r['ms']:.1f}× |" for r in rows]
    return (f"| ncells | ndocs | rescore | threshold | final scores | recall@{depth} vs exhaustive | candidates "
            f"(median) | documents decompressed (median) | ms / query | vs exhaustive |\n"
            "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|\n" + "\n".join(lines))


def _plaid_section(ns, rows, info, units, tokens, simulated) -> str:
    if not rows and not simulated:
        return ""
    text = ""
    if rows:
        sizes = ", ".join(f"{name} {size / tokens:.2f}" for name, size in info["bytes"].items())
        built = f"built in {info['built']:.0f} s" if info["built"] is not None else "read from `--plaid-cache`"
        text += f"""
### PLAID: centroid pruning over 2-bit residuals (`--index plaid`)

The same token vectors compressed by `ssft.eval.plaid` ({info['k']} k-means centroids, seed 0, {info['bits']}-bit
residuals per dimension, trained on {info['train']:,} tokens; {built}): **{info['per_token']:.1f} bytes per token**
on disk ({sizes}), against
{256 if ns.dim == 128 else 2 * ns.dim} bytes of float16 per token in the shards. Each query: the documents of every query
token's `ncells` best centroids (candidates); the best `ndocs` by centroid-only MaxSim, over the centroids some query
token scores `threshold` or more on; the best `rescore` by centroid-only MaxSim over all their centroids; those
documents' residuals decompressed and scored by MaxSim (final scores `decompressed`); with `float16`, the best
2 × {ns.depth} of them scored again on their float16 tokens from the shards (the model's MaxSim; no more documents
than were decompressed). Query tokens given (encoding excluded), one query at a time; exhaustive MaxSim
{info['exhaustive_ms']:.0f} ms / query on the same queries (every document's float16 tokens, one matrix product and
segment max per shard: the faster of the two exhaustive scorers, so the speed-up is not flattered).

{_plaid_table(rows, units, info['exhaustive_ms'], ns.depth)}

Every document scored, nothing pruned: MaxSim on the decompressed vectors recalls
{info['ceilings']['decompressed']:.4f} of exhaustive MaxSim's top {ns.depth} (no pruning over these codes recalls more with
`decompressed` final scores), centroid-only MaxSim {info['ceilings']['centroids']:.4f}.
"""
    if simulated:
        s = simulated
        built = f"{s['built']:.0f} s" if s["built"] is not None else "cached"
        text += f"""
Synthetic scale (`--simulate-docs {ns.simulate_docs}`): {ns.simulate_docs:,} documents, {s['tokens']:,} tokens
({ns.sim_tokens} per document on average) of {ns.sim_dim} dimensions drawn around 1,000 topic centres, 3 topics a
document; {ns.sim_queries} queries of 8 tokens around 2 topics. {s['k']} centroids, build {built}, {s['per_token']:.1f}
bytes per token (at {ns.sim_dim} dimensions: {ns.sim_dim * 2 // 8} bytes of residual). Exhaustive MaxSim (float16 tokens)
{s['exhaustive_ms']:.0f} ms / query.

{_plaid_table(s['rows'], ns.simulate_docs, s['exhaustive_ms'], ns.depth)}
"""
    return text


if __name__ == "__main__":
    main()
