"""Fine-tuning methods: each turns a pretrained transformers model into a ``Backbone`` whose trainable
parameters are exactly what the method says."""
from __future__ import annotations

from typing import Any

from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.config.parse import NoOptions, parse_dataclass

__all__ = ["Adapter", "NoOptions", "count_parameters"]


class Adapter:
    """Subclasses set ``name`` (their registry name), ``Config`` (a dataclass of the method's hyper-parameters,
    parsed by ``config_from``) and ``apply``; the capability flags below say what other components may rely on
    (the recipe and the pipeline read them, never method names)."""

    name: str = ""
    Config: type = NoOptions
    peft: bool = False  # saved in PEFT's format
    frozen_base: bool = False  # no backbone weight changes: a saved folder holds no copy of the base model
    mergeable: bool = False  # one LoRA adapter every input goes through: merge_and_unload folds it into the weights
    needs_towers: bool = False  # semi-Siamese: encodes with tower="query" / "document" (a bi-encoder model only)
    one_backbone_only: bool = False  # wires one backbone into both towers: refused beside a separate document tower
    trains_in_phases: bool = False  # trained phase by phase (each its own epochs and Trainer run): a hybrid
    exportable: bool = False  # a plain transformers forward can hold it (merged if LoRA): ssft-export writes it

    @classmethod
    def config_from(cls, options: dict[str, Any] | None, where: str = "adapter"):
        """The method's typed ``Config`` from a recipe's adapter options (keys, types and values checked)."""
        def unknown(key: str, names: list[str]) -> str:
            return (f"{where}: unknown option '{key}' for method '{cls.name}' (allowed: {', '.join(names) or 'none'}; "
                    f"to switch method from the command line, replace the section: \"adapter={{method: {cls.name}}}\")")

        return parse_dataclass(cls.Config, options or {}, where, unknown=unknown)

    @classmethod
    def parts(cls, config) -> list[tuple[str, str]]:
        """(key, method) of the methods this one combines (a hybrid's ``first`` and ``second``); none by default."""
        return []

    @classmethod
    def apply(cls, model: nn.Module, config) -> Backbone:
        raise NotImplementedError

    @classmethod
    def finish(cls, backbone: Backbone, config) -> str | None:
        """Applied once to the weights a training run hands back (its best epoch), before they are saved and scored
        on the test split; returns one line saying what it changed, or None (the base class changes nothing)."""
        return None

    @classmethod
    def update_scale(cls, config) -> float:
        """The fraction of the trained update ``finish`` hands back (1: all of it). The ranker's own parameters that
        start at zero (``Ranker.zero_start_parameters``) are scaled by it too, so the whole model is the same
        ensemble of its start and its trained weights."""
        return 1.0

    @classmethod
    def finish_plan(cls, config) -> str | None:
        """What ``finish`` will do, in one line for the run's plan (known before training); None: nothing."""
        return None


def count_parameters(module: nn.Module) -> tuple[int, int]:
    """(trainable, total), counting each shared tensor once."""
    seen, trainable, total = set(), 0, 0
    for p in module.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        if p.requires_grad:
            trainable += p.numel()
    return trainable, total
