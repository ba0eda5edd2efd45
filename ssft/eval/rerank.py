"""Rerank a first stage with a scoring function and write the output contract:
``metrics.json`` ({split: {metric: value}, first_stage_name: {...}}), TREC runs and per-query metrics.

Evaluation does not depend on training: ``rerank_and_report`` takes ``score``, any function from a
``PairDataset`` to its scores in the pairs' order -- ``RankingTrainer.score`` of the trainer that trained the
ranker, or ``ssft.training.prediction.prediction_trainer(ranker).score`` for a loaded one."""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ssft.core.output_names import per_query_file, run_file
from ssft.data.beir import IRDataset, Qrels
from ssft.data.examples import PairDataset
from ssft.data.trec import Run, top_k, write_run
from ssft.eval.fusion import interpolate
from ssft.eval.metrics import evaluate_run, write_per_query

logger = logging.getLogger(__name__)


def tune_alpha(model_run: Run, first_stage: Run, qrels: Qrels, metric: str) -> float:
    """The interpolation weight that maximises ``metric`` on a validation split (grid of 0.05)."""
    best_alpha, best = 1.0, -1.0
    for step in range(21):
        alpha = step / 20
        value, _ = evaluate_run(qrels, interpolate(model_run, first_stage, alpha), [metric])
        if value[metric] > best + 1e-12:
            best_alpha, best = alpha, value[metric]
    return best_alpha


def rerank_and_report(
    *,
    score: Callable[[PairDataset], np.ndarray],
    dataset: IRDataset,
    split: str,
    qrels: Qrels,
    first_stage: Run,
    first_stage_name: str,
    depth: int,
    metrics: list[str],
    output_dir: Path,
    alpha: float | None = None,
    write: bool = True,
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Rerank ``first_stage``'s top-``depth`` for the queries of ``qrels`` by ``score`` and write run files and
    per-query metrics under ``output_dir`` (unless ``write`` is false: the other processes of a multi-process run
    take part in the scoring, only the main one writes). Returns (metrics.json content for this split, run info)."""
    first_stage = top_k({q: first_stage[q] for q in qrels if first_stage.get(q)}, depth)
    missing = len([q for q in qrels if q not in first_stage])
    if missing:
        logger.warning("%s: %d of %d queries have no first-stage candidates (they score 0)", split, missing, len(qrels))
    pairs = PairDataset(first_stage, depth, dataset)
    logger.info("reranking %d pairs (%d queries, top-%d of %s)", len(pairs), len(first_stage), depth, first_stage_name)
    model_run = pairs.to_run(score(pairs))
    info: dict[str, Any] = {"split": split, "queries": len(model_run), "pairs": len(pairs), "depth": depth,
                            "first_stage": first_stage_name}
    results = write_and_evaluate(model_run, first_stage, qrels, split, first_stage_name, metrics, output_dir, alpha, info,
                                 write=write)
    return results, info


def write_and_evaluate(model_run: Run, first_stage: Run, qrels: Qrels, split: str, first_stage_name: str,
                       metrics: list[str], output_dir: Path, alpha: float | None, info: dict[str, Any], tag: str = "ssft",
                       write: bool = True) -> dict[str, dict[str, float]]:
    """The output contract shared by reranking and full retrieval: metrics of the model run and the first stage (and
    their interpolation when ``alpha``), their TREC runs and per-query files under ``output_dir`` (named by
    ``ssft.core.output_names``); ``alpha`` is
    recorded in ``info``; ``write`` false: evaluate only. Returns the metrics.json content for this split."""
    if first_stage_name == split:  # the first stage's row would replace the model's (ssft.pipeline.run.report_name)
        raise ValueError(f"the first stage is named like the split '{split}'")
    model_metrics, model_per_query = evaluate_run(qrels, model_run, metrics)
    base_metrics, base_per_query = evaluate_run(qrels, first_stage, metrics)
    results = {split: model_metrics, first_stage_name: base_metrics}
    if write:
        write_run(model_run, output_dir / run_file(split, split), tag=tag)
        write_run(first_stage, output_dir / run_file(first_stage_name, split), tag=first_stage_name)
        write_per_query(model_per_query, output_dir / per_query_file(split, split))
        write_per_query(base_per_query, output_dir / per_query_file(first_stage_name, split))
    if alpha is not None:
        fused = interpolate(model_run, first_stage, alpha)
        key = f"{split}+{first_stage_name}"
        results[key], fused_per_query = evaluate_run(qrels, fused, metrics)
        info["interpolation_alpha"] = alpha
        if write:
            write_run(fused, output_dir / run_file(key, split), tag=f"{tag}+{first_stage_name}")
            write_per_query(fused_per_query, output_dir / per_query_file(key, split))
    return results


def format_table(results: dict[str, Any], metrics: list[str]) -> str:
    rows = list(results.items())
    width = max(len(n) for n, _ in rows) + 2
    head = "run".ljust(width) + "".join(m.rjust(10) for m in metrics)
    lines = [head, "-" * len(head)]
    for name, vals in rows:
        lines.append(name.ljust(width) + "".join(f"{vals.get(m, float('nan')):10.4f}" for m in metrics))
    return "\n".join(lines)
