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
modules together for ``first_epochs + second_epochs`` epochs, keeping the best epoch. This module builds the modules
(``HybridOptions``, ``Hybrid.apply``); the schedule is ``ssft.training.phases``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.adapters.base import Adapter
from ssft.adapters.loading import load_peft_adapter
from ssft.config.parse import Checked, Problem
from ssft.config.registry import ADAPTERS
from ssft.core.errors import SsftError

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
class HybridOptions(Checked):
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
                example = "hidden_prefix" if key == "first" else "lora"
                raise SsftError(f"{where}.{key}: missing (e.g. {key}: {{method: {example}}})")
            method, options = _module_spec(value, f"{where}.{key}")
            config = ADAPTERS.get(method).config_from(options, f"{where}.{key}")
            if getattr(config, "delta_scale", 1.0) != 1.0:  # a hybrid hands back its phases' weights as trained
                raise SsftError(f"{where}.{key}.delta_scale: not available inside a hybrid; remove it")
            specs.append((method, options, config))
        return specs

    def check(self, where: str) -> None:
        """``first`` and ``second`` hold configs of their own: parsed first (their errors name ``where.first...``),
        then the values (``problem``)."""
        self.module_specs(where)
        super().check(where)

    def problem(self) -> Problem:
        kinds = ["prefix" if m in PREFIX_METHODS else "lora" for m in self.methods]
        if kinds[0] == kinds[1]:
            return "second", (f"a hybrid combines one prefix method ({', '.join(PREFIX_METHODS)}) with one LoRA method "
                              f"({', '.join(LORA_METHODS)}); first and second are both {kinds[0]} methods")
        for key in ("first_epochs", "second_epochs"):
            if getattr(self, key) < 1:
                return key, "must be >= 1"
        if self.mode not in MODES:
            return "mode", f"expected one of {', '.join(MODES)}, got '{self.mode}'"
        return None

    @property
    def methods(self) -> tuple[str, str]:
        first, second = self.module_specs()
        return first[0], second[0]


class Hybrid(Adapter):
    """Prefix tuning (``hidden_prefix``) and LoRA in one backbone; which trains when is decided by
    ``ssft.training.phases.train_hybrid`` (sequential: Algorithm 1 of 001; concurrent: §5.2)."""

    name = "hybrid"
    Config = HybridOptions
    one_backbone_only = True
    trains_in_phases = True

    @classmethod
    def parts(cls, config: HybridOptions) -> list[tuple[str, str]]:
        return list(zip(("first", "second"), config.methods))

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
        config = cls.config_from(spec.get("options", {}))
        lora_method, lora_options = next((m, o) for m, o, _ in config.module_specs() if m in LORA_METHODS)
        lora = ADAPTERS.get(lora_method)
        if hasattr(lora, "load_backbone"):  # ss_lora: its named adapters, each in its own folder
            loaded = lora.load_backbone(transformer, path, {"options": lora_options, "base_model": spec.get("base_model")})
            backbone = Backbone(loaded.model, cls.name)
            backbone.tower_switch = loaded.tower_switch
            return backbone
        return Backbone(load_peft_adapter(transformer, path / "adapter", spec.get("base_model")), cls.name)


__all__ = ["Hybrid", "HybridOptions"]
