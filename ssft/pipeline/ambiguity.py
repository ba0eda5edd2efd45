"""Classify a dataset's queries as ambiguous / non-ambiguous (001 §5.1; ``ssft.analysis.ambiguity``) and write the
labels file: what ssft-ambiguity runs. The labels file follows the output-file rule of ``ssft.core.run_folder``: never
inside the dataset folder being classified; an existing file is replaced only with ``overwrite`` and only when it is an
ssft-ambiguity labels file (its header row is the one ssft-ambiguity writes); a lock file beside it keeps out a second
writer."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from ssft.analysis.ambiguity import (
    AmbiguityRule,
    QueryAmbiguity,
    classify_queries,
    first_stage_contexts,
    write_labels,
)
from ssft.core.run_folder import OutputFile, resolved
from ssft.data.beir import load_dataset
from ssft.pipeline.sources import dataset_sources


def label_queries(data: str, split: str, rule: AmbiguityRule, output: Path | None = None, *, context_k: int = 10,
                  overwrite: bool = False, where: str = "--output") -> dict[str, QueryAmbiguity]:
    """The label of every judged query of ``data``'s ``split`` by ``rule``; with ``output``, the labels file written
    there (``where``: the flag that named it, for messages)."""
    rule.check()
    target = None
    if output is not None:
        out = resolved(output) if output.is_symlink() and output.exists() else output  # a link: its file is replaced
        target = OutputFile(out, "ssft-ambiguity", lambda: not_labels(out), where=where, overwrite=overwrite,
                            sources=dataset_sources(data, "the dataset folder being classified"))
        target.check()
    dataset = load_dataset(data)
    if target is not None:
        target.add_sources((dataset.path, "the dataset folder being classified"))
    queries = {q: dataset.queries[q] for q in dataset.qrels(split)}
    contexts = first_stage_contexts(dataset, queries, context_k) if rule.method == "confidence" else None
    results = classify_queries(queries, rule, contexts)
    if target is not None:
        with target:
            target.claim()
            write_labels(results, target.path)
    return results


def not_labels(path: Path) -> str | None:
    """What shows ``path`` is no labels file of ssft-ambiguity (None: it is one): its first line must be the header
    ``write_labels`` writes."""
    header = "\t".join(f.name for f in fields(QueryAmbiguity))
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline().rstrip("\n")
    except (OSError, UnicodeDecodeError):
        return "not a readable text file"
    return None if first == header else "its first line is not ssft-ambiguity's header"


__all__ = ["label_queries", "not_labels"]
