"""IR metrics through ir_measures (names as ir_measures spells them: nDCG@10, P@20, RR@10, R@100)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import ir_measures

from ssft.config.metrics import parse_measures
from ssft.core.io import atomic_write_text
from ssft.data.beir import Qrels
from ssft.data.trec import Run

__all__ = ["evaluate_run", "parse_measures", "write_per_query"]


def evaluate_run(qrels: Qrels, run: Run, names: list[str]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Aggregate (mean over every query of ``qrels``) and per-query values, keyed by the names as given.

    A judged query the run has no document for scores 0 on every metric (trec_eval ``-c``): a system that
    retrieves nothing gets no credit, and all runs on one split are averaged over the same queries. (BM25
    finds nothing for 25 of NFCorpus's 323 test queries: their zeros are what brings its nDCG@10 to 0.306.)
    """
    measures = parse_measures(names)
    by_measure = {str(m): n for m, n in zip(measures, names)}
    judged = {q: rels for q, rels in qrels.items() if any(r > 0 for r in rels.values())}
    run = {q: docs for q, docs in run.items() if q in judged and docs}
    per_query: dict[str, dict[str, float]] = defaultdict(dict)
    if run:
        for row in ir_measures.iter_calc(measures, {q: judged[q] for q in run}, run):
            per_query[row.query_id][by_measure[str(row.measure)]] = float(row.value)
    for qid in judged:
        if qid not in per_query:
            per_query[qid] = {n: 0.0 for n in names}
    count = len(judged) or 1
    aggregate = {n: sum(per_query[q][n] for q in judged) / count for n in names}
    return aggregate, dict(per_query)


def write_per_query(per_query: dict[str, dict[str, float]], path: Path) -> None:
    """TSV ``query_id  metric  value``, sorted, the layout trec_eval -q prints."""
    lines = ["query_id\tmetric\tvalue"]
    for qid in sorted(per_query):
        for name, value in per_query[qid].items():
            lines.append(f"{qid}\t{name}\t{value:.6f}")
    atomic_write_text(path, "\n".join(lines) + "\n")
