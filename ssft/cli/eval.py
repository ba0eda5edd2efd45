"""ssft-eval MODEL --datasets nfcorpus,scifact,cranfield [--output OUT] [--first-stage bm25|full] [--depth N]

One model on several datasets, BM25 beside it: one table of nDCG@10 / R@100 per dataset and their mean, with a paired
t-test against BM25 per dataset (``ssft.pipeline.evaluate.evaluate_datasets``). MODEL is anything ``ssft.load`` takes:
an ssft-train run folder (or its model/), or a checkpoint by hub id or folder (e.g.
sentence-transformers/all-MiniLM-L6-v2). A dataset is anything ``--data`` takes elsewhere: a BEIR folder or a name
under $SSFT_DATA_HOME, a hub id in the BeIR or MTEB layout (BeIR/nfcorpus, mteb/nfcorpus), an ir_datasets id
(beir/nfcorpus/test, irds:cranfield). A metric whose cutoff is deeper than ``--depth`` (R@100 of a top-10 ranking) is
not computed for the model, nor tested (n/a in the table).

The table is printed; with ``--output``, OUT/eval.md (the table), OUT/eval.png (a bar figure) and OUT/eval.json
(everything; written last) are written too. OUT follows the output-folder rule of ``ssft.core.run_folder``: new, empty
or an earlier ssft-eval output (a finished one only with ``--overwrite``, which removes only what ssft-eval wrote);
never the model or a dataset being read. Every dataset and the model are loaded and checked before OUT is touched.
"""
from __future__ import annotations

import sys

from ssft.cli._common import (
    add_backend_argument,
    add_batch_size_argument,
    add_checkpoint_arguments,
    add_model_argument,
    add_precision_argument,
    add_trust_argument,
    backend_value,
    make_parser,
    model_argument,
    output_path,
    parse_args,
    precision_of,
    setup_logging,
)
from ssft.core.errors import cli_entry


@cli_entry("ssft-eval")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-eval", "Evaluate a model on several datasets beside BM25.")
    add_model_argument(parser)
    parser.add_argument("--datasets", "--data", dest="datasets", required=True,
                        help="comma-separated datasets: BEIR folders or names under $SSFT_DATA_HOME, hub ids "
                             "(BeIR/nfcorpus, mteb/nfcorpus), ir_datasets ids (beir/nfcorpus/test, irds:cranfield)")
    parser.add_argument("--output", default=None, type=output_path,
                        help="folder for eval.json, eval.md and eval.png (without it the table is only printed)")
    parser.add_argument("--first-stage", default="bm25", choices=["bm25", "full"],
                        help="bm25: rerank the BM25 top-k (any model; the default); full: the model retrieves from the "
                             "whole corpus (dense models)")
    parser.add_argument("--depth", type=int, default=100, help="candidates reranked / retrieved per query (default 100)")
    parser.add_argument("--split", default="test", help="qrels split of every dataset (default test)")
    parser.add_argument("--metrics", default="nDCG@10,R@100", help="ir_measures names (default nDCG@10,R@100)")
    add_batch_size_argument(parser)
    add_checkpoint_arguments(parser, "pooling of a dense checkpoint given by folder or hub id (default: mean)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-eval result in --output (only what ssft-eval wrote is removed)")
    add_trust_argument(parser)
    add_precision_argument(parser)
    add_backend_argument(parser)
    ns = parse_args(parser, argv)

    setup_logging("INFO")
    from ssft.api import model_label
    from ssft.pipeline.evaluate import evaluate_datasets, markdown_table

    model = model_argument(ns, ns.output, pooling=ns.pooling, max_length=ns.max_length,
                           query_max_length=ns.query_max_length)
    result = evaluate_datasets(
        model, [d.strip() for d in ns.datasets.split(",")], first_stage=ns.first_stage, depth=ns.depth,
        split=ns.split, metrics=ns.metrics.split(","), batch_size=ns.batch_size, precision=precision_of(ns),
        output_dir=ns.output, overwrite=ns.overwrite, trust_remote_code=ns.trust_remote_code,
        backend=backend_value(ns), model_name=model_label(ns.model),
    )
    print(markdown_table(result))
    if ns.output is None:
        print("nothing written (no --output)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
