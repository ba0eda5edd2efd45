"""Keep the weights of the best validation evaluation and restore them when training ends (001 §4.1.3)."""
from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback

from ssft.registry import CALLBACKS

logger = logging.getLogger(__name__)


@CALLBACKS.register("best_epoch")
class BestEpochCallback(TrainerCallback):
    """Snapshots the trainable parameters (and ranker head) in memory at each improvement of
    ``eval_<metric>``; on train end loads the best snapshot back. Cheap for adapters, exact for all methods."""

    def __init__(self, metric: str = "nDCG@10", greater_is_better: bool = True):
        self.key = f"eval_{metric}"
        self.greater_is_better = greater_is_better
        self.best_value: float | None = None
        self.best_step: int | None = None
        self.best_epoch: float | None = None
        self.history: list[dict] = []
        self._snapshot: dict[str, torch.Tensor] | None = None

    def on_evaluate(self, args, state, control, metrics=None, model=None, **kwargs):
        if not metrics or self.key not in metrics or model is None:
            return
        value = float(metrics[self.key])
        self.history.append({"epoch": state.epoch, "step": state.global_step, self.key: value})
        better = self.best_value is None or (value > self.best_value if self.greater_is_better else value < self.best_value)
        if better:
            self.best_value, self.best_step, self.best_epoch = value, state.global_step, state.epoch
            self._snapshot = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
            logger.info("best %s so far: %.4f (epoch %.2f)", self.key, value, state.epoch or 0)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self._snapshot is None or model is None:
            return
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in self._snapshot.items():
                params[name].copy_(value)
        logger.info("restored the best validation weights: %s = %.4f at epoch %.2f", self.key, self.best_value, self.best_epoch or 0)
