"""How well each architecture ranks at step 0 when built from a sentence-transformers checkpoint, before any training:
the warm starts (ColBERT's PCA projection, TwinBERT's cosine-started combiner) against the starts they replaced.

    SSFT_DATA_HOME=../shared/data python benchmarks/warm_starts.py [--dataset nfcorpus] [--split dev]
        [--max-queries 100] [--depth 20] [--arms colbert_pca,colbert_random,...] [--write]

Each arm reranks the BM25 top-``depth`` of the first ``--max-queries`` judged queries of ``--split`` (a validation
split: the starts are chosen on it, never on a test split) with the model as built, fp32 on torch, and reports
nDCG@10 beside BM25's on the same queries. Arms:

- ``dense``: the checkpoint as sentence-transformers uses it (mean pooling, cosine): the reference a start should
  reach;
- ``colbert_pca`` / ``colbert_random`` / ``colbert_identity``: ColBERT at ``colbert_dim`` 128 with the projection
  started from the corpus's token states (the default) or at PyTorch's default, and at the full width (384, the
  identity);
- ``twin_cosine`` / ``twin_random``: TwinBERT's combiner started as the checkpoint's cosine (the default) or at random
  (as published).
- ``cross_dual_segment_mean`` / ``cross_dual_cls_sep``: a cross-encoder with 004's dual-pooled head (no scoring
  layer: proxy query and document embeddings pooled from the joint encoding, Eq. 15 / Eq. 14), the only cross-encoder
  start with nothing random in it.

``--write`` writes BENCHMARKS.md § warm_starts (``--section``, ``--title``: another section, e.g. § warm_starts_cross
for the cross-encoder arms).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

import ssft
from ssft.config.recipe import ModelConfig
from ssft.data.beir import load_dataset
from ssft.models.colbert import ColBert
from ssft.models.cross import CrossEncoder
from ssft.models.twin import TwinBert

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_section_options, write_section  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ARMS = ("dense", "colbert_pca", "colbert_random", "colbert_identity", "twin_cosine", "twin_random",
        "cross_dual_segment_mean", "cross_dual_cls_sep")


def subset(dataset: str, split: str, max_queries: int, folder: Path) -> Path:
    """A BEIR folder holding ``dataset``'s corpus and queries and the first ``max_queries`` judged queries of
    ``split`` (in the qrels file's order)."""
    source = load_dataset(dataset)
    qrels = source.qrels(split)
    kept = list(qrels)[:max_queries]
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as fh:
        for doc_id, doc in source.corpus.items():
            fh.write(json.dumps({"_id": doc_id, "title": doc.title, "text": doc.text}) + "\n")
    with open(folder / "queries.jsonl", "w") as fh:
        for qid in kept:
            fh.write(json.dumps({"_id": qid, "text": source.queries[qid]}) + "\n")
    with open(folder / "qrels" / f"{split}.tsv", "w") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid in kept:
            fh.writelines(f"{qid}\t{doc}\t{grade}\n" for doc, grade in qrels[qid].items())
    return folder


def build(arm: str, documents: list[str], seed: int):
    if arm == "dense":
        return ssft.load(MODEL, precision="fp32"), None
    torch.manual_seed(seed)
    if arm.startswith("colbert"):
        config = ModelConfig(name=MODEL, architecture="colbert", max_length=128, query_max_length=20,
                             colbert_dim=384 if arm == "colbert_identity" else 128,
                             projection_start="random" if arm == "colbert_random" else "pca")
        ranker = ColBert.build(config, "full", {})
    elif arm.startswith("cross_dual"):  # 004's dual-pooled head: no scoring layer, the pretrained states rank
        config = ModelConfig(name=MODEL, architecture="cross", max_length=128, head="dual_pooled",
                             dual_pooling=arm.removeprefix("cross_dual_"))
        ranker = CrossEncoder.build(config, "full", {})
    else:
        config = ModelConfig(name=MODEL, architecture="twin", max_length=128, query_max_length=20,
                             combiner_start="random" if arm == "twin_random" else "cosine")
        ranker = TwinBert.build(config, "full", {})
    note = ranker.fit_start(documents, seed=seed)  # what a training run does before its first step
    ranker.eval()
    return ranker, note


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="nfcorpus")
    p.add_argument("--split", default="dev", help="a validation split (starts are chosen on it)")
    p.add_argument("--max-queries", type=int, default=100)
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default="", help="a JSON file for the figures (default: none)")
    add_section_options(p, "warm_starts", "How each architecture ranks before training (warm starts)")
    p.add_argument("--results", default="", help="a JSON file an earlier run wrote with --out: report its figures "
                                                 "instead of measuring again (--measured-at: the commit they are from)")
    p.add_argument("--measured-at", default="", help="with --results: the commit the figures were measured at")
    p.add_argument("--write", action="store_true", help="write BENCHMARKS.md § warm_starts")
    a = p.parse_args()
    arms = [x for x in a.arms.split(",") if x]
    for arm in arms:
        if arm not in ARMS:
            p.error(f"--arms: unknown arm '{arm}' ({', '.join(ARMS)})")
    if a.split == "test":
        p.error("--split: the starts are compared on a validation split, not on test")
    results: dict[str, dict] = json.loads(Path(a.results).read_text()) if a.results else {}
    with tempfile.TemporaryDirectory() as tmp:
        data = None if a.results else subset(a.dataset, a.split, a.max_queries, Path(tmp) / a.dataset)
        documents = [] if a.results else [d.full_text for d in load_dataset(a.dataset).corpus.values()]
        for arm in [] if a.results else arms:
            started, cpu = time.perf_counter(), time.process_time()
            ranker, note = build(arm, documents, a.seed)
            metrics = ssft.evaluate(ranker, str(data), split=a.split, first_stage="bm25", depth=a.depth,
                                    precision="fp32", backend="torch")
            results[arm] = {"nDCG@10": metrics[a.split]["nDCG@10"], "bm25": metrics["bm25"]["nDCG@10"], "note": note,
                            "seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu}
            print(f"{arm}: nDCG@10 {results[arm]['nDCG@10']:.4f} (BM25 {results[arm]['bm25']:.4f})"
                  + (f"; {note}" if note else ""), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))
    bm25 = next(iter(results.values()))["bm25"] if results else float("nan")
    lines = [f"## {a.title}", "",
             f"{MODEL}, {a.dataset} {a.split} (first {a.max_queries} judged queries), reranking the BM25 top-{a.depth}, "
             f"fp32, torch, nothing trained. BM25 on the same queries: nDCG@10 {bm25:.4f}."
             + (f" Measured at commit {a.measured_at}." if a.measured_at else ""), "",
             "CPU s: CPU-seconds of the process for the arm (model build, PCA fit, encoding and scoring).", "",
             "| start | nDCG@10 | × dense | CPU s |", "|---|---:|---:|---:|"]
    dense = results.get("dense", {}).get("nDCG@10")
    for arm, r in results.items():
        ratio = f"{r['nDCG@10'] / dense:.2f}" if dense else "–"
        lines.append(f"| {arm} | {r['nDCG@10']:.4f} | {ratio} | {r['cpu_seconds']:.0f} |")
    body = "\n".join(lines) + "\n"
    print(body)
    if a.write:
        write_section(a.section, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
