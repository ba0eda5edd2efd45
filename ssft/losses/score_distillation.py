from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ssft.config.choices import SCORE_LOSSES as KINDS
from ssft.core.errors import SsftError


class ScoreDistillationLoss(nn.Module):
    r"""Score-based distillation (004 §2.2 Eq. 3, App. A): the student's scores of each query's documents against
    the teacher's scores of the same documents. With :math:`t_{ij}` the teacher's and :math:`s_{ij}` the student's
    score of query i and document j:

    - ``softmax_ce`` (Eq. 11): :math:`-\sum_j \mathrm{softmax}(t_i/\tau)_j \log \mathrm{softmax}(s_i/\tau)_j`
      (the temperature of App. A's footnote 6);
    - ``bce`` (Eq. 12): :math:`-\sum_j \big[\sigma(t_{ij}) \log\sigma(s_{ij}) + \sigma(-t_{ij}) \log\sigma(-s_{ij})\big]`;
    - ``mse`` (Eq. 13): :math:`\sum_j (t_{ij} - s_{ij})^2`;

    summed over each row's documents, averaged over rows. Entries of -inf (a query's other positives, left out of
    the dense training rows) are no documents of that row; they must be -inf in both matrices.

    Options:
        kind: ``softmax_ce`` | ``bce`` | ``mse``; temperature: :math:`\tau` (softmax_ce only, default 1).
    Inputs:
        student: (rows, L) student scores; teacher: (rows, L) teacher scores (detached).
    Returns:
        scalar loss.
    """

    def __init__(self, kind: str = "softmax_ce", temperature: float = 1.0):
        super().__init__()
        if kind not in KINDS:
            raise SsftError(f"score distillation loss: expected one of {', '.join(KINDS)}, got '{kind}'")
        if temperature <= 0:
            raise SsftError("score distillation temperature must be > 0")
        self.kind = kind
        self.temperature = float(temperature)

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        if student.shape != teacher.shape or student.dim() != 2:
            raise ValueError(f"student and teacher scores must both be (rows, L), got {tuple(student.shape)} and "
                             f"{tuple(teacher.shape)}")
        teacher = teacher.detach()
        valid = torch.isfinite(student)
        if not torch.equal(valid, torch.isfinite(teacher)):
            raise ValueError("student and teacher scores must leave out (-inf) the same entries")
        zero = torch.zeros((), dtype=student.dtype, device=student.device)
        if self.kind == "softmax_ce":
            target = torch.softmax(teacher / self.temperature, dim=-1)
            log_p = torch.log_softmax(student / self.temperature, dim=-1)
            per_row = -torch.where(valid, target * log_p, zero).sum(-1)
        else:
            s = torch.where(valid, student, zero)
            t = torch.where(valid, teacher, zero)
            if self.kind == "bce":
                per_entry = F.binary_cross_entropy_with_logits(s, torch.sigmoid(t), reduction="none")
            else:
                per_entry = (t - s).pow(2)
            per_row = torch.where(valid, per_entry, zero).sum(-1)
        return per_row.mean()
