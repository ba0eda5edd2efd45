"""The hybrid schedule (001 Algorithm 1; §5.2's concurrent alternative): which modules of a hybrid ranker
(``ssft.adapters.hybrid``: a hidden prefix beside LoRA) train in which phase, one Trainer run per phase, each
keeping its best validation epoch; with ``resume``, phase folders (``result/`` + ``phase.json``) make a killed run
continue in the phase it was in."""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn
from transformers.trainer_utils import TrainOutput

from ssft.adapters.hybrid import PREFIX_METHODS, HybridOptions
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_json
from ssft.training.callbacks.best_epoch import BestEpochCallback, evaluate_start
from ssft.training.checkpoints import discard_incomplete_checkpoints, latest_checkpoint

logger = logging.getLogger(__name__)


def hybrid_modules(ranker: nn.Module) -> dict[str, list[tuple[str, nn.Parameter]]]:
    """The hybrid's trainable groups by name: ``prefix`` (Backbone.hidden_prefix), ``lora`` (PEFT's lora_*
    weights) and ``head`` (everything outside the backbone)."""
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {"prefix": [], "lora": [], "head": []}
    for name, p in ranker.named_parameters():
        if name.startswith("backbone.hidden_prefix."):
            groups["prefix"].append((name, p))
        elif name.startswith("backbone.") and ".lora_" in name:
            groups["lora"].append((name, p))
        elif not name.startswith("backbone."):
            groups["head"].append((name, p))
    if not groups["prefix"] or not groups["lora"]:
        raise SsftError("not a hybrid ranker: it needs both a hidden prefix and LoRA weights")
    return groups


def set_trainable(ranker: nn.Module, modules: Sequence[str]) -> None:
    """Make exactly ``modules`` (names of ``hybrid_modules``) trainable; every other parameter is frozen."""
    groups = hybrid_modules(ranker)
    for p in ranker.parameters():
        p.requires_grad_(False)
    for module in modules:
        for _, p in groups[module]:
            p.requires_grad_(True)


@dataclass
class Phase:
    """One training run of a hybrid: what trained, for how long, and the best validation epoch it kept."""

    name: str
    modules: tuple[str, ...]
    epochs: int
    best: Any  # BestEpochCallback
    train_output: Any
    trainer: Any


def hybrid_phases(config: HybridOptions) -> list[tuple[str, tuple[str, ...], int]]:
    """(name, trainable modules, epochs) of each phase: Algorithm 1 (sequential) or one joint phase (concurrent)."""
    kinds = ["prefix" if m in PREFIX_METHODS else "lora" for m in config.methods]
    if config.mode == "concurrent":
        return [("concurrent", (kinds[0], kinds[1], "head"), config.first_epochs + config.second_epochs)]
    return [("first", (kinds[0], "head"), config.first_epochs), ("second", (kinds[1], "head"), config.second_epochs)]


PHASE_RECORD = "phase.json"


def train_hybrid(ranker: nn.Module, config: HybridOptions, make_trainer: Callable[[str, int, list], Any],
                 metric: str = "nDCG@10", resume: bool = False, score_start: bool = True) -> list[Phase]:
    """Train a hybrid ranker phase by phase (001 Algorithm 1 when ``config.mode`` is sequential).

    ``make_trainer(phase_name, epochs, callbacks)`` returns a fresh Trainer over ``ranker`` that evaluates each
    epoch and carries ``callbacks`` (the phase's ``BestEpochCallback``); it is called after the phase's modules
    are set trainable, so its optimizer holds exactly them. Each phase first scores its starting weights on validation
    (epoch 0, ``evaluate_start``): at the end of the phase the best validation weights of the trained modules,
    epoch 0 included, are restored (by the callback), so no phase hands over a model worse on validation than the one
    it received; the next phase freezes them.

    With ``resume``, each phase's Trainer needs its own ``output_dir``: a finished phase leaves there ``result/``
    (the ranker after the phase) and ``phase.json`` (its best-epoch record, written last); a later call skips a
    finished phase (loading its result) and resumes an unfinished one from its latest complete checkpoint.

    ``score_start`` false (``eval.start: false``): the first phase's epoch 0 (the starting model) is not scored; the
    later phases' epoch 0 (what the previous phase handed over) still is."""
    phases = []
    for name, modules, epochs in hybrid_phases(config):
        set_trainable(ranker, modules)
        best = BestEpochCallback(metric)
        trainer = make_trainer(name, epochs, [best])
        folder = Path(trainer.args.output_dir)
        record = folder / PHASE_RECORD
        if resume and record.is_file() and (folder / "result").is_dir():
            saved = json.loads(record.read_text())
            ranker.load_weights(folder / "result")
            best.load_state(saved["best"])
            output = TrainOutput(saved["global_step"], saved["train_loss"], {})
            logger.info("hybrid phase '%s' finished earlier: its weights read from %s", name, folder / "result")
        else:
            checkpoint = None
            if resume:  # a checkpoint cut short is removed, never trained into or resumed from
                discard_incomplete_checkpoints(folder)
                checkpoint = latest_checkpoint(folder)
            if checkpoint is None and (score_start or phases):  # epoch 0 of the phase (the weights the previous
                evaluate_start(trainer)  # phase handed over) is a candidate
            output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
            if resume and trainer.args.should_save:
                ranker.save(folder / "result")
                atomic_write_json(record, {"phase": name, "global_step": output.global_step,
                                           "train_loss": output.training_loss, "best": best.state_dict()})
        phases.append(Phase(name, modules, epochs, best, output, trainer))
    return phases


__all__ = ["PHASE_RECORD", "Phase", "hybrid_modules", "hybrid_phases", "set_trainable", "train_hybrid"]
