"""Score fusion of a model's run with a first stage's, reported apart from the pure model score. Two forms:

- ``interpolate``: reranking (and 001/000 runs): α · minmax(model) + (1 − α) · minmax(first stage), per query,
  over the documents the model scored.
- ``fuse_dense_sparse``: dense–sparse hybrid of 003 (TCT-ColBERT) Eq. 7, for full retrieval: over the *union*
  of the dense and the sparse top-k, φ = α · φ_sp + φ_ds on raw scores, a document missing from one list
  taking that list's minimum score for the query.
"""
from __future__ import annotations

from ssft.data.trec import Run
from ssft.eval.metrics import evaluate_run

# α of Eq. 7 weighs raw BM25 scores against raw dense scores: their scales differ by dataset and model, so the
# grid spans two orders of magnitude (003 tunes α = 0.10 for BM25 against BERT dot products on MS MARCO)
FUSION_ALPHAS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)


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


def fuse_dense_sparse(dense: Run, sparse: Run, alpha: float) -> Run:
    """003 Eq. 7, per query over D_ds ∪ D_sp:

        φ(q, d) = α · φ_sp(q, d) + φ_ds(q, d), where a document not in D_sp takes min_{D_sp} φ_sp and one not
        in D_ds takes min_{D_ds} φ_ds.

    A query one list has nothing for (BM25 matching no word, say) gets that list's constant 0: the other list's
    order is kept."""
    if alpha < 0:
        raise ValueError("alpha must be >= 0")
    out: Run = {}
    for qid in sorted(set(dense) | set(sparse)):
        ds, sp = dense.get(qid, {}), sparse.get(qid, {})
        if not ds and not sp:
            continue
        ds_floor = min(ds.values()) if ds else 0.0
        sp_floor = min(sp.values()) if sp else 0.0
        out[qid] = {d: alpha * sp.get(d, sp_floor) + ds.get(d, ds_floor) for d in {**ds, **sp}}
    return out


def tune_fusion_alpha(dense: Run, sparse: Run, qrels, metric: str, alphas: tuple[float, ...] = FUSION_ALPHAS) -> float:
    """The α of ``fuse_dense_sparse`` that maximises ``metric`` on (validation) ``qrels``; ties go to the smaller α."""
    best_alpha, best = alphas[0], float("-inf")
    for alpha in alphas:
        value = evaluate_run(qrels, fuse_dense_sparse(dense, sparse, alpha), [metric])[0][metric]
        if value > best + 1e-12:
            best_alpha, best = alpha, value
    return best_alpha
