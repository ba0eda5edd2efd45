"""Ranking losses, one per file. Every loss takes scores shaped (batch, 1 + negatives), positive in column 0."""
from ssft.losses.base import RankingLoss
from ssft.losses.bce import PointwiseBCELoss
from ssft.losses.contrastive import ContrastiveLoss
from ssft.losses.listwise_ce import ListwiseSoftmaxCELoss
from ssft.losses.pairwise_softmax import PairwiseSoftmaxLoss
from ssft.losses.tct import TightlyCoupledDistillationLoss

__all__ = ["RankingLoss", "ContrastiveLoss", "PairwiseSoftmaxLoss", "PointwiseBCELoss", "ListwiseSoftmaxCELoss",
           "TightlyCoupledDistillationLoss"]
