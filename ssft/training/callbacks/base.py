"""What every callback a recipe names shares: its registry name, its typed ``Config`` (the constructor's keyword
arguments, parsed by ``config_from``) and the capability flags the recipe's checks read."""
from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from ssft.config.parse import NoOptions, field_names, parse_dataclass


class RecipeCallback(TrainerCallback):
    """Subclasses set ``name`` (their registry name) and ``Config`` (a dataclass whose fields are the constructor's
    keyword arguments, with a ``check(where)`` for their ranges)."""

    name: str = ""
    Config: type = NoOptions
    adds_negatives: bool = False  # scores documents from outside the batch (a negative cache): no in-loop teacher grades them
    needs_document_tower: bool = False  # works on a separate document tower (model.document_name), e.g. DAFT's alignment
    combines_with_distillation: bool = True  # False: refused beside the recipe's distillation section

    @classmethod
    def config_from(cls, options: dict[str, Any] | None, where: str = "callbacks"):
        """The callback's typed ``Config`` from a recipe entry's options (``where``: the callbacks section)."""
        def unknown(key: str, names: list[str]) -> str:
            return f"{where}: unknown option '{key}' for callback '{cls.name}' (allowed: {', '.join(names) or 'none'})"

        at = f"{where}.{cls.name}"
        return parse_dataclass(cls.Config, options or {}, at, unknown=unknown, field_where=at)

    @classmethod
    def training_problem(cls, config, training: dict[str, Any]) -> str | None:
        """What makes this callback unable to work with the recipe's ``training`` section (TrainingArguments keys),
        or None; the recipe check raises it as one line before anything is written."""
        return None

    @classmethod
    def from_config(cls, config) -> RecipeCallback:
        return cls(**{name: getattr(config, name) for name in field_names(type(config))})


__all__ = ["RecipeCallback"]
