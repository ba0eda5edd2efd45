"""Fine-tuning methods: each turns a pretrained transformers model into a ``Backbone`` whose trainable
parameters are exactly what the method says."""
from __future__ import annotations

import dataclasses
import typing
from typing import Any

from torch import nn

from ssft.core.errors import SsftError
from ssft.adapters.backbone import Backbone


@dataclasses.dataclass
class NoOptions:
    pass


class Adapter:
    """Subclasses set ``name``, ``Config`` (a dataclass of the method's hyper-parameters) and ``apply``."""

    name: str = ""
    Config: type = NoOptions
    peft: bool = False  # saved in PEFT's format
    frozen_base: bool = False  # no backbone weight changes: a saved folder holds no copy of the base model

    @classmethod
    def config_from(cls, options: dict[str, Any], where: str = "adapter"):
        from ssft.config.recipe import _check_type

        names = [f.name for f in dataclasses.fields(cls.Config)]
        hints = typing.get_type_hints(cls.Config)
        kwargs = {}
        for key, val in (options or {}).items():
            if key not in names:
                allowed = ", ".join(names) or "none"
                raise SsftError(
                    f"{where}: unknown option '{key}' for method '{cls.name}' (allowed: {allowed}; to switch method "
                    f"from the command line, replace the section: \"adapter={{method: {cls.name}}}\")"
                )
            kwargs[key] = _check_type(val, hints[key], f"{where}.{key}")
        config = cls.Config(**kwargs)
        check = getattr(config, "check", None)
        if check:
            check(where)
        return config

    @classmethod
    def apply(cls, model: nn.Module, config) -> Backbone:
        raise NotImplementedError


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
