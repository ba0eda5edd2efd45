"""Exported models served by sentence-transformers rank as ssft does (issue 18), on real data.

For each trained run: ``ssft-rerank`` reranks the BM25 top-``depth`` of a split; ``ssft-export`` writes the run's
model; sentence-transformers 6.2 loads the export (``CrossEncoder`` with its saved identity activation /
``MultiVectorEncoder``) and scores the same (query, document) pairs; nDCG@10 of both (ir_measures, every judged query)
and the largest score difference are reported. For a cross-encoder, ssft then builds a new ``cross`` model from the
export (``model.name`` = the export folder, ``head: classifier``): before any training it must score as the exported
model (what epoch 0 of a run started from it evaluates).

``--epoch0`` does that through ``ssft-train`` itself: a run of ``--epoch0-recipe`` (the cross-encoder recipe's settings) with
``model.name`` = the cross export and ``model.head: classifier``, one training step, scores its starting model on its
validation queries (epoch 0 of run_info.json's ``validation_history``); sentence-transformers' ``CrossEncoder`` scores
the same validation candidates (the run's resolved recipe: the same dev queries, the same BM25 top-k) from the export,
and both nDCG@10 are reported; the run's start on its (subsampled) test queries, ``run.start.<split>.trec``, is compared
pair by pair with the CrossEncoder's scores.

Every ssft side scores in fp32 (``--precision fp32``, ``eval.precision=fp32``), as sentence-transformers does. ``ssft-rerank``
runs in a subprocess beside the sentence-transformers scoring (each on ``OMP_NUM_THREADS`` threads).

    python benchmarks/export_roundtrip.py --cross-run runs/cross_lora_nfcorpus --colbert-run runs/ss_lora_colbert \
        --data nfcorpus --split test --depth 100 --epoch0 --out /tmp/export_roundtrip
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import ir_measures
import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import write_section  # noqa: E402
from ssft.data.beir import load_dataset  # noqa: E402
from ssft.data.examples import subsample_queries  # noqa: E402
from ssft.firststage.runs import first_stage_run  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def read_run(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
    return run


def measure(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], name: str = "nDCG@10") -> float:
    """``name`` (an ir_measures measure) averaged over every judged query (one relevant document at least; a query
    without candidates scores 0), as ssft-rerank and ssft-train's validation report it."""
    parsed = ir_measures.parse_measure(name)
    judged = [q for q, rels in qrels.items() if any(r > 0 for r in rels.values())]
    per_query = {m.query_id: m.value for m in parsed.iter_calc(
        [ir_measures.Qrel(q, d, int(r)) for q, rels in qrels.items() for d, r in rels.items()],
        [ir_measures.ScoredDoc(q, d, s) for q, docs in run.items() for d, s in docs.items()])}
    return float(np.mean([per_query.get(q, 0.0) for q in judged]))


def ndcg10(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> float:
    return measure(run, qrels, "nDCG@10")


def top(first: dict[str, dict[str, float]], depth: int, corpus) -> dict[str, list[str]]:
    """Each query's top-``depth`` (ties by document id, as ssft's PairDataset), documents of the corpus only."""
    return {q: [d for d, _ in sorted(docs.items(), key=lambda kv: (-kv[1], kv[0]))[:depth] if d in corpus]
            for q, docs in first.items()}


def start_rerank(run_dir: Path, data: str, split: str, depth: int, out: Path) -> subprocess.Popen:
    """``ssft-rerank`` of the run (fp32), started in a subprocess; ``finish_rerank`` waits for it."""
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "ssft.cli.rerank", str(run_dir), "--data", data, "--first-stage", "bm25",
                             "--split", split, "--depth", str(depth), "--output", str(out), "--overwrite",
                             "--precision", "fp32"], env=ENV)


def finish_rerank(process: subprocess.Popen, out: Path) -> dict[str, dict[str, float]]:
    if process.wait() != 0:
        raise SystemExit(f"ssft-rerank failed (exit {process.returncode})")
    return read_run(out / "run.trec")


def export(run_dir: Path, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "ssft.cli.export", str(run_dir), "--output", str(out), "--overwrite"],
                   check=True, env=ENV)


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


