from __future__ import annotations

import torch
import torch.nn.functional as F

from ssft.losses.base import RankingLoss
from ssft.losses.listwise_ce import TemperatureOptions
from ssft.losses.margin_mse import check_pair


class ListwiseKLLoss(RankingLoss):
    r"""Listwise KL distillation over each query's candidate list, with precomputed teacher scores (``data.train``
    in the scored form): the student's softmax over the candidates is pulled towards the teacher's (Hinton et al.
    2015's soft targets; the listwise distillation of sentence-transformers' ``DistillKLDivLoss`` and PyLate's
    ``Distillation`` loss).

    .. math:: L = \frac{\tau^2}{B}\sum_{i=1}^{B} \mathrm{KL}\big(\mathrm{softmax}(t_i/\tau) \,\|\,
              \mathrm{softmax}(s_i/\tau)\big)
              = \frac{\tau^2}{B}\sum_i \sum_j p^t_{ij}\,\big(\log p^t_{ij} - \log p^s_{ij}\big)

    The :math:`\tau^2` factor keeps the gradient's size comparable across temperatures (Hinton et al. §2), as
    sentence-transformers' ``DistillKLDivLoss`` does; the sum over a row and mean over rows is ``KLDivLoss``'s
    ``batchmean`` reduction (both peers). With :math:`\tau = 1` this is PyLate's loss.

    Options:
        temperature: :math:`\tau` (default 1.0).
    Inputs:
        student: (batch, L) the student's scores of each query's candidates; teacher: (batch, L) the teacher's.
    Returns:
        scalar loss.
    """

    name = "listwise_kl"
    needs_teacher_scores = True
    Config = TemperatureOptions

    def __init__(self, temperature: float = 1.0):
        super().__init__()
        TemperatureOptions(temperature).raise_problem()
        self.temperature = float(temperature)

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        check_pair(student, teacher)
        tau = self.temperature
        log_p_student = torch.log_softmax(student / tau, dim=-1)
        log_p_teacher = torch.log_softmax(teacher.detach().to(student.dtype) / tau, dim=-1)
        return F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True) * tau ** 2
