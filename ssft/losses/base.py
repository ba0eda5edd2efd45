from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ssft.core.errors import SsftError


class RankingLoss(nn.Module):
    """Base class: subclasses define ``forward(scores)`` with scores (batch, 1 + n), positive first.

    Options a recipe may set are the constructor's keyword arguments, listed in ``options``.
    """

    options: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, options: dict[str, Any], where: str = "loss") -> "RankingLoss":
        for key in options:
            if key not in cls.options:
                allowed = ", ".join(cls.options) or "none"
                raise SsftError(f"{where}: unknown option '{key}' for this loss (allowed: {allowed})")
        try:
            return cls(**{k: float(v) for k, v in options.items()})
        except (TypeError, ValueError) as err:
            raise SsftError(f"{where}: {err}") from None

    @staticmethod
    def check(scores: torch.Tensor) -> None:
        if scores.dim() != 2 or scores.size(1) < 2:
            raise ValueError(f"expected scores shaped (batch, 1 + negatives) with >= 1 negative, got {tuple(scores.shape)}")

