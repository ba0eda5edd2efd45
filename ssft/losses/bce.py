from __future__ import annotations

import torch
import torch.nn.functional as F

from ssft.losses.base import RankingLoss


class PointwiseBCELoss(RankingLoss):
    r"""Pointwise binary cross-entropy (monoBERT, Nogueira & Cho 2019): each pair is classified on its own.

    .. math:: L = -\frac{1}{N}\sum_i \big[y_i \log\sigma(s_i) + (1 - y_i)\log(1 - \sigma(s_i))\big]

    with :math:`y = 1` for the positive (column 0) and 0 for the negatives.

    Inputs:
        scores: (batch, 1 + n) logits, the positive in column 0.
    Returns:
        scalar loss.
    """

    name = "bce"

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        self.check(scores)
        labels = torch.zeros_like(scores)
        labels[:, 0] = 1.0
        return F.binary_cross_entropy_with_logits(scores, labels)
