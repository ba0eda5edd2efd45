from __future__ import annotations

import torch

from ssft.losses.listwise_ce import ListwiseSoftmaxCELoss


class ContrastiveLoss(ListwiseSoftmaxCELoss):
    r"""Contrastive loss of dense retrieval, DAFT (Leonhardt et al.) Eq. 5:

    .. math:: \mathcal{L}(q, d^+, D^-) = -\log \frac{\exp(\Phi(q, d^+)/\tau)}{\sum_{d \in D^- \cup \{d^+\}} \exp(\Phi(q, d)/\tau)}

    :math:`D^-` is whatever the score row holds after the positive: for the dense dual encoder, every other
    document of the batch (in-batch negatives and the BM25 hard negatives of all queries) and the negatives
    drawn from a negative cache. Entries of -inf are not negatives (the query's other positives) and drop out
    of the sum. When the representations collapse (every score equal) the loss is :math:`\log(1 + |D^-|)`
    (Eq. 7), what ``ssft.training.callbacks.collapse_monitor`` compares against.

    Options:
        temperature: :math:`\tau` (default 1.0, as in 000 §5.3.2; the model's score scale of 20 comes first).
    Inputs:
        scores: (batch, 1 + n), the positive in column 0 (finite), -inf for excluded columns.
    Returns:
        scalar loss.
    """

    # the same softmax cross-entropy as listwise_ce (its temperature option and check); the score row here is
    # built by the dense model (in-batch + cached negatives, -inf for excluded ones), so the positive must be finite

    name = "contrastive"

    @staticmethod
    def check(scores: torch.Tensor) -> None:
        ListwiseSoftmaxCELoss.check(scores)
        if not torch.isfinite(scores[:, 0]).all():
            raise ValueError("the positive's score (column 0) must be finite")
