from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ssft.config.parse import NoOptions, field_names, parse_dataclass


class RankingLoss(nn.Module):
    """Base class: subclasses set ``name`` (their registry name) and define ``forward(scores)`` with scores
    (batch, 1 + n), positive first.

    Options a recipe may set are the fields of the loss's ``Config`` dataclass (the constructor's keyword
    arguments), parsed once by ``config_from``; ``from_config`` builds the loss from them.
    """

    name: str = ""
    Config: type = NoOptions
    # capability flag: forward(student, teacher, positive, excluded) over every query x document of the batch, with
    # the scores of a frozen teacher RankingTrainer computes (tct); the student must be a bi-encoder
    needs_teacher: bool = False
    # capability flag: forward(student, teacher) over each query's own candidate list, both (batch, 1 + n), with the
    # teacher scores precomputed in the training data (data.train in the scored form; margin_mse, listwise_kl)
    needs_teacher_scores: bool = False
    # with needs_teacher: the student starts from the teacher's backbone weights (003 §4; ``loss.init_from_teacher``)
    init_from_teacher: bool = False

    @classmethod
    def config_from(cls, options: dict[str, Any] | None, where: str = "loss"):
        """The loss's typed ``Config`` from a recipe's loss options (keys, types and values checked)."""
        def unknown(key: str, names: list[str]) -> str:
            return f"{where}: unknown option '{key}' for this loss (allowed: {', '.join(names) or 'none'})"

        return parse_dataclass(cls.Config, options or {}, where, unknown=unknown)

    @classmethod
    def from_config(cls, config) -> RankingLoss:
        return cls(**{name: getattr(config, name) for name in field_names(type(config))})

    @classmethod
    def from_options(cls, options: dict[str, Any], where: str = "loss") -> RankingLoss:
        return cls.from_config(cls.config_from(options, where))

    @staticmethod
    def check(scores: torch.Tensor) -> None:
        if scores.dim() != 2 or scores.size(1) < 2:
            raise ValueError(f"expected scores shaped (batch, 1 + negatives) with >= 1 negative, got {tuple(scores.shape)}")
