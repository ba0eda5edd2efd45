from __future__ import annotations

import torch

from ssft.losses.base import RankingLoss


class PairwiseSoftmaxLoss(RankingLoss):
    r"""Pairwise softmax loss of Jung, Choi & Rhee (WWW 2022), Eq. 1.

    .. math:: J(W) = \mathbb{E}\left[1 - \frac{e^{s_{pos}}}{e^{s_{pos}} + e^{s_{neg}}}\right]

    With several negatives per positive, the expectation runs over every (positive, negative) pair.
    Note that the paper's loss is one minus the pair's softmax probability (bounded in [0, 1]), not its
    negative log.

    Inputs:
        scores: (batch, 1 + n) relevance scores, the positive in column 0.
    Returns:
        scalar loss.
    """

    name = "pairwise_softmax"

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        self.check(scores)
        pos, neg = scores[:, :1], scores[:, 1:]
        # e^p / (e^p + e^n) = sigmoid(p - n), computed stably
        return (1.0 - torch.sigmoid(pos - neg)).mean()
