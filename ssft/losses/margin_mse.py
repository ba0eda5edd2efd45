from __future__ import annotations

import torch
import torch.nn.functional as F

from ssft.losses.base import RankingLoss


class MarginMSELoss(RankingLoss):
    r"""Margin-MSE distillation (Hofstätter et al. 2020, "Improving Efficient Neural Ranking Models with
    Cross-Architecture Knowledge Distillation", §3 Eq. 1): the student's margin between the positive and each
    negative regresses onto the teacher's margin of the same pair, with the teacher's scores precomputed
    (``data.train`` in the scored form).

    .. math:: L = \frac{1}{B\,n}\sum_{i=1}^{B}\sum_{j=1}^{n}
              \Big[\big(s(q_i, d_i^+) - s(q_i, d_{ij}^-)\big) - \big(t(q_i, d_i^+) - t(q_i, d_{ij}^-)\big)\Big]^2

    With one negative this is the paper's loss; with n it is the mean over the n margins, as sentence-transformers'
    ``MarginMSELoss`` does with a (batch, 1 + n) label of positive-and-negative scores.

    Inputs:
        student: (batch, 1 + n) the student's scores of each query's candidates, the positive in column 0.
        teacher: (batch, 1 + n) the teacher's scores of the same candidates (detached).
    Returns:
        scalar loss.
    """

    name = "margin_mse"
    needs_teacher_scores = True

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        check_pair(student, teacher)
        teacher = teacher.detach().to(student.dtype)
        return F.mse_loss(student[:, :1] - student[:, 1:], teacher[:, :1] - teacher[:, 1:])


def check_pair(student: torch.Tensor, teacher: torch.Tensor) -> None:
    """Both (batch, 1 + n) with n >= 1, the same shape."""
    RankingLoss.check(student)
    if student.shape != teacher.shape:
        raise ValueError(f"student scores {tuple(student.shape)} and teacher scores {tuple(teacher.shape)} must have "
                         "the same shape")
