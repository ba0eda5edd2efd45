"""Collapse monitor (000 §3.2): are query and document representations collapsing to a constant vector?

Every ``every_steps`` steps (and at the start and end of training) a fixed sample of queries is encoded by
the query tower and a fixed sample of corpus documents by the document tower; for each side it records
the mean and minimum per-dimension variance, the total variance, and the effective rank (Roy & Vetterli
2007: exp of the entropy of the normalised singular values of the centred matrix). The training loss of
the last logging window is set against the collapse value log(1 + |D⁻|) — the loss when every score is
equal (000 Eq. 7).

A side *collapses* when its total variance falls below ``min_variance`` or its effective rank below
``min_effective_rank``; the loss *sits at the collapse value* when it is within ``loss_tolerance`` of it —
a symptom shared by collapse and by towers that are not aligned yet (scores that carry no signal), which the
variance and rank checks tell apart. Either logs a loud WARNING. Everything is written to ``<output_dir>/collapse.json``.
"""
from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from ssft.config.parse import Checked
from ssft.core.io import atomic_write_json
from ssft.training.callbacks.base import RecipeCallback

logger = logging.getLogger(__name__)


def collapse_statistics(vectors: torch.Tensor) -> dict[str, float]:
    """Per-dimension variance (mean, min), total variance and effective rank of (n, dim) representations.
    Constant rows give variance 0 and effective rank 0."""
    x = vectors.detach().double()
    variance = x.var(dim=0, unbiased=False)
    total = float(variance.sum())
    centred = x - x.mean(dim=0, keepdim=True)
    singular = torch.linalg.svdvals(centred)
    if total <= 1e-20 or float(singular.sum()) <= 0:
        rank = 0.0
    else:
        p = singular / singular.sum()
        p = p[p > 0]
        rank = float(torch.exp(-(p * p.log()).sum()))
    return {"mean_dim_variance": float(variance.mean()), "min_dim_variance": float(variance.min()),
            "total_variance": total, "effective_rank": rank, "samples": int(x.shape[0])}


def is_collapsed(stats: dict[str, float], min_variance: float, min_effective_rank: float) -> bool:
    """Total variance below ``min_variance``, or effective rank below ``min_effective_rank`` — the rank only
    when the sample is large enough to reach well above it (n points span at most n - 1 dimensions)."""
    rank_applies = stats.get("samples", float("inf")) - 1 >= 2 * min_effective_rank
    return stats["total_variance"] < min_variance or (rank_applies and stats["effective_rank"] < min_effective_rank)


@dataclass
class CollapseMonitorOptions(Checked):
    every_steps: int = 50  # measure every this many steps (and at the start and end of training)
    sample_size: int = 256  # queries and documents encoded per measurement
    min_variance: float = 1e-3  # a side collapses below this total variance ...
    min_effective_rank: float = 2.0  # ... or this effective rank
    loss_tolerance: float = 0.05  # the loss "sits at the collapse value" within this fraction of it
    seed: int = 0  # which queries and documents are sampled

    def problem(self) -> str | None:
        return "every_steps must be >= 1 and sample_size >= 2" if self.every_steps < 1 or self.sample_size < 2 else None


