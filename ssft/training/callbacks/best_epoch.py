"""Keep the weights of the best validation evaluation and restore them when training ends (001 §4.1.3).

Epoch 0 takes part: ``evaluate_start`` scores the starting model on validation before the first training step, so a
run never hands back weights worse on validation than the ones it started from; when epoch 0 wins, the callback
says so loudly (``start_selected``)."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ssft.core.errors import SsftError
from ssft.core.io import give_umask_modes
from ssft.training.callbacks.base import RecipeCallback

logger = logging.getLogger(__name__)
# what Trainer.evaluate adds beside the measures
TIMINGS = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")


@dataclass
class BestEpochOptions:
    metric: str = "nDCG@10"  # eval_<metric> decides the best evaluation
    greater_is_better: bool = True


class BestEpochCallback(RecipeCallback):
    """Snapshots the trainable parameters (and ranker head) in memory at each improvement of
    ``eval_<metric>``; on train end loads the best snapshot back. Cheap for adapters, exact for all methods.
    Its state (history, best value, snapshot) goes into every checkpoint, so a resumed run selects the same epoch."""

    name = "best_epoch"
    Config = BestEpochOptions
    STATE_FILE = "best_epoch.json"
    SNAPSHOT_FILE = "best_epoch.safetensors"

    def __init__(self, metric: str = "nDCG@10", greater_is_better: bool = True):
        self.key = f"eval_{metric}"
        self.greater_is_better = greater_is_better
        self.best_value: float | None = None
        self.best_step: int | None = None
        self.best_epoch: float | None = None
        self.history: list[dict] = []
        self.losses: list[dict] = []  # the training loss as logged every logging_steps: {epoch, step, loss}
        self._snapshot: dict[str, torch.Tensor] | None = None

    def on_evaluate(self, args, state, control, metrics=None, model=None, **kwargs):
        if not metrics or self.key not in metrics or model is None:
            return
        value = float(metrics[self.key])
        epoch = float(state.epoch or 0.0)  # before the first step (evaluate_start) the Trainer has no epoch yet: 0
        # every validation measure (not the Trainer's timings): run_info's history, curves.png's lines
        measures = {k: float(v) for k, v in metrics.items() if k.startswith("eval_") and k not in TIMINGS
                    and isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.history.append({"epoch": epoch, "step": state.global_step, **measures, self.key: value})
        better = self.best_value is None or (value > self.best_value if self.greater_is_better else value < self.best_value)
        if better:
            self.best_value, self.best_step, self.best_epoch = value, state.global_step, epoch
            self._snapshot = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
            logger.info("best %s so far: %.4f (epoch %.2f)", self.key, value, epoch)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # kept here, not read from the Trainer's log_history: this state goes into checkpoints and a hybrid's
        # phase.json, so a resumed run still draws its whole loss curve (curves.png)
        loss = (logs or {}).get("loss")
        if isinstance(loss, (int, float)) and not isinstance(loss, bool) and state.epoch is not None:
            self.losses.append({"epoch": float(state.epoch), "step": state.global_step, "loss": float(loss)})

    def on_step_end(self, args, state, control, **kwargs):
        # no per-epoch validation (training.eval_strategy "no") but epoch 0 was scored: the final model is evaluated
        # too, so the run still hands back the better of the start and the end (never worse than its start)
        if (getattr(args, "eval_strategy", None) == "no" and self.history and state.max_steps
                and state.global_step >= state.max_steps):
            control.should_evaluate = True

    @property
    def start_selected(self) -> bool:
        """The starting model (epoch 0) was the best validation evaluation, and training was evaluated after it."""
        return (self.best_step == 0 and len(self.history) > 1 and self.history[0]["step"] == 0)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self._snapshot is None or model is None:
            return
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in self._snapshot.items():
                params[name].copy_(value)
        if self.start_selected:
            later = max(h[self.key] for h in self.history[1:]) if self.greater_is_better else \
                min(h[self.key] for h in self.history[1:])
            logger.warning("!!! training never beat the starting model on validation: %s = %.4f at epoch 0, best after "
                           "training %.4f; this run hands back the STARTING weights (epoch 0) !!!", self.key,
                           self.best_value, later)
            return
        logger.info("restored the best validation weights: %s = %.4f at epoch %.2f", self.key, self.best_value,
                    self.best_epoch or 0)

    # ------------------------------------------------------------ checkpoint state (RankingTrainer calls these)
    def state_dict(self) -> dict:
        return {"key": self.key, "greater_is_better": self.greater_is_better, "best_value": self.best_value,
                "best_step": self.best_step, "best_epoch": self.best_epoch, "history": self.history,
                "losses": self.losses}

    def load_state(self, state: dict) -> None:
        if state.get("key") != self.key:
            raise SsftError(f"best-epoch state selects by {state.get('key')}, this run by {self.key}")
        self.best_value, self.best_step, self.best_epoch = state["best_value"], state["best_step"], state["best_epoch"]
        self.history = list(state["history"])
        self.losses = list(state.get("losses") or [])  # absent from checkpoints of older ssft versions

    def save_checkpoint_state(self, folder: Path) -> None:
        folder = Path(folder)
        if self._snapshot is not None:
            save_file({k: v.contiguous() for k, v in self._snapshot.items()}, folder / self.SNAPSHOT_FILE)
            give_umask_modes(folder / self.SNAPSHOT_FILE)  # safetensors writes 0600
        (folder / self.STATE_FILE).write_text(json.dumps(self.state_dict(), indent=2) + "\n")

    def check_checkpoint_state(self, folder: Path) -> tuple[str, str] | None:
        """(file, 'missing' / 'damaged (why)') when the state this callback saved into the checkpoint ``folder``
        cannot be loaded back, else None (``ssft.training.trainer.check_checkpoint`` calls it before a resume)."""
        folder = Path(folder)
        path = folder / self.STATE_FILE
        if not path.is_file():
            return self.STATE_FILE, "missing"
        try:
            state = json.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError:
            return self.STATE_FILE, "damaged (not a UTF-8 text file)"
        except json.JSONDecodeError as err:
            return self.STATE_FILE, f"damaged (invalid JSON: {err.msg}, line {err.lineno})"
        keys = ("key", "best_value", "best_step", "best_epoch", "history")
        if not isinstance(state, dict) or any(k not in state for k in keys) or not isinstance(state["history"], list):
            return self.STATE_FILE, f"damaged (expected an object with {', '.join(keys)})"
        if state["best_value"] is None:
            return None
        snapshot = folder / self.SNAPSHOT_FILE
        if not snapshot.is_file():
            return self.SNAPSHOT_FILE, "missing"
        try:
            with safe_open(str(snapshot), framework="pt"):
                pass
        except (SafetensorError, OSError) as err:
            reason = str(err).removeprefix("Error while deserializing header: ").strip()
            return self.SNAPSHOT_FILE, f"damaged ({reason.splitlines()[0] if reason else type(err).__name__})"
        return None

    def load_checkpoint_state(self, folder: Path) -> None:
        folder = Path(folder)
        if not (folder / self.STATE_FILE).is_file():
            return
        self.load_state(json.loads((folder / self.STATE_FILE).read_text()))
        snapshot = folder / self.SNAPSHOT_FILE
        self._snapshot = load_file(snapshot) if snapshot.is_file() else None


def evaluate_start(trainer) -> dict[str, float] | None:
    """Epoch 0: the Trainer's validation evaluation of the model as it is before the first training step. Its
    ``on_evaluate`` reaches the ``BestEpochCallback`` like any epoch's, so best-epoch selection includes the starting
    weights; with ``eval_strategy: "no"`` the callback then has the final model evaluated as well (start against end).
    Nothing when the Trainer has no validation set. Call it only for a run that starts training (not one that resumes
    from a checkpoint: the checkpoint's best-epoch state already holds epoch 0)."""
    if trainer.eval_dataset is None:
        return None
    model = trainer.model
    was_training = model.training
    model.eval()
    try:
        return trainer.evaluate()
    finally:
        model.train(was_training)

