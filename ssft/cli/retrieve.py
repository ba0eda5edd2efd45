"""ssft-retrieve MODEL --data DATASET --split SPLIT --output OUT_DIR — full retrieval with a dense model.

Encodes the corpus with the document tower into a faiss index (flat inner product by default; ivf, hnsw,
pq, ivfpq by ``--index``; on the GPU with faiss-gpu), retrieves the top-``depth`` documents of every query of
the split, and writes OUT_DIR/run.trec, per-query metrics and metrics.json ({split: {...}} — the contract of
ssft-train). ``--passage-words N`` splits documents into N-word passages scored by maxP (000 Eq. 2).

``--fusion ALPHA`` also runs BM25 (bm25s) for the same queries and fuses its top-``depth`` with the dense
top-``depth`` by 003 Eq. 7 (α · BM25 + dense over the union, a missing score filled with that list's minimum):
metrics.json then holds ``bm25`` and ``{split}+bm25.fusion`` beside ``{split}``, and fusion.json the α used. ``--fusion auto
--tune-split dev`` picks α on another split (grid ``ssft.eval.fusion.FUSION_ALPHAS``, by ``--tune-metric``).
A student distilled with inherited documents retrieves from its teacher's index by itself (its saved spec names
the teacher). ``--documents-from TEACHER`` serves any dense model's query tower against another dense model's
document index (a saved ssft dense model, or a sentence embedder by hub id / folder with ``--teacher-pooling``),
the asymmetric set-up of 002 / 004; the teacher's corpus vectors go to the on-disk embedding cache.

OUT_DIR follows the output-folder rule of ``ssft.core.run_folder`` (as ssft-rerank's ``--output``): new, empty or an
earlier ssft-retrieve output, a finished one only with ``--overwrite``; never the model, dataset or ``--index-dir``
being read, a folder holding one or a folder inside one; checked before anything is encoded.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ssft.cli._common import (
    add_precision_argument,
    at_least_one,
    dataset_sources,
    model_dir,
    model_sources,
    output_path,
    parse_args,
    precision_of,
    result_folder,
    setup_logging,
)
from ssft.core.errors import SsftError, cli_entry, user_path
from ssft.core.run_folder import RETRIEVE_OUTPUTS


@cli_entry("ssft-retrieve")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ssft-retrieve", description="Retrieve from a whole corpus with a trained dense model.")
    parser.add_argument("model", type=user_path, help="output folder of ssft-train (or its model/ folder)")
    parser.add_argument("--data", required=True, help="BEIR folder, or dataset name under $SSFT_DATA_HOME")
    parser.add_argument("--split", required=True, help="qrels split whose queries are retrieved and evaluated")
    parser.add_argument("--output", required=True, type=output_path, help="folder for run.trec and metrics.json")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--index", default="flat", help="flat (exact), ivf, hnsw, pq, ivfpq")
    parser.add_argument("--index-dir", type=user_path, default=None,
                        help="retrieve from the index ssft-encode built in this folder (no corpus encoding; its passage "
                             "settings and, unless --precision is given, its precision apply)")
    parser.add_argument("--passage-words", type=int, default=None, help="split documents into passages of N words (maxP)")
    parser.add_argument("--passage-stride", type=int, default=None, help="words between passage starts (default N)")
    parser.add_argument("--metrics", default="P@20,nDCG@5,nDCG@10,nDCG@20,RR@10,R@100")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--fusion", default=None, help="dense-sparse fusion with BM25 (003 Eq. 7): weight alpha >= 0, or 'auto'")
    parser.add_argument("--tune-split", default=None, help="with --fusion auto: the split alpha is tuned on (e.g. dev)")
    parser.add_argument("--tune-metric", default="nDCG@10", help="with --fusion auto: the metric alpha maximises")
    parser.add_argument("--documents-from", default=None,
                        help="encode documents with this dense model instead (a saved ssft dense model, or a model name)")
    parser.add_argument("--teacher-pooling", default="mean", help="pooling of a --documents-from model given by name")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="run Python code the saved model ships (a model saved with trust_remote_code); only for "
                             "models you trust")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-retrieve result in --output (only what ssft-retrieve wrote is removed)")
    add_precision_argument(parser)
    ns = parse_args(parser, argv)

    setup_logging("INFO")
    from ssft.core.io import atomic_write_json
    from ssft.data.beir import load_dataset
    from ssft.data.trec import write_run
    from ssft.eval.metrics import evaluate_run, parse_measures, write_per_query
    from ssft.eval.rerank import format_table
    from ssft.eval.retrieve import INDEX_KINDS, retrieve
    from ssft.models import load_ranker

    at_least_one(ns, "depth", "batch_size")
    precision = precision_of(ns)
    if ns.index_dir is not None and ns.passage_words is not None:
        raise SsftError("--passage-words: an index built by ssft-encode keeps its own passages; drop --passage-words")
    if ns.index not in INDEX_KINDS:
        raise SsftError(f"--index: expected one of {', '.join(INDEX_KINDS)}, got '{ns.index}'")
    if ns.passage_words is not None and ns.passage_words < 1:
        raise SsftError("--passage-words must be >= 1")
    fusion = _parse_fusion(ns.fusion, ns.tune_split)
    # the output folder is checked after the flags, before anything is loaded; never what is read
    sources = model_sources(ns.model, model_dir(ns.model)) + dataset_sources(ns.data)
    if ns.index_dir is not None:
        sources += ((ns.index_dir, "the index folder being read (--index-dir)"),)
    if ns.documents_from and Path(ns.documents_from).exists():
        sources += ((Path(ns.documents_from), "the --documents-from model being read"),)
    folder = result_folder(ns.output, "ssft-retrieve", RETRIEVE_OUTPUTS, ns.overwrite, sources)
    metrics = [m.strip() for m in ns.metrics.split(",") if m.strip()]
    parse_measures(metrics, "--metrics")
    if fusion == "auto":
        parse_measures([ns.tune_metric], "--tune-metric")
    dataset = load_dataset(ns.data)
    folder.add_sources((dataset.path, "the dataset folder being read"))
    qrels = dataset.qrels(ns.split)
    tune_qrels = dataset.qrels(ns.tune_split) if fusion == "auto" else None
    model = load_ranker(model_dir(ns.model), trust_remote_code=ns.trust_remote_code)
    if not model.full_retrieval:
        raise SsftError(f"{ns.model}: full retrieval needs a single-vector dense model (architecture 'dense'), "
                        f"not '{model.architecture}'; use ssft-rerank")
    if ns.documents_from:
        from ssft.teachers.dense import load_teacher, teacher_reference

        model.inherit_documents(load_teacher(teacher_reference(ns.documents_from, ns.teacher_pooling,
                                                               model.spec["max_length"], model.spec["query_max_length"]),
                                             trust_remote_code=ns.trust_remote_code))
    queries = {q: dataset.queries[q] for q in qrels if q in dataset.queries}
    from ssft.core.precision import set_precision
    from ssft.eval.retrieve import corpus_vectors

    saved = doc_vectors = None
    if ns.index_dir is not None:
        from ssft.eval.index import load_index

        saved = load_index(ns.index_dir, dataset=dataset)  # refused when --data is not the corpus indexed
        precision = ns.precision or saved.manifest["precision"]
        settings = saved.manifest.get("settings", {})
        ns.passage_words, ns.passage_stride = settings.get("passage_words"), settings.get("passage_stride")
    # a model that only serves: switched for good (int8: its quantised copy), its inherited document encoder too
    model = set_precision(model, precision)
    if model.document_teacher is not None:
        model.document_teacher.set_precision(precision)
    if saved is not None:
        from ssft.models.embedding_cache import model_fingerprint

        if model_fingerprint(model.document_source()) != saved.manifest["model"]:
            raise SsftError(f"--index-dir: {ns.index_dir} was encoded by another model or precision "
                            f"({saved.manifest['precision']}); run ssft-encode with this model")
    else:
        doc_vectors = corpus_vectors(model, dataset, ns.batch_size, ns.passage_words, ns.passage_stride)
    run = retrieve(model, dataset, queries, ns.depth, ns.batch_size, ns.index, ns.passage_words, ns.passage_stride,
                   doc_vectors=doc_vectors, saved_index=saved)
    aggregate, per_query = evaluate_run(qrels, run, metrics)
    results = {ns.split: aggregate}
    info: dict = {}
    with folder:  # from here on, OUT_DIR is written (and locked); metrics.json goes first and comes back last
        folder.claim()
        if ns.overwrite:
            folder.clear()
        folder.mark_unfinished()
        if fusion is not None:
            from ssft.eval.retrieve import tune_fusion, write_fusion
            from ssft.firststage.bm25 import BM25

            bm25 = BM25(dataset)
            if fusion == "auto":
                tune_queries = {q: dataset.queries[q] for q in tune_qrels if q in dataset.queries}
                fusion = tune_fusion(model, dataset, tune_qrels, bm25.search(tune_queries, ns.depth), ns.depth,
                                     ns.tune_metric, ns.batch_size, index_kind=ns.index, passage_words=ns.passage_words,
                                     passage_stride=ns.passage_stride, doc_vectors=doc_vectors, saved_index=saved)
                print(f"fusion weight tuned on {ns.tune_split} by {ns.tune_metric}: alpha = {fusion:g}")
            sparse = bm25.search(queries, ns.depth)
            results["bm25"] = evaluate_run(qrels, sparse, metrics)[0]
            results.update(write_fusion(run, sparse, fusion, qrels, ns.split, "bm25", metrics, ns.output, info))
            write_run(sparse, ns.output / f"run.bm25.{ns.split}.trec", tag="bm25")
        write_run(run, ns.output / "run.trec", tag="ssft-dense")
        write_per_query(per_query, ns.output / f"per_query.{ns.split}.tsv")
        if info:
            atomic_write_json(ns.output / "fusion.json", {**info, "tuned_on": ns.tune_split, "depth": ns.depth})
        atomic_write_json(ns.output / "metrics.json", results)
    print(format_table(results, metrics))
    return 0


def _parse_fusion(value: str | None, tune_split: str | None) -> float | str | None:
    """--fusion: None, 'auto' (needs --tune-split), or a weight >= 0."""
    if value is None:
        if tune_split is not None:
            raise SsftError("--tune-split is for --fusion auto")
        return None
    if value == "auto":
        if not tune_split:
            raise SsftError("--fusion auto tunes the weight on another split: give --tune-split (e.g. dev)")
        return "auto"
    try:
        alpha = float(value)
    except ValueError:
        raise SsftError(f"--fusion: expected a weight >= 0 or 'auto', got '{value}'") from None
    if not alpha >= 0:
        raise SsftError(f"--fusion: expected a weight >= 0 or 'auto', got '{value}'")
    return alpha


if __name__ == "__main__":
    sys.exit(main())
