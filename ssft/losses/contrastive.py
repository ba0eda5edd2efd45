from __future__ import annotations

import torch
import torch.nn.functional as F

from ssft.losses.base import RankingLoss
from ssft.registry import LOSSES


@LOSSES.register("contrastive")
class ContrastiveLoss(RankingLoss):
    r"""Contrastive loss of dense retrieval, DAFT (Leonhardt et al.) Eq. 5:

    .. math:: \mathcal{L}(q, d^+, D^-) = -\log \frac{\exp(\Phi(q, d^+)/\tau)}{\sum_{d \in D^- \cup \{d^+\}} \exp(\Phi(q, d)/\tau)}

    :math:`D^-` is whatever the score row holds after the positive: for the dense dual encoder, every other
    document of the batch (in-batch negatives and the BM25 hard negatives of all queries) and the negatives
    drawn from a negative cache. Entries of -inf are not negatives (the query's other positives) and drop out
    of the sum. When the representations collapse (every score equal) the loss is :math:`\log(1 + |D^-|)`
    (Eq. 7), what ``ssft.callbacks.collapse_monitor`` compares against.

    Options:
        temperature: :math:`\tau` (default 1.0, as in 000 §5.3.2; the model's score scale of 20 comes first).
    Inputs:
        scores: (batch, 1 + n), the positive in column 0 (finite), -inf for excluded columns.
    Returns:
        scalar loss.
    """

    options = ("temperature",)

    def __init__(self, temperature: float = 1.0):
        super().__init__()
        if temperature <= 0:
            raise ValueError("temperature must be > 0")
        self.temperature = temperature

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        self.check(scores)
        if not torch.isfinite(scores[:, 0]).all():
            raise ValueError("the positive's score (column 0) must be finite")
        target = torch.zeros(scores.size(0), dtype=torch.long, device=scores.device)
        return F.cross_entropy(scores / self.temperature, target)
