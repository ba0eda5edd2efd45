"""ssft-ambiguity DATASET --split S [--out FILE.tsv [--overwrite]]: classify a dataset's queries as ambiguous /
non-ambiguous (001 §5.1; ``ssft.analysis.ambiguity``).

``--out`` follows the output-file rule of ``ssft.core.run_folder``: never inside the dataset folder being classified;
an existing file is replaced only with ``--overwrite`` and only when it is an ssft-ambiguity labels file (its header
row is the one ssft-ambiguity writes); a lock file beside it keeps out a second writer."""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from ssft.analysis.ambiguity import (
    EXCLUDED,
    METHODS,
    NON_AMBIGUOUS,
    POS_TAGS,
    AmbiguityRule,
    QueryAmbiguity,
    classify_queries,
    first_stage_contexts,
    format_counts,
    write_labels,
)
from ssft.cli._common import dataset_sources, output_path, parse_args
from ssft.core.errors import cli_entry
from ssft.core.run_folder import OutputFile, resolved


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
    parser.add_argument("--out", type=output_path, help="write one row per query (TSV) here")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-ambiguity --out file (never a file ssft-ambiguity did not write)")
    ns = parse_args(parser, argv)
    from ssft.data.beir import load_dataset

    rule = AmbiguityRule(ns.method, ns.max_words, ns.min_senses, ns.pos, ns.threshold, ns.unknown)
    rule.check()
    target = None
    if ns.out is not None:
        out = resolved(ns.out) if ns.out.is_symlink() and ns.out.exists() else ns.out  # a link: its file is replaced
        target = OutputFile(out, "ssft-ambiguity", lambda: _not_labels(out), where="--out", overwrite=ns.overwrite,
                            sources=dataset_sources(ns.dataset, "the dataset folder being classified"))
        target.check()
    dataset = load_dataset(ns.dataset)
    if target is not None:
        target.add_sources((dataset.path, "the dataset folder being classified"))
    queries = {q: dataset.queries[q] for q in dataset.qrels(ns.split)}
    contexts = first_stage_contexts(dataset, queries, ns.context_k) if ns.method == "confidence" else None
    results = classify_queries(queries, rule, contexts)
    print(format_counts(results, rule))
    if target is not None:
        with target:
            target.claim()
            write_labels(results, target.path)
        print(f"labels written to {ns.out}")
    return 0


def _not_labels(path: Path) -> str | None:
    """What shows ``path`` is no labels file of ssft-ambiguity (None: it is one): its first line must be the header
    ``write_labels`` writes."""
    header = "\t".join(f.name for f in fields(QueryAmbiguity))
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline().rstrip("\n")
    except (OSError, UnicodeDecodeError):
        return "not a readable text file"
    return None if first == header else "its first line is not ssft-ambiguity's header"


if __name__ == "__main__":
    sys.exit(main())
