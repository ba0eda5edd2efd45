"""ssft-ambiguity DATASET --split S: classify a dataset's queries as ambiguous / non-ambiguous (001 §5.1;
``ssft.analysis.ambiguity``)."""
from __future__ import annotations

import argparse
import sys

from ssft.analysis.ambiguity import (
    EXCLUDED,
    METHODS,
    NON_AMBIGUOUS,
    POS_TAGS,
    AmbiguityRule,
    classify_queries,
    first_stage_contexts,
    format_counts,
    write_labels,
)
from ssft.cli._common import parse_args
from ssft.core.errors import cli_entry


@cli_entry("ssft-ambiguity")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ssft-ambiguity",
                                     description="Classify a dataset's queries as ambiguous / non-ambiguous (001 §5.1).")
    parser.add_argument("dataset", help="BEIR folder or name under $SSFT_DATA_HOME")
    parser.add_argument("--split", default="test", help="classify the queries of this qrels split (default test)")
    parser.add_argument("--method", default="senses", choices=METHODS)
    parser.add_argument("--max-words", type=int, default=1)
    parser.add_argument("--min-senses", type=int, default=2)
    parser.add_argument("--pos", default=None, choices=POS_TAGS)
    parser.add_argument("--threshold", type=float, default=0.5, help="confidence rule: ambiguous at or below this")
    parser.add_argument("--context-k", type=int, default=10, help="confidence rule: titles of the BM25 top-k as context")
    parser.add_argument("--unknown", default=NON_AMBIGUOUS, choices=[NON_AMBIGUOUS, EXCLUDED])
    parser.add_argument("--out", help="write one row per query (TSV) here")
    ns = parse_args(parser, argv)
    from ssft.data.beir import load_dataset

    rule = AmbiguityRule(ns.method, ns.max_words, ns.min_senses, ns.pos, ns.threshold, ns.unknown)
    rule.check()
    dataset = load_dataset(ns.dataset)
    queries = {q: dataset.queries[q] for q in dataset.qrels(ns.split)}
    contexts = first_stage_contexts(dataset, queries, ns.context_k) if ns.method == "confidence" else None
    results = classify_queries(queries, rule, contexts)
    print(format_counts(results, rule))
    if ns.out:
        write_labels(results, ns.out)
        print(f"labels written to {ns.out}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
