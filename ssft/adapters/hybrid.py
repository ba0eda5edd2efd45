"""Hybrids of 001's prefix tuning and LoRA (§3.2.4, Algorithm 1; §3.3.3; §5.2 Fig. 4).

Recipe::

    adapter:
      method: hybrid
      first: {method: hidden_prefix, length: 10}   # or ss_hidden_prefix (bi-encoders only)
      second: {method: lora, r: 16}                # or lora++, or ss_lora (bi-encoders only)
      first_epochs: 30                             # m
      second_epochs: 10                            # n
      mode: sequential                             # or concurrent

Either order works (Prefix-tuning → LoRA, LoRA → Prefix-tuning, prefix → SS LoRA, SS LoRA → prefix). The prefix
is ssft's ``hidden_prefix`` module (``Backbone.hidden_prefix``) beside the PEFT LoRA model, so both live in one
backbone; PEFT's own ``prefix`` / ``prompt`` cannot share a PeftModel with LoRA and are not accepted here. With
``ss_lora`` the backbone keeps its tower switch (shared + query- / document-specific PEFT adapters, 001 §3.3.3).

``sequential`` (Algorithm 1): phase 1 trains ``first`` for ``first_epochs`` epochs and keeps its best validation
epoch; ``first`` is then frozen at those weights and phase 2 trains ``second`` for ``second_epochs`` epochs, again
keeping the best epoch. Each phase is a fresh Trainer run (its own optimizer and learning-rate schedule). The
ranker head (not part of either LFT module) trains in both phases. ``concurrent`` (§5.2's alternative) trains both
modules together for ``first_epochs + second_epochs`` epochs, keeping the best epoch.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ssft.adapters.base import Adapter
from ssft.core.errors import SsftError
from ssft.adapters.backbone import Backbone
from ssft.config.registry import ADAPTERS

logger = logging.getLogger(__name__)

PREFIX_METHODS = ("hidden_prefix", "ss_hidden_prefix")
LORA_METHODS = ("lora", "lora++", "ss_lora")
MODES = ("sequential", "concurrent")


def _module_spec(value: Any, where: str) -> tuple[str, dict[str, Any]]:
    if isinstance(value, str):
        value = {"method": value}
    if not isinstance(value, dict):
        raise SsftError(f"{where}: expected a mapping with a 'method' key, got {value!r}")
    options = dict(value)
    method = options.pop("method", None)
    allowed = PREFIX_METHODS + LORA_METHODS
    if method not in allowed:
        raise SsftError(f"{where}.method: expected one of {', '.join(allowed)}, got {method!r}")
    return method, options


@dataclass
class HybridOptions:
    first: dict[str, Any] | None = None  # {method: ..., options...}
    second: dict[str, Any] | None = None
    first_epochs: int = 1  # m of Algorithm 1
    second_epochs: int = 1  # n of Algorithm 1
    mode: str = "sequential"

    def module_specs(self, where: str = "adapter") -> list[tuple[str, dict[str, Any], Any]]:
        """[(method, options, validated config)] of ``first`` and ``second``."""
        specs = []
        for key in ("first", "second"):
            value = getattr(self, key)
            if value is None:
                raise SsftError(f"{where}.{key}: missing (e.g. {key}: {{method: {'hidden_prefix' if key == 'first' else 'lora'}}})")
            method, options = _module_spec(value, f"{where}.{key}")
            config = ADAPTERS.get(method).config_from(options, f"{where}.{key}")
            specs.append((method, options, config))
        return specs

    def check(self, where: str) -> None:
        specs = self.module_specs(where)
        kinds = ["prefix" if m in PREFIX_METHODS else "lora" for m, _, _ in specs]
        if kinds[0] == kinds[1]:
            raise SsftError(f"{where}.second: a hybrid combines one prefix method ({', '.join(PREFIX_METHODS)}) with one "
                            f"LoRA method ({', '.join(LORA_METHODS)}); first and second are both {kinds[0]} methods")
        for key in ("first_epochs", "second_epochs"):
            if getattr(self, key) < 1:
                raise SsftError(f"{where}.{key}: must be >= 1")
        if self.mode not in MODES:
            raise SsftError(f"{where}.mode: expected one of {', '.join(MODES)}, got '{self.mode}'")

    @property
    def methods(self) -> tuple[str, str]:
        first, second = self.module_specs()
        return first[0], second[0]


@ADAPTERS.register("hybrid")
class Hybrid(Adapter):
    """Prefix tuning (``hidden_prefix``) and LoRA in one backbone; which trains when is decided by
    ``train_hybrid`` (sequential: Algorithm 1 of 001; concurrent: §5.2)."""

    name = "hybrid"
    Config = HybridOptions

    @classmethod
    def apply(cls, model: nn.Module, config: HybridOptions) -> Backbone:
        by_kind = {("prefix" if m in PREFIX_METHODS else "lora"): (m, c) for m, _, c in config.module_specs()}
        prefix_method, prefix_config = by_kind["prefix"]
        lora_method, lora_config = by_kind["lora"]
        # the prefix first: its apply freezes every parameter of the model, which would include LoRA's
        prefix = ADAPTERS.get(prefix_method).apply(model, prefix_config).hidden_prefix
        peft_backbone = ADAPTERS.get(lora_method).apply(model, lora_config)
        backbone = Backbone(peft_backbone.model, cls.name, hidden_prefix=prefix)
        backbone.tower_switch = peft_backbone.tower_switch  # ss_lora: shared + tower-specific adapters
        return backbone

    @classmethod
    def load_backbone(cls, transformer: nn.Module, path: Path, spec: dict[str, Any]) -> Backbone:
        """The LoRA part from ``adapter/`` (``adapter/<name>/`` for ss_lora's named adapters); the prefix
        (``hidden_prefix.*``) is loaded by ``Ranker.load`` like any hidden prefix."""
        from ssft.models.base import load_peft_adapter

        config = cls.config_from(spec.get("options", {}))
        lora_method, lora_options = next((m, o) for m, o, _ in config.module_specs() if m in LORA_METHODS)
        if lora_method == "ss_lora":
            loaded = ADAPTERS.get("ss_lora").load_backbone(transformer, path, {"options": lora_options,
                                                                                "base_model": spec.get("base_model")})
            backbone = Backbone(loaded.model, cls.name)
            backbone.tower_switch = loaded.tower_switch
            return backbone
        return Backbone(load_peft_adapter(transformer, path / "adapter", spec.get("base_model")), cls.name)


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
                 metric: str = "nDCG@10", resume: bool = False) -> list[Phase]:
    """Train a hybrid ranker phase by phase (001 Algorithm 1 when ``config.mode`` is sequential).

    ``make_trainer(phase_name, epochs, callbacks)`` returns a fresh Trainer over ``ranker`` that evaluates each
    epoch and carries ``callbacks`` (the phase's ``BestEpochCallback``); it is called after the phase's modules
    are set trainable, so its optimizer holds exactly them. At the end of each phase the best validation weights
    of the trained modules are restored (by the callback); the next phase freezes them.

    With ``resume``, each phase's Trainer needs its own ``output_dir``: a finished phase leaves there ``result/``
    (the ranker after the phase) and ``phase.json`` (its best-epoch record, written last); a later call skips a
    finished phase (loading its result) and resumes an unfinished one from its latest complete checkpoint."""
    from pathlib import Path

    from ssft.training.callbacks.best_epoch import BestEpochCallback
    from ssft.core.io import atomic_write_json

    phases = []
    for name, modules, epochs in hybrid_phases(config):
        set_trainable(ranker, modules)
        best = BestEpochCallback(metric)
        trainer = make_trainer(name, epochs, [best])
        folder = Path(trainer.args.output_dir)
        record = folder / PHASE_RECORD
        if resume and record.is_file() and (folder / "result").is_dir():
            import json

            from transformers.trainer_utils import TrainOutput

            saved = json.loads(record.read_text())
            ranker.load_weights(folder / "result")
            best.load_state(saved["best"])
            output = TrainOutput(saved["global_step"], saved["train_loss"], {})
            logger.info("hybrid phase '%s' finished earlier: its weights read from %s", name, folder / "result")
        else:
            checkpoint = None
            if resume:  # a checkpoint cut short is removed, never trained into or resumed from
                from ssft.training.trainer import discard_incomplete_checkpoints, latest_checkpoint

                discard_incomplete_checkpoints(folder)
                checkpoint = latest_checkpoint(folder)
            output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
            if resume and trainer.args.should_save:
                ranker.save(folder / "result")
                atomic_write_json(record, {"phase": name, "global_step": output.global_step,
                                           "train_loss": output.training_loss, "best": best.state_dict()})
        phases.append(Phase(name, modules, epochs, best, output, trainer))
    return phases


__all__ = ["Hybrid", "HybridOptions", "Phase", "hybrid_modules", "hybrid_phases", "set_trainable", "train_hybrid"]
