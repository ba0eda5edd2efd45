"""ssft-mine (MODEL | --bm25) --data DATASET --split SPLIT --output FILE.jsonl — hard negatives for training.

Retrieves the top-``--depth`` documents of every judged query of the split with a miner — a dense model over the
whole corpus with faiss (MODEL: anything ``ssft.load`` takes: an ssft run folder / model folder of architecture
'dense', or a sentence embedder by hub id or folder, e.g. sentence-transformers/all-MiniLM-L6-v2), or BM25 (``--bm25``,
the index cached under $SSFT_CACHE) — and keeps, per (query, judged positive), the candidates that pass the
false-negative filters (``ssft.eval.mining``: rank range, absolute / relative margin to the positive's score,
maximum score, at most ``--num-negatives``). ``--teacher RUN`` rescores the kept (query, document) pairs with an
ssft run (e.g. a cross-encoder) and writes its scores. Both models serve at ``--precision`` on ``--backend``, as
ssft-rerank's model does (int8: calibrated on the corpus encoded and the pairs rescored).

Writes FILE.jsonl in a form ``data.train`` reads (``--form ids``: query_id, positive_id, negative_ids;
``--form scored``: query_id, document_ids = [positive, negatives ...], scores — the teacher's, else the miner's)
and FILE.mining.json: how it was made (miner, filters, what each filter removed, the command). Both are written
atomically, after everything else succeeded. The output-file rule of ``ssft.core.run_folder``: never inside the
dataset being mined (nor a model read); an existing pair is replaced only with ``--overwrite`` and only when its
.mining.json says ssft-mine wrote it; a lock file beside it (``.FILE.jsonl.ssft.lock``) keeps out a second writer.
"""
from __future__ import annotations

import sys

from ssft.cli._common import (
    MODEL_HELP,
    add_backend_argument,
    add_batch_size_argument,
    add_checkpoint_arguments,
    add_model_argument,
    add_precision_argument,
    add_trust_argument,
    backend_value,
    make_parser,
    output_path,
    parse_args,
    precision_value,
    setup_logging,
)
from ssft.core.errors import cli_entry


@cli_entry("ssft-mine")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-mine", "Mine hard negatives for training queries.")
    add_model_argument(parser, optional=True, extra="; a dense model mines over the whole corpus (or --bm25)")
    parser.add_argument("--data", required=True, help="BEIR folder, or dataset name under $SSFT_DATA_HOME")
    parser.add_argument("--split", default="train", help="qrels split whose queries are mined")
    parser.add_argument("--output", required=True, type=output_path,
                        help="the dataset to write (.jsonl; never inside the dataset folder being mined)")
    parser.add_argument("--bm25", action="store_true", help="BM25 miner (bm25s, English stopwords) instead of a model")
    parser.add_argument("--model", dest="deprecated_model", default=None,
                        help="old spelling of the positional model (deprecated)")
    add_checkpoint_arguments(parser)
    parser.add_argument("--depth", type=int, default=100, help="candidates retrieved per query")
    parser.add_argument("--range-min", type=int, default=1, help="best rank a negative may have (1 = top)")
    parser.add_argument("--range-max", type=int, default=None, help="worst rank a negative may have (default --depth)")
    parser.add_argument("--absolute-margin", type=float, default=None, help="keep score <= positive score - margin")
    parser.add_argument("--relative-margin", type=float, default=None, help="keep score <= positive score * (1 - margin)")
    parser.add_argument("--max-score", type=float, default=None, help="keep score <= this")
    parser.add_argument("--num-negatives", type=int, default=None, help="keep at most this many per row, best first")
    parser.add_argument("--min-negatives", type=int, default=1, help="drop rows left with fewer negatives")
    parser.add_argument("--min-relevance", type=int, default=1, help="qrels grade counted as a positive")
    parser.add_argument("--form", default=None, choices=("ids", "scored"),
                        help="output form (default: scored with --teacher, else ids)")
    parser.add_argument("--teacher", default=None,
                        help="the model that rescores the kept pairs (a cross-encoder, typically): "
                        + MODEL_HELP.removeprefix("the model: "))
    add_batch_size_argument(parser)
    add_precision_argument(parser)
    add_backend_argument(parser)
    add_trust_argument(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-mine --output and its .mining.json (never a file ssft-mine did not write)")
    ns = parse_args(parser, argv)
    if ns.deprecated_model is not None:
        if ns.model is not None:
            parser.error("--model is the old spelling of the positional model: give the model once")
        print("ssft-mine: deprecated: --model MODEL is now the positional model (ssft-mine MODEL --data ...); --model "
              "will be removed in the next release", file=sys.stderr)
        ns.model = ns.deprecated_model
    if (ns.model is None) == (not ns.bm25):
        parser.error("name one miner: a dense model (ssft-mine MODEL --data ...) or --bm25")
    setup_logging("INFO")
    from ssft.api import mine
    from ssft.pipeline.mine import mining_summary

    options = {k: v for k, v in vars(ns).items() if k not in ("data", "output", "split", "bm25", "deprecated_model")}
    options.update(precision=precision_value(ns), backend=backend_value(ns))
    info = mine(ns.data, ns.output, ns.split, **options,
                command=["ssft-mine", *(argv if argv is not None else sys.argv[1:])])
    print(mining_summary(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
