"""The Trainer's logs and progress as ssft's own log lines (``ssft.core.progress``), in place of transformers'
``PrinterCallback`` / ``ProgressCallback``.

Why: those print the Trainer's metrics as Python dicts of strings (``{'eval_P@20': '0.16', ... 'epoch': 0}``) between
ssft's timestamped lines, and show no progress at all when stderr is not a terminal. Here a metrics dict becomes one
formatted line (``validation (epoch 1, step 50): nDCG@10 0.3123, P@20 0.1600``), and training steps and
``Trainer.predict`` batches report progress as every other long stage does (a bar on a terminal, a line every
``SSFT_PROGRESS_INTERVAL`` seconds otherwise). ``RankingTrainer`` installs it."""
from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

from ssft.core.progress import Progress, duration

logger = logging.getLogger("ssft.training")

_SKIPPED = {"total_flos", "epoch", "step"}  # said in the line's head, or of no use to a reader


def _number(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if "@" in key or key.endswith("loss"):  # ranking metrics, losses: fixed decimals compare at a glance
        return f"{value:.4f}"
    return f"{value:.4g}"


def format_logs(logs: dict[str, Any], step: int, max_steps: int) -> str:
    """One line for a Trainer ``logs`` dict: validation metrics, the end-of-training summary, or a training step."""
    epoch = logs.get("epoch")
    at = f"epoch {epoch:.2f}" if isinstance(epoch, (int, float)) else ""
    items = {k: v for k, v in logs.items() if k not in _SKIPPED}
    if any(k.startswith("eval_") for k in items):
        where = ", ".join(p for p in (f"epoch {epoch:g}" if isinstance(epoch, (int, float)) else "", f"step {step}") if p)
        body = ", ".join(f"{k.removeprefix('eval_')} {_number(k, v)}" for k, v in items.items())
        return f"validation ({where}): {body}"
    if "train_runtime" in items:
        runtime = items.pop("train_runtime")
        body = ", ".join(f"{k} {_number(k, v)}" for k, v in items.items())
        return f"training done: {step} steps in {duration(float(runtime))}" + (f"; {body}" if body else "")
    head = f"step {step}/{max_steps}" if max_steps else f"step {step}"
    body = ", ".join(f"{k} {_number(k, v)}" for k, v in items.items())
    return f"{head}{f' ({at})' if at else ''}: {body}"


class LogLinesCallback(TrainerCallback):
    """Training steps and prediction batches as progress; the Trainer's logs as formatted lines (module docstring).
    ``bars``: false when the recipe sets ``training.disable_tqdm``."""

    def __init__(self, bars: bool = True):
        self.bars = bars
        self.training: Progress | None = None
        self.prediction: Progress | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.bars and state.is_world_process_zero:
            self.training = Progress("training", state.max_steps or None, "steps")
            self.training.update(state.global_step)  # a resumed run starts where its checkpoint stopped

    def on_step_end(self, args, state, control, **kwargs):
        if self.training is not None:
            self.training.update(state.global_step - self.training.done)

    def on_train_end(self, args, state, control, **kwargs):
        if self.training is not None:
            self.training.close()
            self.training = None

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        if not self.bars or not state.is_world_process_zero:
            return
        if self.prediction is None:
            total = len(eval_dataloader) if eval_dataloader is not None and hasattr(eval_dataloader, "__len__") else None
            self.prediction = Progress("scoring", total, "batches")
        self.prediction.update()

    def _close_prediction(self) -> None:
        if self.prediction is not None:
            self.prediction.close()
            self.prediction = None

    def on_evaluate(self, args, state, control, **kwargs):
        self._close_prediction()

    def on_predict(self, args, state, control, **kwargs):
        self._close_prediction()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and state.is_world_process_zero:
            logger.info("%s", format_logs(logs, state.global_step, state.max_steps))


__all__ = ["LogLinesCallback", "format_logs"]
