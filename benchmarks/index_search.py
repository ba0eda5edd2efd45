"""Searching your own queries over a corpus with ``ssft.index``: how long the index takes to build against
``ssft.encode`` (what ``ssft-encode`` runs) on the same corpus, how long a handful of queries takes once it exists,
and whether its hits are the exhaustive ones.

    SSFT_DATA_HOME=../shared/data python benchmarks/index_search.py [--dataset nfcorpus] [--queries 5] \
        [--repeats 5] [--write]

The model: all-MiniLM-L6-v2 at ``ssft.load``'s defaults (precision auto). Arms, in one process, one after another:
``ssft.encode(model, dataset, tmp/encode)`` (flat index), then ``ssft.index(model, dataset, path=tmp/flat)`` and
``ssft.index(..., kind="ivf", path=tmp/ivf)``, each timed in wall and CPU-seconds of this process. Then
``ssft.Index.load`` of the flat folder (timed), and ``.search`` of ``--queries`` test queries (the first ones by id)
with ``top_k=10``: the first call and the median of ``--repeats`` further calls. Exactness: every test query's
top-100 from the flat index against a brute-force inner product of the same query vectors (encoded as
``Index.search`` encodes them) with the saved document vectors (numpy, float32); the IVF index's recall@100 against
it.
``--write``: BENCHMARKS.md § index_search.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_section  # noqa: E402

import ssft  # noqa: E402
from ssft.models.corpus import encode_query_texts, read_manifest, read_shards  # noqa: E402

CHECKPOINT = "sentence-transformers/all-MiniLM-L6-v2"


def timed(call):
    """(result, wall seconds, CPU-seconds of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def exhaustive(folder: Path, query_vectors: np.ndarray, ids: list, k: int) -> list[list[tuple]]:
    """Top-``k`` (corpus id, score) of a brute-force inner product over the folder's saved document vectors."""
    manifest = read_manifest(folder)
    docs = np.concatenate([np.asarray(s, dtype=np.float32) for s in read_shards(folder, manifest)])
    scores = query_vectors.astype(np.float32) @ docs.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return [[(ids[j], float(scores[i, j])) for j in row] for i, row in enumerate(top)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="nfcorpus")
    p.add_argument("--queries", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--write", action="store_true")
    a = p.parse_args(argv)

    corpus, queries, qrels = ssft.load_dataset(a.dataset, "test")
    test = sorted(qrels)
    texts = [queries[q] for q in test]
    model = ssft.load(CHECKPOINT)
    rows, checks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _, wall, cpu = timed(lambda: ssft.encode(model, a.dataset, root / "encode"))
        rows.append(("`ssft.encode` (as `ssft-encode`), flat", wall, cpu))
        _, wall, cpu = timed(lambda: ssft.index(model, a.dataset, path=root / "flat"))
        rows.append(("`ssft.index(model, dataset, path=…)`, flat", wall, cpu))
        _, wall, cpu = timed(lambda: ssft.index(model, a.dataset, path=root / "ivf", kind="ivf"))
        rows.append(("`ssft.index(…, kind=\"ivf\", path=…)`", wall, cpu))
        index, wall, cpu = timed(lambda: ssft.Index.load(root / "flat", model))
        rows.append(("`ssft.Index.load(path, model)`", wall, cpu))
        few = texts[:a.queries]
        _, first_wall, first_cpu = timed(lambda: index.search(few, top_k=10))
        rows.append((f"`.search` of {len(few)} queries, top 10: first call", first_wall, first_cpu))
        again = [timed(lambda: index.search(few, top_k=10))[1:] for _ in range(a.repeats)]
        rows.append((f"`.search` of {len(few)} queries, top 10: median of {a.repeats} more",
                     statistics.median(w for w, _ in again), statistics.median(c for _, c in again)))

        hits = index.search(texts, top_k=100)
        scale = float(getattr(model, "score_scale", 1.0))
        # the very query vectors the index searches with (its served model, its batching): a bf16 encoder rounds a
        # text differently in another batch, which is not the index's doing
        vectors = np.asarray(encode_query_texts(index.model, texts, 64), dtype=np.float32)
        brute = exhaustive(root / "flat", vectors, [index._corpus_id(u) for u in index._unit_ids], 100)
        brute = [[(i, scale * s) for i, s in want] for want in brute]
        same_order = sum([h["corpus_id"] for h in got] == [i for i, _ in want] for got, want in zip(hits, brute))
        same_set = sum({h["corpus_id"] for h in got} == {i for i, _ in want} for got, want in zip(hits, brute))
        gap = max(abs(h["score"] - s) for got, want in zip(hits, brute) for h, (_, s) in zip(got, want))
        checks.append(f"flat: of {len(texts)} test queries' top-100, {same_set} hold the same documents as a "
                      f"brute-force inner product over the saved document vectors ({same_order} in the same order); "
                      f"largest score difference {gap:.2e} (score scale {scale:g})")
        ivf = ssft.Index.load(root / "ivf", model).search(texts, top_k=100)
        recall = statistics.mean(len({h["corpus_id"] for h in got} & {i for i, _ in want}) / len(want)
                                 for got, want in zip(ivf, brute))
        nprobe = json.loads((root / "ivf" / "index.json").read_text())["nprobe"]
        checks.append(f"ivf (nprobe {nprobe}, calibrated when built): recall@100 against the exhaustive top-100 "
                      f"{recall:.4f} over {len(texts)} test queries")

    lines = ["## Your own queries over a corpus: `ssft.index` build and search times", "",
             f"`python benchmarks/index_search.py --dataset {a.dataset} --queries {a.queries} --repeats {a.repeats}` "
             f"({CHECKPOINT}, `ssft.load`'s default precision, {len(corpus):,} documents, one process, 2 cores).", "",
             "| step | wall s | CPU s |", "|---|---:|---:|"]
    lines += [f"| {name} | {wall:.3f} | {cpu:.3f} |" for name, wall, cpu in rows]
    lines += ["", *[f"- {c}" for c in checks]]
    body = "\n".join(lines)
    print(body)
    if a.write:
        write_section("index_search", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