def epoch_zero(export_dir: Path, recipe_file: Path, out: Path, test_queries: int, batch_size: int,
               label: str) -> tuple[list[str], list[str]]:
    """``ssft-train`` from the export (``model.name``, ``head: classifier``, one step): its epoch-0 validation value
    against the CrossEncoder's on the same validation candidates; its start on test against the CrossEncoder pair by
    pair. Returns (rows, notes)."""
    run_out = out / "epoch0"
    command = [sys.executable, "-m", "ssft.cli.train", str(recipe_file), f"model.name={export_dir}",
               "model.head=classifier", f"training.output_dir={run_out}", "training.max_steps=1",
               f"data.max_test_queries={test_queries}", "eval.precision=fp32", "eval.interpolation=null", "--overwrite"]
    started = time.time()
    subprocess.run(command, check=True, env=ENV)
    train_seconds = time.time() - started
    recipe = yaml.safe_load((run_out / "recipe.yaml").read_text())  # the run's resolved recipe
    info = json.loads((run_out / "run_info.json").read_text())
    d, e = recipe["data"], recipe["eval"]
    metric = e["selection_metric"]
    start = info["validation_history"][0]
    if start["step"] != 0:
        raise SystemExit(f"{run_out}/run_info.json: the first validation is at step {start['step']}, not the start")
    ssft_value = float(start[f"eval_{metric}"])
    # the validation candidates, rebuilt from the resolved recipe as ssft.pipeline.inputs defines them
    dataset = load_dataset(d["dataset"])
    qrels = subsample_queries(dataset.qrels(d["validation_split"]), d["max_validation_queries"], d["sample_seed"])
    queries = {q: dataset.queries[q] for q in qrels}
    stage = e.get("validation_first_stage") or (e["first_stage"] if e["first_stage"] in ("bm25", "bm25-stem") else "bm25")
    depth = e.get("validation_depth") or e["depth"]
    _, first = first_stage_run(stage, dataset, {}, queries, depth)
    candidates = top(first, depth, dataset.corpus)
    corpus = {doc: dataset.corpus[doc].full_text for docs in candidates.values() for doc in docs}
    started = time.time()
    ce = st_cross_scores(export_dir, candidates, queries, corpus, batch_size)
    ce_seconds = time.time() - started
    ce_value = measure(ce, qrels, metric)
    pairs = sum(len(v) for v in candidates.values())
    # the run's start on its test queries (run.start.<split>.trec) against the CrossEncoder, pair by pair
    start_run = read_run(run_out / f"run.start.{d['test_split']}.trec")
    test_queries_text = {q: dataset.queries[q] for q in start_run}
    test_corpus = {doc: dataset.corpus[doc].full_text for docs in start_run.values() for doc in docs}
    ce_test = st_cross_scores(export_dir, {q: list(docs) for q, docs in start_run.items()}, test_queries_text,
                              test_corpus, batch_size)
    test_pairs = sum(len(v) for v in start_run.values())
    rows = [
        f"| {label}: ssft-train from the export (model.name, head classifier), epoch-0 validation {metric}, "
        f"{len(qrels)} {d['validation_split']} queries, {stage} top-{depth} | epoch0 | {ssft_value:.4f} | | |",
        f"| {label}: sentence-transformers CrossEncoder on the export, the same {pairs} validation pairs | export | "
        f"{ce_value:.4f} | {abs(ssft_value - ce_value):.4f} | |",
        f"| {label}: that run's start on {len(start_run)} {d['test_split']} queries (run.start.{d['test_split']}.trec, "
        f"{test_pairs} pairs) against the CrossEncoder | epoch0 | | | {max_difference(start_run, ce_test):.2e} |"]
    notes = [f"epoch 0: `ssft-train {recipe_file.relative_to(ROOT) if recipe_file.is_relative_to(ROOT) else recipe_file} "
             + " ".join(shlex.quote(a) for a in command[4:-1]) + f"` ({train_seconds:.0f} s, one training step; "
             f"test subsampled to {test_queries} queries for CPU time); the CrossEncoder scored the {pairs} validation "
             f"pairs in {ce_seconds:.0f} s"]
    return rows, notes


