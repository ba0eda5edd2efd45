"""ssft-rerank MODEL --data DATASET --first-stage RUN.trec --split SPLIT --output OUT_DIR

Reranks a first-stage run with a model (a training run, a saved model, or a checkpoint by folder or hub id); writes
OUT_DIR/run.trec and OUT_DIR/metrics.json ({split: {...}, first_stage_name: {...}}, the same contract as ssft-train).
With ``--split``, ``--average-over`` says which queries the metrics average over.

Without ``--split`` nothing is evaluated (no qrels are needed): the queries are ranked and OUT_DIR/run.trec written,
no metrics. The queries are the dataset's (those the first stage has candidates for), or ``--queries FILE`` of your
own texts: a ``.jsonl`` of ``{"_id", "text"}`` objects (BEIR's queries.jsonl), ``id<TAB>text`` lines (when the first
line has a tab), or one query a line (its id its line number). The first stage (``bm25``, or a run file whose query
ids are those queries') gives the candidates; their texts come from ``--data``'s corpus.

OUT_DIR follows the output-folder rule of ``ssft.core.run_folder``: new, empty or an earlier ssft-rerank output (a finished
one only with ``--overwrite``, which removes only what ssft-rerank wrote); never a training run's folder, nor the run,
the dataset or the first-stage file being read, a folder holding one or a folder inside one. Everything is loaded
and checked before OUT_DIR is touched (and locked); metrics.json is removed first and written last.
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
    backend_value,
    make_parser,
    model_argument,
    output_path,
    parse_args,
    precision_value,
    setup_logging,
)
from ssft.core.errors import cli_entry, user_path


@cli_entry("ssft-rerank")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-rerank", "Rerank a first-stage run with a model.")
    add_model_argument(parser)
    parser.add_argument("--data", required=True, help="BEIR folder, or dataset name under $SSFT_DATA_HOME")
    parser.add_argument("--first-stage", required=True, help="TREC run file to rerank, or 'bm25'")
    parser.add_argument("--split", default=None,
                        help="qrels split to evaluate on (e.g. test); without it the queries are ranked, not evaluated")
    parser.add_argument("--output", required=True, type=output_path, help="folder for run.trec and metrics.json")
    parser.add_argument("--depth", type=int, default=100, help="rerank the first stage's top-k")
    add_metrics_argument(parser)
    add_batch_size_argument(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-rerank result in --output (only what ssft-rerank wrote is removed)")
    add_trust_argument(parser)
    parser.add_argument("--merge-lora", action="store_true", help="merge LoRA weights into the backbone first (lora, lora++)")
    parser.add_argument("--queries", type=user_path, default=None, metavar="FILE",
                        help="without --split: a file of your own queries to rank (queries.jsonl, id<TAB>text lines, or "
                             "one query a line) instead of the dataset's; the first stage gives their candidates")
    parser.add_argument("--average-over", choices=("judged", "run"), default=None,
                        help="with --split: average the metrics over every judged query of the split, a query the first "
                             "stage lacks scoring 0 (judged, as ssft-train does), or only over the queries the first "
                             "stage has (run); default: judged")
    add_precision_argument(parser)
    add_backend_argument(parser)
    ns = parse_args(parser, argv)
    setup_logging("INFO")
    from ssft.eval.rerank import format_table
    from ssft.pipeline.rerank import metric_list, rerank

    if ns.queries is not None and str(ns.queries) in ("judged", "run"):  # the spelling of earlier releases
        if ns.average_over is not None:
            parser.error(f"--queries {ns.queries} is the old spelling of --average-over {ns.queries}: give "
                         f"--average-over only")
        print(f"ssft-rerank: deprecated: --queries {ns.queries} is now --average-over {ns.queries}; --queries takes "
              f"a file of queries only in the next release", file=sys.stderr)
        ns.average_over, ns.queries = str(ns.queries), None
    if ns.queries is not None and ns.split is not None:
        parser.error(f"--queries {ns.queries}: a file of your own queries is ranked without --split (no qrels); with "
                     f"--split the split's judged queries are evaluated")
    if ns.average_over is not None and ns.split is None:
        parser.error("--average-over: metrics are averaged with --split only (no qrels, nothing evaluated)")
    mode = ns.average_over or "judged"
    queries_file = ns.queries
    model = model_argument(ns, ns.output)
    results = rerank(model, ns.data, ns.first_stage, ns.split, ns.output, depth=ns.depth,
                     metrics=ns.metrics if ns.split is not None else None, batch_size=ns.batch_size,
                     overwrite=ns.overwrite, trust_remote_code=ns.trust_remote_code, merge_lora=ns.merge_lora,
                     queries=mode, precision=precision_value(ns), queries_file=queries_file,
                     backend=backend_value(ns))
    if ns.split is None:
        print(f"ranked, not evaluated (no --split): {ns.output / 'run.trec'}")
        return 0
    print(format_table(results, metric_list(ns.metrics)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
