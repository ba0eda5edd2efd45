"""ssft-retrieve MODEL --data DATASET --split SPLIT --output OUT_DIR — full retrieval with a dense or ColBERT model.
ssft-retrieve MODEL --corpus CORPUS --queries FILE --output OUT_DIR — your own queries, no qrels: the top-``depth``
documents of CORPUS (a dataset, a BEIR folder, a .jsonl / .tsv file; or ``--index-dir`` built by ``ssft.index`` or
ssft-encode) for each query of FILE, written as OUT_DIR/run.trec and OUT_DIR/results.jsonl (each query's text and
top hits with ids, scores and titles), nothing evaluated (``ssft.pipeline.search``).

Encodes the corpus with the document tower into a faiss index (flat inner product by default; ivf, hnsw,
pq, ivfpq by ``--index``; on the GPU with faiss-gpu), retrieves the top-``depth`` documents of every query of
the split, and writes OUT_DIR/run.trec, per-query metrics and metrics.json ({split: {...}} — the contract of
ssft-train). ``--passage-words N`` splits documents into N-word passages scored by maxP (DAFT, Eq. 2).

A ColBERT model indexes the corpus's token vectors instead: every query token fetches its ``--token-k`` nearest
document tokens, and the documents they belong to are scored by exact MaxSim (an approximate ``--index`` such as
ivfpq only costs recall). With ``--index-dir`` it reads the token index ssft-encode built for it.

``--fusion ALPHA`` also runs BM25 (bm25s) for the same queries and fuses its top-``depth`` with the dense
top-``depth`` by TCT-ColBERT's Eq. 7 (α · BM25 + dense over the union, a missing score filled with that list's minimum):
metrics.json then holds ``bm25`` and ``{split}+bm25.fusion`` beside ``{split}``, and fusion.json the α used. ``--fusion auto
--tune-split dev`` picks α on another split (grid ``ssft.eval.fusion.FUSION_ALPHAS``, by ``--tune-metric``).
A student distilled with inherited documents retrieves from its teacher's index by itself (its saved spec names
the teacher). ``--documents-from TEACHER`` serves any dense model's query tower against another dense model's
document index (a saved ssft dense model, or a sentence embedder by hub id / folder with ``--teacher-pooling``),
the asymmetric set-up of query-encoder distillation and EmbedDistill; the teacher's corpus vectors go to the
on-disk embedding cache.

OUT_DIR follows the output-folder rule of ``ssft.core.run_folder`` (as ssft-rerank's ``--output``): new, empty or an
earlier ssft-retrieve output, a finished one only with ``--overwrite``; never the model, dataset or ``--index-dir``
being read, a folder holding one or a folder inside one; checked before anything is encoded.
"""
from __future__ import annotations

import sys

from ssft.cli._common import (
    add_backend_argument,
    add_batch_size_argument,
    add_metrics_argument,
    add_model_argument,
    add_precision_argument,
    add_trust_argument,
    make_parser,
    model_argument,
    output_path,
    parse_args,
    setup_logging,
)
from ssft.core.errors import cli_entry, user_path


