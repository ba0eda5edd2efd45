"""Hard-negative mining for training queries (``ssft-mine``): candidates from a first stage (a dense model over the
whole corpus with faiss, or BM25), false-negative filters, and optionally a teacher's scores of what is kept.

The filters follow sentence-transformers' ``mine_hard_negatives`` (``range_min`` / ``range_max``,
``absolute_margin``, ``relative_margin``, ``max_score``): for each (query, judged positive), a candidate that is not a
judged positive of the query is kept as a negative only if

- its rank in the miner's ranking (1 = best, the judged positives counted too) is in [``range_min``, ``range_max``];
- ``score <= positive_score - absolute_margin`` (a candidate the miner scores about as high as the positive is
  likely an unlabelled positive: SciFact / NFCorpus judge few documents per query);
- ``score <= positive_score * (1 - relative_margin)``;
- ``score <= max_score``;

and at most ``num_negatives`` of the survivors are kept, best first. Every judged-relevant document of the query (any
grade > 0, not only the positives at ``min_relevance``) is excluded before these filters: NFCorpus judges ~43 documents
per training query, all of them excluded for each of its positives. ``positive_score`` is the miner's score of
that positive (computed for it even when it is not among the candidates). Rows left with fewer than
``min_negatives`` negatives are dropped.

Rows are written in ``ssft.data.hf_sources``' forms: ``ids`` (query_id, positive_id, negative_ids) or ``scored``
(query_id, document_ids = [positive, negatives ...], scores: the teacher's when one rescored them, else the miner's).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ssft.core.errors import SsftError
from ssft.data.beir import Qrels
from ssft.data.trec import Run


@dataclass
class MiningFilters:
    range_min: int = 1  # best rank a negative may have (1 = the miner's top candidate)
    range_max: int | None = None  # worst rank a negative may have (default: the mining depth)
    absolute_margin: float | None = None  # keep score <= positive score - margin
    relative_margin: float | None = None  # keep score <= positive score * (1 - margin)
    max_score: float | None = None  # keep score <= this
    num_negatives: int | None = None  # keep at most this many per (query, positive), best first
    min_negatives: int = 1  # drop a row with fewer negatives left

    def check(self) -> None:
        if self.range_min < 1 or (self.range_max is not None and self.range_max < self.range_min):
            raise SsftError(f"mining: expected 1 <= range_min <= range_max, got {self.range_min} and {self.range_max}")
        if self.relative_margin is not None and not 0 <= self.relative_margin < 1:
            raise SsftError(f"mining: relative_margin must be in [0, 1), got {self.relative_margin}")
        if self.absolute_margin is not None and self.absolute_margin < 0:
            raise SsftError(f"mining: absolute_margin must be >= 0, got {self.absolute_margin}")
        if self.num_negatives is not None and self.num_negatives < 1:
            raise SsftError(f"mining: num_negatives must be >= 1, got {self.num_negatives}")
        if self.min_negatives < 0:
            raise SsftError(f"mining: min_negatives must be >= 0, got {self.min_negatives}")


@dataclass
class MinedRow:
    qid: str
    positive: str
    positive_score: float
    negatives: list[str]
    scores: list[float]  # the miner's scores of the negatives


RANK_BAND = 10  # judged documents among the candidates are counted per band of this many ranks


@dataclass
class MiningReport:
    """What the filters did: candidates looked at (per (query, positive), judged documents excluded), removed per
    filter (the first filter that removes a candidate counts it), rows kept and dropped, queries left with a row; and
    the first filter, which no setting turns off: the judged-relevant documents of the query among its candidates
    (counted once per query, by rank band: where the miner ranks what the qrels call relevant)."""

    candidates: int = 0
    removed: Counter = field(default_factory=Counter)
    rows: int = 0
    rows_dropped: int = 0
    negatives: int = 0
    queries: int = 0
    judged: int = 0
    judged_by_rank: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict:
        bands = {f"{b * RANK_BAND + 1}-{(b + 1) * RANK_BAND}": self.judged_by_rank[b] for b in sorted(self.judged_by_rank)}
        return {"candidates": self.candidates, "removed": dict(self.removed), "rows": self.rows,
                "rows_dropped_too_few_negatives": self.rows_dropped, "negatives": self.negatives,
                "negatives_per_row": round(self.negatives / self.rows, 3) if self.rows else 0.0,
                "queries": self.queries, "judged_excluded": self.judged, "judged_excluded_by_rank": bands}


def filter_reason(rank: int, score: float, positive_score: float, filters: MiningFilters) -> str | None:
    """The first filter that removes a candidate at ``rank`` with ``score`` against a positive scored
    ``positive_score``, or None when it is kept."""
    if rank < filters.range_min or (filters.range_max is not None and rank > filters.range_max):
        return "rank_range"
    if filters.absolute_margin is not None and score > positive_score - filters.absolute_margin:
        return "absolute_margin"
    if filters.relative_margin is not None and score > positive_score * (1 - filters.relative_margin):
        return "relative_margin"
    if filters.max_score is not None and score > filters.max_score:
        return "max_score"
    return None


def mine_negatives(candidates: Run, qrels: Qrels, positive_scores: Run, filters: MiningFilters,
                   min_relevance: int = 1) -> tuple[list[MinedRow], MiningReport]:
    """Rows of (query, positive, negatives) from each query's ranked ``candidates``; ``positive_scores`` holds the
    miner's score of every judged positive (query → document → score)."""
    filters.check()
    rows: list[MinedRow] = []
    report = MiningReport()
    for qid in sorted(qrels):
        judged = {d for d, r in qrels[qid].items() if r > 0}
        positives = sorted(d for d, r in qrels[qid].items() if r >= min_relevance)
        ranked = sorted(candidates.get(qid, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        for rank, (doc, _) in enumerate(ranked):
            if doc in judged:
                report.judged += 1
                report.judged_by_rank[rank // RANK_BAND] += 1
        rows_before = report.rows
        for positive in positives:
            if positive not in positive_scores.get(qid, {}):
                raise SsftError(f"mining: no miner score for the positive {positive} of query {qid}")
            pos_score = positive_scores[qid][positive]
            negatives, scores = [], []
            for rank, (doc, score) in enumerate(ranked, start=1):
                if doc in judged:
                    continue
                report.candidates += 1
                reason = filter_reason(rank, score, pos_score, filters)
                if reason is None and filters.num_negatives is not None and len(negatives) >= filters.num_negatives:
                    reason = "num_negatives"
                if reason is not None:
                    report.removed[reason] += 1
                    continue
                negatives.append(doc)
                scores.append(score)
            if len(negatives) < filters.min_negatives:
                report.rows_dropped += 1
                continue
            rows.append(MinedRow(qid, positive, pos_score, negatives, scores))
            report.rows += 1
            report.negatives += len(negatives)
        report.queries += report.rows > rows_before
    return rows, report


def teacher_run(rows: list[MinedRow]) -> Run:
    """Every (query, document) of the mined rows, positives included: the pairs a teacher rescores."""
    run: Run = {}
    for row in rows:
        for doc in (row.positive, *row.negatives):
            run.setdefault(row.qid, {})[doc] = 0.0
    return run


def to_records(rows: list[MinedRow], form: str, teacher: Run | None = None) -> list[dict]:
    """The rows as ``data.train`` records: ``ids`` or ``scored`` (teacher scores when given, else the miner's)."""
    if form == "ids":
        return [{"query_id": r.qid, "positive_id": r.positive, "negative_ids": list(r.negatives)} for r in rows]
    if form != "scored":
        raise SsftError(f"mining: output form '{form}': expected ids or scored")
    records = []
    for r in rows:
        docs = [r.positive, *r.negatives]
        if teacher is not None:
            missing = [d for d in docs if d not in teacher.get(r.qid, {})]
            if missing:
                raise SsftError(f"mining: the teacher did not score {missing[0]} for query {r.qid}")
            scores = [teacher[r.qid][d] for d in docs]
        else:
            scores = [r.positive_score, *r.scores]
        records.append({"query_id": r.qid, "document_ids": docs, "scores": [float(s) for s in scores]})
    return records


def mine(retrieve: Callable[[dict[str, str], int], Run], score_positives: Callable[[dict[str, list[str]]], Run],
         queries: dict[str, str], qrels: Qrels, depth: int, filters: MiningFilters,
         min_relevance: int = 1) -> tuple[list[MinedRow], MiningReport]:
    """Retrieve the top-``depth`` of every judged query with the miner (``retrieve(queries, depth)``), score each
    judged positive with the same miner (``score_positives({qid: [doc, ...]})``) and filter (``mine_negatives``)."""
    qrels = {q: rels for q, rels in qrels.items() if q in queries}
    if not qrels:
        raise SsftError("mining: no judged query of the split is in the dataset's queries")
    candidates = retrieve({q: queries[q] for q in qrels}, depth)
    wanted = {q: sorted(d for d, r in rels.items() if r >= min_relevance) for q, rels in qrels.items()}
    positive_scores = score_positives({q: docs for q, docs in wanted.items() if docs})
    if filters.range_max is None:
        filters = MiningFilters(**{**asdict(filters), "range_max": depth})
    return mine_negatives(candidates, qrels, positive_scores, filters, min_relevance)


__all__ = ["MinedRow", "MiningFilters", "MiningReport", "filter_reason", "mine", "mine_negatives", "teacher_run", "to_records"]
