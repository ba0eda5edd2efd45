"""Interpolation of a reranker's scores with the first stage's, reported apart from the pure model score."""
from __future__ import annotations

from ssft.data.trec import Run


def _minmax(scores: dict[str, float]) -> dict[str, float]:
    lo, hi = min(scores.values()), max(scores.values())
    span = hi - lo
    return {d: (s - lo) / span if span > 0 else 0.0 for d, s in scores.items()}


def interpolate(model_run: Run, first_stage: Run, alpha: float) -> Run:
    """alpha · minmax(model) + (1 − alpha) · minmax(first stage), per query, over the reranked documents."""
    out: Run = {}
    for qid, scores in model_run.items():
        if not scores:
            continue
        m = _minmax(scores)
        first = first_stage.get(qid, {})
        floor = min(first.values()) if first else 0.0  # a document the first stage lacks gets its minimum
        f = _minmax({d: first.get(d, floor) for d in scores})
        out[qid] = {d: alpha * m[d] + (1 - alpha) * f[d] for d in scores}
    return out