@cli_entry("ssft-retrieve")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-retrieve", "Retrieve from a whole corpus with a dense or ColBERT model.")
    add_model_argument(parser)
    parser.add_argument("--data", default=None, help="BEIR folder, or dataset name under $SSFT_DATA_HOME")
    parser.add_argument("--split", default=None, help="qrels split whose queries are retrieved and evaluated")
    parser.add_argument("--queries", type=user_path, default=None,
                        help="without --split: a file of your own queries (queries.jsonl, id<TAB>text lines, or one "
                             "query a line), retrieved from --corpus or --index-dir; writes run.trec and results.jsonl "
                             "(each query's top hits with ids, scores and titles), nothing evaluated")
    parser.add_argument("--corpus", default=None,
                        help="with --queries: the corpus searched: a dataset name, a BEIR folder, or a .jsonl "
                             "({_id, title, text} lines) or .tsv (id<TAB>text or id<TAB>title<TAB>text) file")
    parser.add_argument("--output", required=True, type=output_path, help="folder for run.trec and metrics.json")
    parser.add_argument("--depth", type=int, default=100, help="documents retrieved per query")
    parser.add_argument("--index", default="flat", help="flat (exact), ivf, hnsw, pq, ivfpq")
    parser.add_argument("--index-dir", type=user_path, default=None,
                        help="retrieve from the index ssft-encode built in this folder (no corpus encoding; its passage "
                             "settings and, unless --precision is given, its precision apply)")
    parser.add_argument("--passage-words", type=int, default=None, help="split documents into passages of N words (maxP)")
    parser.add_argument("--passage-stride", type=int, default=None, help="words between passage starts (default N)")
    parser.add_argument("--token-k", type=int, default=None,
                        help="ColBERT: document tokens fetched per query token; their documents are scored by exact "
                             "MaxSim (default 512)")
    add_metrics_argument(parser)
    add_batch_size_argument(parser)
    parser.add_argument("--fusion", default=None,
                        help="dense-sparse fusion with BM25 (TCT-ColBERT's interpolation: alpha * BM25 + dense over "
                             "the union of both lists): weight alpha >= 0, or 'auto'")
    parser.add_argument("--tune-split", default=None, help="with --fusion auto: the split alpha is tuned on (e.g. dev)")
    parser.add_argument("--tune-metric", default="nDCG@10", help="with --fusion auto: the metric alpha maximises")
    parser.add_argument("--documents-from", default=None,
                        help="encode documents with this dense model instead (a saved ssft dense model, or a model name)")
    parser.add_argument("--teacher-pooling", default="mean", help="pooling of a --documents-from model given by name")
    add_trust_argument(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-retrieve result in --output (only what ssft-retrieve wrote is removed)")
    add_precision_argument(parser)
    add_backend_argument(parser)  # with --index-dir: the index's unless given
    ns = parse_args(parser, argv)
    setup_logging("INFO")
    from ssft.eval.rerank import format_table
    from ssft.pipeline.rerank import metric_list
    from ssft.pipeline.retrieve import retrieve_corpus
    from ssft.pipeline.search import RESULTS_FILE, search_queries

    if ns.split is None:  # your own queries, no qrels: nothing evaluated
        if ns.queries is None:
            parser.error("--split is required (a qrels split to evaluate), or --queries FILE with --corpus or "
                         "--index-dir (your own queries, nothing evaluated)")
        for flag, value in (("--fusion", ns.fusion), ("--tune-split", ns.tune_split),
                            ("--documents-from", ns.documents_from), ("--passage-words", ns.passage_words)):
            if value is not None:
                parser.error(f"{flag}: for a --split with qrels; drop it with --queries alone")
        run = search_queries(model_argument(ns, ns.output), ns.queries, ns.output, corpus=ns.corpus or ns.data,
                             index_dir=ns.index_dir,
                             depth=ns.depth, index=ns.index, batch_size=ns.batch_size, precision=ns.precision,
                             backend=ns.backend, token_k=ns.token_k, overwrite=ns.overwrite,
                             trust_remote_code=ns.trust_remote_code)
        print(f"retrieved the top-{ns.depth} documents for {len(run)} queries: {ns.output / 'run.trec'}, "
              f"{ns.output / RESULTS_FILE}")
        return 0
    if ns.queries is not None or ns.corpus is not None:
        parser.error("--queries / --corpus: your own queries are retrieved without --split (no qrels)")
    if ns.data is None:
        parser.error("--data is required with --split")

    results = retrieve_corpus(
        model_argument(ns, ns.output), ns.data, ns.split, ns.output, depth=ns.depth, index=ns.index,
        index_dir=ns.index_dir,
        passage_words=ns.passage_words, passage_stride=ns.passage_stride, metrics=ns.metrics, fusion=ns.fusion,
        tune_split=ns.tune_split, tune_metric=ns.tune_metric, documents_from=ns.documents_from,
        teacher_pooling=ns.teacher_pooling, batch_size=ns.batch_size, precision=ns.precision, backend=ns.backend,
        overwrite=ns.overwrite, trust_remote_code=ns.trust_remote_code, token_k=ns.token_k,
        on_tuned=lambda alpha: print(f"fusion weight tuned on {ns.tune_split} by {ns.tune_metric}: alpha = {alpha:g}"))
    print(format_table(results, metric_list(ns.metrics)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
