"""ssft-eval MODEL --datasets nfcorpus,scifact,cranfield --output OUT [--first-stage bm25|full] [--depth N]

One model on several datasets, BM25 beside it: one table of nDCG@10 / R@100 per dataset and their mean, with a paired
t-test against BM25 per dataset (``ssft.pipeline.evaluate.evaluate_datasets``). MODEL is an ssft-train run folder (or
its model/), or a sentence embedder by hub id or folder (e.g. sentence-transformers/all-MiniLM-L6-v2). A dataset is
anything ``--data`` takes elsewhere: a BEIR folder or a name under $SSFT_DATA_HOME, a hub id in the BeIR or MTEB layout
(BeIR/nfcorpus, mteb/nfcorpus), an ir_datasets id (beir/nfcorpus/test, irds:cranfield).

Writes OUT/eval.md (the table), OUT/eval.png (a bar figure) and OUT/eval.json (everything; written last). OUT follows
the output-folder rule of ``ssft.core.run_folder``: new, empty or an earlier ssft-eval output (a finished one only with
``--overwrite``, which removes only what ssft-eval wrote); never the model or a dataset being read. Every dataset and
the model are loaded and checked before OUT is touched.
"""
from __future__ import annotations

import sys

from ssft.cli._common import (
    add_backend_argument,
    add_precision_argument,
    backend_value,
    make_parser,
    output_path,
    parse_args,
    precision_of,
    setup_logging,
)
from ssft.core.errors import cli_entry


@cli_entry("ssft-eval")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-eval", "Evaluate a model on several datasets beside BM25.")
    parser.add_argument("model", help="ssft-train run folder (or its model/), or a sentence embedder's hub id / folder")
    parser.add_argument("--datasets", "--data", dest="datasets", required=True,
                        help="comma-separated datasets: BEIR folders or names under $SSFT_DATA_HOME, hub ids "
                             "(BeIR/nfcorpus, mteb/nfcorpus), ir_datasets ids (beir/nfcorpus/test, irds:cranfield)")
    parser.add_argument("--output", required=True, type=output_path, help="folder for eval.json, eval.md and eval.png")
    parser.add_argument("--first-stage", default="bm25", choices=["bm25", "full"],
                        help="bm25: rerank the BM25 top-k (any model; the default); full: the model retrieves from the "
                             "whole corpus (dense models)")
    parser.add_argument("--depth", type=int, default=100, help="candidates reranked / retrieved per query (default 100)")
    parser.add_argument("--split", default="test", help="qrels split of every dataset (default test)")
    parser.add_argument("--metrics", default="nDCG@10,R@100", help="ir_measures names (default nDCG@10,R@100)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--pooling", default="mean", help="pooling of a model given by name (default mean)")
    parser.add_argument("--max-length", type=int, default=256, help="document tokens of a model given by name")
    parser.add_argument("--query-max-length", type=int, default=64, help="query tokens of a model given by name")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-eval result in --output (only what ssft-eval wrote is removed)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow a model whose base needs its own code (transformers trust_remote_code); off by default")
    add_precision_argument(parser)
    add_backend_argument(parser)
    ns = parse_args(parser, argv)

    setup_logging("INFO")
    from ssft.pipeline.evaluate import evaluate_datasets, markdown_table

    result = evaluate_datasets(
        ns.model, [d.strip() for d in ns.datasets.split(",")], first_stage=ns.first_stage, depth=ns.depth,
        split=ns.split, metrics=ns.metrics.split(","), batch_size=ns.batch_size, precision=precision_of(ns),
        output_dir=ns.output, overwrite=ns.overwrite, trust_remote_code=ns.trust_remote_code, pooling=ns.pooling,
        max_length=ns.max_length, query_max_length=ns.query_max_length, backend=backend_value(ns),
    )
    print(markdown_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
