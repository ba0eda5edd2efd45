from __future__ import annotations

import torch
from torch import nn

from ssft.config.choices import EMBEDDING_DISTANCES as DISTANCES
from ssft.core.errors import SsftError


class EmbeddingMatchLoss(nn.Module):
    r"""Embedding matching between a student and a teacher: 004 Eq. 7 (queries) and Eq. 8 (documents), and 002's
    alignment objective (§2.2):

    .. math:: R_{Emb} = \frac{1}{n}\sum_{i} \lVert \mathrm{emb}^t_i - \mathrm{proj}(\mathrm{emb}^s_i) \rVert_2

    ``proj`` is the student's own projection (``model.projection_dim``; the identity when the sizes already
    match), applied before the student's vectors reach this loss.

    Options:
        distance: ``l2`` — the mean Euclidean distance above (Eq. 7-8, 002 §2.2's formula); ``mse`` — the mean
            squared difference per coordinate, :math:`\frac{1}{n d}\sum_i \lVert t_i - s_i \rVert_2^2` (what 002
            §3.3 trains with, ``torch.nn.MSELoss``).
    Inputs:
        student: (n, d) student embeddings (carry the gradient); teacher: (n, d) teacher embeddings (detached).
    Returns:
        scalar loss.
    """

    def __init__(self, distance: str = "l2"):
        super().__init__()
        if distance not in DISTANCES:
            raise SsftError(f"embedding distance: expected one of {', '.join(DISTANCES)}, got '{distance}'")
        self.distance = distance

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        if student.shape != teacher.shape or student.dim() != 2:
            raise ValueError(f"student and teacher embeddings must both be (n, d), got {tuple(student.shape)} and "
                             f"{tuple(teacher.shape)}")
        diff = student - teacher.detach()
        if self.distance == "mse":
            return diff.pow(2).mean()
        return diff.norm(dim=-1).mean()
