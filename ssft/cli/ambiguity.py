"""ssft-ambiguity --data DATASET --split S [--output FILE.tsv [--overwrite]]: classify a dataset's queries as
ambiguous / non-ambiguous (Jung et al.'s semi-Siamese paper, §5.1; ``ssft.analysis.ambiguity``). The dataset is
``--data`` (``--dataset``), as in every other command; the positional form of earlier releases is refused with the new
spelling.

``--output`` (``--out`` before this release, still accepted with a deprecation line) follows the output-file rule of
``ssft.core.run_folder`` (``ssft.pipeline.ambiguity``): never inside the dataset folder being classified; an existing
file is replaced only with ``--overwrite`` and only when it is an ssft-ambiguity labels file (its header row is the
one ssft-ambiguity writes); a lock file beside it keeps out a second writer."""
from __future__ import annotations

import argparse
import sys

from ssft.analysis.ambiguity import EXCLUDED, METHODS, NON_AMBIGUOUS, POS_TAGS, AmbiguityRule, format_counts
from ssft.cli._common import make_parser, output_path, parse_args, renamed_flag
from ssft.core.errors import cli_entry


@cli_entry("ssft-ambiguity")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-ambiguity", "Classify a dataset's queries as ambiguous / non-ambiguous (the "
                         "query-ambiguity analysis of semi-Siamese fine-tuning).")
    parser.add_argument("--data", "--dataset", dest="dataset", default=None,
                        help="BEIR folder, or dataset name under $SSFT_DATA_HOME (required)")
    parser.add_argument("positional_dataset", nargs="?", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--split", default="test", help="classify the queries of this qrels split")
    parser.add_argument("--method", default="senses", choices=METHODS, help="senses: WordNet sense count; confidence: "
                        "pywsd Lesk sense confidence in the BM25 top-k titles")
    parser.add_argument("--max-words", type=int, default=1, help="classify queries of at most this many words")
    parser.add_argument("--min-senses", type=int, default=2, help="senses rule: ambiguous with at least this many senses")
    parser.add_argument("--pos", default=None, choices=POS_TAGS, help="count senses of this part of speech only")
    parser.add_argument("--threshold", type=float, default=0.5, help="confidence rule: ambiguous at or below this")
    parser.add_argument("--context-k", type=int, default=10, help="confidence rule: titles of the BM25 top-k as context")
    parser.add_argument("--unknown", default=NON_AMBIGUOUS, choices=[NON_AMBIGUOUS, EXCLUDED],
                        help="label of a word WordNet does not know")
    parser.add_argument("--output", type=output_path, help="write one row per query (TSV) here")
    parser.add_argument("--out", type=output_path, dest="deprecated_output", help="old spelling of --output (deprecated)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-ambiguity --output file (never a file ssft-ambiguity did not write)")
    ns = parse_args(parser, argv)
    if ns.positional_dataset is not None:
        parser.error(f"the dataset is named by --data: ssft-ambiguity --data {ns.positional_dataset} ...")
    if ns.dataset is None:
        parser.error("the following arguments are required: --data")
    where = "--out" if ns.deprecated_output is not None else "--output"
    renamed_flag(ns, "ssft-ambiguity", "--out", "--output")
    from ssft.pipeline.ambiguity import label_queries

    rule = AmbiguityRule(ns.method, ns.max_words, ns.min_senses, ns.pos, ns.threshold, ns.unknown)
    results = label_queries(ns.dataset, ns.split, rule, ns.output, context_k=ns.context_k, overwrite=ns.overwrite,
                            where=where)
    print(format_counts(results, rule))
    if ns.output is not None:
        print(f"labels written to {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
