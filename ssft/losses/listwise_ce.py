from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ssft.config.parse import Checked
from ssft.losses.base import RankingLoss


@dataclass
class TemperatureOptions(Checked):
    temperature: float = 1.0  # tau: scores are divided by it before the softmax

    def problem(self) -> str | None:
        return "temperature must be > 0" if self.temperature <= 0 else None


class ListwiseSoftmaxCELoss(RankingLoss):
    r"""Listwise softmax cross-entropy over one positive and n negatives (localised contrastive estimation,
    Gao et al. 2021; the cross-entropy form of 001's Eq. 1 generalised to n negatives).

    .. math:: L = -\log \frac{e^{s_{pos}/\tau}}{e^{s_{pos}/\tau} + \sum_j e^{s_{neg_j}/\tau}}

    Options:
        temperature: :math:`\tau` (default 1.0).
    Inputs:
        scores: (batch, 1 + n), the positive in column 0.
    Returns:
        scalar loss.
    """

    name = "listwise_ce"
    Config = TemperatureOptions

    def __init__(self, temperature: float = 1.0):
        super().__init__()
        TemperatureOptions(temperature).raise_problem()
        self.temperature = temperature

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        self.check(scores)
        target = torch.zeros(scores.size(0), dtype=torch.long, device=scores.device)
        return F.cross_entropy(scores / self.temperature, target)