class CollapseMonitorCallback(RecipeCallback):
    name = "collapse_monitor"
    Config = CollapseMonitorOptions

    def __init__(self, every_steps: int = 50, sample_size: int = 256, min_variance: float = 1e-3,
                 min_effective_rank: float = 2.0, loss_tolerance: float = 0.05, seed: int = 0):
        CollapseMonitorOptions(every_steps, sample_size, min_variance, min_effective_rank, loss_tolerance, seed).raise_problem()
        self.every_steps = every_steps
        self.sample_size = sample_size
        self.min_variance = min_variance
        self.min_effective_rank = min_effective_rank
        self.loss_tolerance = loss_tolerance
        self.seed = seed
        self.queries: list[str] = []
        self.documents: list[str] = []
        self.history: list[dict] = []
        self.losses: list[dict] = []
        self.warnings: list[str] = []
        self._output_dir: str | None = None

    def setup(self, dataset=None, validation_qrels=None, train_qrels=None, train_queries=None, **_) -> None:
        """The fixed sample: queries of the validation split, else of the training qrels, else the training query
        texts (``train_queries``: a ``data.train`` source's, whose text form names no query id), else the dataset's
        queries; documents of the corpus."""
        if dataset is None:
            return
        rng = random.Random(self.seed)
        if validation_qrels or train_qrels or not train_queries:
            qids = sorted(validation_qrels or train_qrels or dataset.queries)
            texts = [dataset.queries[q] for q in qids if q in dataset.queries]
        else:
            texts = sorted(set(train_queries))
        self.queries = rng.sample(texts, self.sample_size) if len(texts) > self.sample_size else texts
        dids = sorted(dataset.corpus)
        dids = rng.sample(dids, self.sample_size) if len(dids) > self.sample_size else dids
        self.documents = [dataset.corpus[d].full_text for d in dids]

    # ------------------------------------------------------------ measuring
    def measure(self, model, step: int) -> dict:
        """Statistics of both towers now; warns when one collapses."""
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                q = torch.cat([model.encode_queries(self.queries[i : i + 64]).vectors.float().cpu()
                               for i in range(0, len(self.queries), 64)])
                d = torch.cat([model.encode_documents(self.documents[i : i + 64]).vectors.float().cpu()
                               for i in range(0, len(self.documents), 64)])
        finally:
            model.train(was_training)
        entry = {"step": step, "query": collapse_statistics(q), "document": collapse_statistics(d),
                 "mean_query_document_cosine": float((q.mean(0) @ d.mean(0)) / (q.mean(0).norm() * d.mean(0).norm() + 1e-12))}
        self.history.append(entry)
        for side in ("query", "document"):
            s = entry[side]
            if is_collapsed(s, self.min_variance, self.min_effective_rank):
                self._warn(f"step {step}: {side} representations COLLAPSED (total variance {s['total_variance']:.2e}, "
                           f"effective rank {s['effective_rank']:.2f})")
        logger.info("collapse monitor step %d: query var %.2e rank %.1f | document var %.2e rank %.1f", step,
                    entry["query"]["total_variance"], entry["query"]["effective_rank"],
                    entry["document"]["total_variance"], entry["document"]["effective_rank"])
        return entry

    def _warn(self, message: str, kind: str = "REPRESENTATION COLLAPSE") -> None:
        self.warnings.append(message)
        logger.warning("!!!!! %s: %s", kind, message)

    # ------------------------------------------------------------ events
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._output_dir = args.output_dir if getattr(args, "should_save", True) else None  # only the main process writes
        if not self.queries or not self.documents:
            train = getattr(kwargs.get("train_dataloader"), "dataset", None)
            if train is not None and hasattr(train, "dataset") and hasattr(train, "query_texts"):
                self.setup(dataset=train.dataset, train_queries=train.query_texts())
        if model is not None and self.queries and self.documents:
            self.measure(model, state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is not None and self.queries and state.global_step % self.every_steps == 0:
            self.measure(model, state.global_step)
            self._write()

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if not logs or "loss" not in logs or model is None:
            return
        negatives = getattr(model, "last_num_negatives", None)
        if negatives is None:
            return
        collapse_value = math.log(1.0 + negatives)
        loss = float(logs["loss"])
        self.losses.append({"step": state.global_step, "loss": loss, "collapse_value": collapse_value})
        if abs(loss - collapse_value) <= self.loss_tolerance * collapse_value:
            self._warn(f"step {state.global_step}: loss {loss:.3f} sits at the collapse value log(1 + {negatives:.0f}) = "
                       f"{collapse_value:.3f}: the scores do not separate positives from negatives (collapsed "
                       f"representations, or towers not aligned yet; the variance/rank checks tell which)",
                       kind="LOSS AT THE COLLAPSE VALUE")

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if model is not None and self.queries and (not self.history or self.history[-1]["step"] != state.global_step):
            self.measure(model, state.global_step)
        self._write()

    def _write(self) -> None:
        if self._output_dir is None:
            return
        atomic_write_json(Path(self._output_dir) / "collapse.json", {
            "thresholds": {"min_variance": self.min_variance, "min_effective_rank": self.min_effective_rank,
                           "loss_tolerance": self.loss_tolerance},
            "history": self.history, "losses": self.losses, "warnings": self.warnings})


__all__ = ["CollapseMonitorCallback", "collapse_statistics", "is_collapsed"]
