"""Exported models served by sentence-transformers rank as ssft does (issue 18), on real data.

For each trained run: ``ssft-rerank`` reranks the BM25 top-``depth`` of a split; ``ssft-export`` writes the run's
model; sentence-transformers 6.2 loads the export (``CrossEncoder`` with its saved identity activation /
``MultiVectorEncoder``) and scores the same (query, document) pairs; nDCG@10 of both (ir_measures, every judged query)
and the largest score difference are reported. For a cross-encoder, ssft then builds a new ``cross`` model from the
export (``model.name`` = the export folder, ``head: classifier``): before any training it must score as the exported
model (what epoch 0 of a run started from it evaluates).

    python benchmarks/export_roundtrip.py --cross-run runs/quickstart --colbert-run runs/ss_lora_colbert \
        --data nfcorpus --split test --depth 100 --out /tmp/export_roundtrip
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ir_measures
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import write_section  # noqa: E402
from ssft.data.beir import load_dataset  # noqa: E402
from ssft.firststage.runs import first_stage_run  # noqa: E402


def read_run(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
    return run


def ndcg10(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> float:
    """nDCG@10 averaged over every judged query (a query without candidates scores 0), as ssft-rerank reports it."""
    measure = ir_measures.parse_measure("nDCG@10")
    per_query = {m.query_id: m.value for m in measure.iter_calc(
        [ir_measures.Qrel(q, d, int(r)) for q, rels in qrels.items() for d, r in rels.items()],
        [ir_measures.ScoredDoc(q, d, s) for q, docs in run.items() for d, s in docs.items()])}
    return float(np.mean([per_query.get(q, 0.0) for q in qrels]))


def ssft_rerank(run_dir: Path, data: str, split: str, depth: int, out: Path) -> tuple[dict, float]:
    started = time.time()
    subprocess.run([sys.executable, "-m", "ssft.cli.rerank", str(run_dir), "--data", data, "--first-stage", "bm25",
                    "--split", split, "--depth", str(depth), "--output", str(out), "--overwrite"], check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return read_run(out / "run.trec"), time.time() - started


def export(run_dir: Path, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "ssft.cli.export", str(run_dir), "--output", str(out), "--overwrite"],
                   check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def st_cross_scores(folder: Path, candidates, queries, corpus, batch_size: int) -> dict[str, dict[str, float]]:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(folder))
    pairs = [(q, d) for q, docs in candidates.items() for d in docs]
    scores = model.predict([(queries[q], corpus[d]) for q, d in pairs], batch_size=batch_size)
    run: dict[str, dict[str, float]] = {}
    for (q, d), s in zip(pairs, scores):
        run.setdefault(q, {})[d] = float(s)
    return run


def st_colbert_scores(folder: Path, candidates, queries, corpus, batch_size: int) -> dict[str, dict[str, float]]:
    from sentence_transformers.multi_vector_encoder import MultiVectorEncoder

    model = MultiVectorEncoder(str(folder))
    doc_ids = sorted({d for docs in candidates.values() for d in docs})
    docs = dict(zip(doc_ids, model.encode_document([corpus[d] for d in doc_ids], batch_size=batch_size)))
    qids = sorted(candidates)
    run: dict[str, dict[str, float]] = {}
    for q, emb in zip(qids, model.encode_query([queries[q] for q in qids], batch_size=batch_size)):
        cands = candidates[q]
        sims = model.similarity([emb], [docs[d] for d in cands]).reshape(-1)
        run[q] = {d: float(s) for d, s in zip(cands, sims)}
    return run


def ssft_imported_scores(folder: Path, candidates, queries, corpus, max_length: int, batch_size: int):
    """A new ssft cross model built from the export (head: classifier), before any training."""
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS

    ranker = MODELS.get("cross").build(ModelConfig(architecture="cross", name=str(folder), max_length=max_length),
                                       "lora", {}).eval()
    pairs = [(q, d) for q, docs in candidates.items() for d in docs]
    run: dict[str, dict[str, float]] = {}
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start:start + batch_size]
            scores = ranker(**ranker.tokenize([queries[q] for q, _ in chunk], [corpus[d] for _, d in chunk]))
            for (q, d), s in zip(chunk, scores.tolist()):
                run.setdefault(q, {})[d] = s
    return run


def max_difference(a, b) -> float:
    return max(abs(a[q][d] - b[q][d]) for q in a for d in a[q])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cross-run", type=Path)
    parser.add_argument("--colbert-run", type=Path)
    parser.add_argument("--data", default="nfcorpus")
    parser.add_argument("--split", default="test")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--cross-depth", type=int, help="the cross-encoder's depth when not --depth (CPU time)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--import-queries", type=int, default=50,
                        help="queries (the first by id) the new cross model built from the export scores (CPU time)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/export_roundtrip"))
    parser.add_argument("--no-write", action="store_true", help="print, do not write BENCHMARKS.md")
    parser.add_argument("--note", action="append", default=[], help="a line for the section (how the runs were made)")
    parser.add_argument("--reuse", action="store_true",
                        help="take a run's rows from an earlier call's OUT/<kind>/rows.json (same run, data, depth)")
    ns = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    dataset = load_dataset(ns.data)
    qrels = dataset.qrels(ns.split)
    queries = {q: dataset.queries[q] for q in qrels}
    _, first = first_stage_run("bm25", dataset, {}, queries, ns.depth)
    rows = [f"| BM25 (first stage, top-{ns.depth}) | — | {ndcg10(first, qrels):.4f} | | |"]
    notes = []
    for kind, run_dir in (("cross", ns.cross_run), ("colbert", ns.colbert_run)):
        if run_dir is None:
            continue
        depth = ns.cross_depth if kind == "cross" and ns.cross_depth else ns.depth
        candidates = {q: [d for d in sorted(docs, key=docs.get, reverse=True)[:depth] if d in dataset.corpus]
                      for q, docs in first.items() if q in queries}
        corpus = {d: dataset.corpus[d].full_text for docs in candidates.values() for d in docs}
        out = ns.out / kind
        saved = out / "rows.json"
        if ns.reuse and saved.is_file():
            earlier = json.loads(saved.read_text())
            if earlier["key"] == [str(run_dir), ns.data, ns.split, depth]:
                rows += earlier["rows"]
                notes += earlier["notes"]
                continue
        first_rows = len(rows)
        ssft_run, _ = ssft_rerank(run_dir, ns.data, ns.split, depth, out / "rerank")
        export(run_dir, out / "export")
        spec = json.loads((run_dir / "model" / "ssft_model.json").read_text())
        scorer = st_cross_scores if kind == "cross" else st_colbert_scores
        started = time.time()
        st_run = scorer(out / "export", candidates, queries, corpus, ns.batch_size)
        st_seconds = time.time() - started
        head = f" (head {spec.get('head', 'cls_linear')})" if kind == "cross" else ""
        label = f"{spec['architecture']} {spec['method']}{head}, BM25 top-{depth}"
        loader = "CrossEncoder" if kind == "cross" else "MultiVectorEncoder"
        a, b = ndcg10(ssft_run, qrels), ndcg10(st_run, qrels)
        rows.append(f"| {label}: ssft-rerank on the run | {run_dir.name} | {a:.4f} | | |")
        rows.append(f"| {label}: sentence-transformers {loader} on the export | {run_dir.name} | {b:.4f} | {abs(a - b):.4f} "
                    f"| {max_difference(ssft_run, st_run):.2e} |")
        if kind == "cross":
            subset = {q: candidates[q] for q in sorted(candidates)[: ns.import_queries]}
            imported = ssft_imported_scores(out / "export", subset, queries, corpus, spec["max_length"], ns.batch_size)
            sub_qrels = {q: qrels[q] for q in subset}
            c, b_sub = ndcg10(imported, sub_qrels), ndcg10({q: st_run[q] for q in subset if q in st_run}, sub_qrels)
            rows.append(f"| {label}: sentence-transformers on the export, first {len(subset)} queries | {run_dir.name} | "
                        f"{b_sub:.4f} | | |")
            gap = max_difference(imported, st_run)
            rows.append(f"| {label}: new ssft cross model built from the export (head classifier), before training, same "
                        f"{len(subset)} queries | export | {c:.4f} | {abs(c - b_sub):.4f} | {gap:.2e} |")
        notes.append(f"{kind}: sentence-transformers scored {sum(len(v) for v in st_run.values())} pairs in {st_seconds:.0f} s")
        saved.write_text(json.dumps({"key": [str(run_dir), ns.data, ns.split, depth], "rows": rows[first_rows:],
                                     "notes": notes[-1:]}))
    body = "\n".join([
        "## Exports served by sentence-transformers (issue 18)", "",
        f"{ns.data} `{ns.split}` ({len(qrels)} judged queries), the BM25 top-k of each row reranked; nDCG@10 by "
        "ir_measures over every "
        "judged query. Each run's model is exported with `ssft-export` and loaded by sentence-transformers 6.2 "
        "(`CrossEncoder` with the export's identity activation; `MultiVectorEncoder`), which scores the same pairs. "
        "|Δ| nDCG@10 against the row above; max |Δ score| over all pairs.", "",
        "| model | run | nDCG@10 | abs. diff. | max abs. score diff. |", "|---|---|---|---|---|", *rows, "",
        *[f"- {n}" for n in notes + ns.note], "",
        f"Command: `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} SSFT_DATA_HOME=../shared/data HF_HUB_OFFLINE=1 "
        "python benchmarks/export_roundtrip.py "
        f"--cross-run {ns.cross_run} --colbert-run {ns.colbert_run} --data {ns.data} --split {ns.split} --depth {ns.depth}"
        + (f" --cross-depth {ns.cross_depth}" if ns.cross_depth else "") + f" --import-queries {ns.import_queries}`",
        "(runs: `ssft-train recipes/quickstart.yaml` and `ssft-train recipes/ss_lora_colbert.yaml training.max_steps=30`)."])
    print(body)
    if not ns.no_write:
        write_section("export_roundtrip", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
