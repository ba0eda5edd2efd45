"""Ranking losses, one per file. Every loss takes scores shaped (batch, 1 + negatives), positive in column 0, except
the distillation loss ``tct`` (``needs_teacher``): student and teacher scores of every query against every
document of the batch (``RankingTrainer`` scores the batch with the teacher); and the distillation losses on
precomputed teacher scores (``needs_teacher_scores``: ``margin_mse``, ``listwise_kl``), which take the student's and
the teacher's scores of each query's candidate list. Beside them, not a ``loss.name``: the auxiliary terms
``embedding_match`` and ``score_distillation`` (the ``distillation`` section) and ``token_reconstruction``
(``loss.reconstruction_weight``, 004 §4.2)."""
from ssft.losses.base import RankingLoss
from ssft.losses.bce import PointwiseBCELoss
from ssft.losses.contrastive import ContrastiveLoss
from ssft.losses.listwise_ce import ListwiseSoftmaxCELoss
from ssft.losses.listwise_kl import ListwiseKLLoss
from ssft.losses.margin_mse import MarginMSELoss
from ssft.losses.pairwise_softmax import PairwiseSoftmaxLoss
from ssft.losses.tct import TightlyCoupledDistillationLoss

__all__ = ["RankingLoss", "ContrastiveLoss", "PairwiseSoftmaxLoss", "PointwiseBCELoss", "ListwiseSoftmaxCELoss",
           "TightlyCoupledDistillationLoss", "MarginMSELoss", "ListwiseKLLoss"]