def epoch_zero_rows(ns: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The epoch-0 step's rows and notes: from OUT/cross/epoch0.json with ``--reuse`` when it was made from the same
    run, recipe and test subsample, else measured now (the cross run exported into OUT/cross/export if it is not
    there yet) and kept there."""
    out = ns.out / "cross"
    saved = out / "epoch0.json"
    key = [str(ns.cross_run), str(ns.epoch0_recipe), ns.epoch0_test_queries]
    if ns.reuse and saved.is_file():
        earlier = json.loads(saved.read_text())
        if earlier.get("key") == key:
            return earlier["rows"], earlier["notes"] + [f"epoch 0: rows reused from an earlier call ({earlier['measured']})"]
    if not (out / "export" / "config.json").is_file():
        export(ns.cross_run, out / "export")
    rows, notes = epoch_zero(out / "export", ns.epoch0_recipe, out, ns.epoch0_test_queries, ns.batch_size,
                             f"the export of {ns.cross_run.name}")
    saved.write_text(json.dumps({"key": key, "rows": rows, "notes": notes,
                                 "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}))
    return rows, notes


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
    parser.add_argument("--epoch0", action="store_true",
                        help="ssft-train from the cross export: its epoch-0 validation against the CrossEncoder's")
    parser.add_argument("--epoch0-recipe", type=Path, default=ROOT / "recipes" / "cross_lora_nfcorpus.yaml")
    parser.add_argument("--epoch0-test-queries", type=int, default=10,
                        help="test queries of the epoch-0 run (its start and end are scored on them; CPU time)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/export_roundtrip"))
    parser.add_argument("--no-write", action="store_true", help="print, do not write BENCHMARKS.md")
    parser.add_argument("--note", action="append", default=[], help="a line for the section (how the runs were made)")
    parser.add_argument("--reuse", action="store_true",
                        help="take a run's rows from an earlier call's OUT/<kind>/rows.json (same run, data, depth)")
    parser.add_argument("--only-epoch0", action="store_true",
                        help="only the epoch-0 step (its rows saved in OUT/cross/epoch0.json for a later --reuse call)")
    ns = parser.parse_args()
    if (ns.epoch0 or ns.only_epoch0) and ns.cross_run is None:
        parser.error("--epoch0 starts from the cross run's export: give --cross-run")
    if ns.only_epoch0:
        more_rows, more_notes = epoch_zero_rows(ns)
        print("\n".join(more_rows + more_notes))
        return 0
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
        candidates = top({q: docs for q, docs in first.items() if q in queries}, depth, dataset.corpus)
        corpus = {d: dataset.corpus[d].full_text for docs in candidates.values() for d in docs}
        out = ns.out / kind
        saved = out / "rows.json"
        key = [str(run_dir), ns.data, ns.split, depth]
        if ns.reuse and saved.is_file():
            earlier = json.loads(saved.read_text())
            if earlier["key"] == key:
                rows += earlier["rows"]
                notes += earlier["notes"] + [f"{kind}: rows reused from an earlier call of this script "
                                             f"({earlier.get('measured', 'date not recorded')})"]
                continue
        first_rows, first_notes = len(rows), len(notes)
        rerank = start_rerank(run_dir, ns.data, ns.split, depth, out / "rerank")  # beside the scoring below
        export(run_dir, out / "export")
        spec = json.loads((run_dir / "model" / "ssft_model.json").read_text())
        scorer = st_cross_scores if kind == "cross" else st_colbert_scores
        started = time.time()
        st_run = scorer(out / "export", candidates, queries, corpus, ns.batch_size)
        st_seconds = time.time() - started
        ssft_run = finish_rerank(rerank, out / "rerank")
        head = f" (head {spec.get('head', 'cls_linear')})" if kind == "cross" else ""
        label = f"{spec['architecture']} {spec['method']}{head}, BM25 top-{depth}"
        loader = "CrossEncoder" if kind == "cross" else "MultiVectorEncoder"
        a, b = ndcg10(ssft_run, qrels), ndcg10(st_run, qrels)
        pairs = sum(len(v) for v in st_run.values())
        rows.append(f"| {label}: ssft-rerank on the run (fp32) | {run_dir.name} | {a:.4f} | | |")
        rows.append(f"| {label}: sentence-transformers {loader} on the export, {pairs} pairs | {run_dir.name} | {b:.4f} | "
                    f"{abs(a - b):.4f} | {max_difference(ssft_run, st_run):.2e} |")
        notes.append(f"{kind}: sentence-transformers scored {pairs} pairs in {st_seconds:.0f} s (ssft-rerank running "
                     f"beside it)")
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
        saved.write_text(json.dumps({"key": key, "rows": rows[first_rows:], "notes": notes[first_notes:],
                                     "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}))
    if ns.epoch0:
        more_rows, more_notes = epoch_zero_rows(ns)
        rows += more_rows
        notes += more_notes
    body = "\n".join([
        "## Exports served by sentence-transformers: the same rankings as ssft (NFCorpus)", "",
        f"{ns.data} `{ns.split}` ({len(qrels)} judged queries), the BM25 top-k of each row reranked; nDCG@10 by "
        "ir_measures over every judged query. Each run's model is exported with `ssft-export` and loaded by "
        "sentence-transformers 6.2 (`CrossEncoder` with the export's identity activation; `MultiVectorEncoder`), which "
        "scores the same pairs in fp32, as ssft does here. |Δ| nDCG@10 against the row above; max |Δ score| over all "
        "pairs. The epoch-0 rows: a cross-encoder run started from the export, its validation before the first step "
        "against the CrossEncoder on the same validation candidates.", "",
        "| model | run | nDCG@10 | abs. diff. | max abs. score diff. |", "|---|---|---|---|---|", *rows, "",
        *[f"- {n}" for n in notes + ns.note], "",
        f"Command: `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} SSFT_DATA_HOME=../shared/data HF_HUB_OFFLINE=1 "
        "python benchmarks/export_roundtrip.py " + " ".join(shlex.quote(a) for a in sys.argv[1:] if a != "--no-write") + "`",
        "(runs: `ssft-train recipes/cross_lora_nfcorpus.yaml` and "
        "`ssft-train recipes/ss_lora_colbert.yaml training.max_steps=30`)."])
    print(body)
    if not ns.no_write:
        write_section("export_roundtrip", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
