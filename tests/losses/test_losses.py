import math

import pytest
import torch

from ssft.config.registry import LOSSES
from ssft.core.errors import SsftError
from ssft.losses import ListwiseSoftmaxCELoss, PairwiseSoftmaxLoss, PointwiseBCELoss


def test_pairwise_softmax_eq1_hand_computed():
    # one triplet: s_pos = 2, s_neg = 0 → 1 - e^2 / (e^2 + e^0)
    loss = PairwiseSoftmaxLoss()(torch.tensor([[2.0, 0.0]]))
    assert loss.item() == pytest.approx(1 - math.e**2 / (math.e**2 + 1))
    # two negatives: mean over the two pairs
    loss = PairwiseSoftmaxLoss()(torch.tensor([[1.0, 1.0, 3.0]]))
    expected = ((1 - 0.5) + (1 - math.e / (math.e + math.e**3))) / 2
    assert loss.item() == pytest.approx(expected)


def test_pairwise_softmax_bounded_and_stable():
    loss = PairwiseSoftmaxLoss()(torch.tensor([[1000.0, -1000.0], [-1000.0, 1000.0]]))
    assert loss.item() == pytest.approx(0.5)  # one pair perfect (0), one hopeless (1)


def test_bce_hand_computed():
    scores = torch.tensor([[0.0, 0.0]])
    # -log(0.5) for both pairs
    assert PointwiseBCELoss()(scores).item() == pytest.approx(math.log(2))
    scores = torch.tensor([[2.0, -1.0]])
    expected = (-math.log(1 / (1 + math.exp(-2))) - math.log(1 - 1 / (1 + math.exp(1)))) / 2
    assert PointwiseBCELoss()(scores).item() == pytest.approx(expected)


def test_listwise_ce_hand_computed():
    scores = torch.tensor([[2.0, 1.0, 0.0]])
    expected = -math.log(math.e**2 / (math.e**2 + math.e + 1))
    assert ListwiseSoftmaxCELoss()(scores).item() == pytest.approx(expected)
    expected_t = -math.log(math.e**4 / (math.e**4 + math.e**2 + 1))
    assert ListwiseSoftmaxCELoss(temperature=0.5)(scores).item() == pytest.approx(expected_t)


@pytest.mark.parametrize("cls", [PairwiseSoftmaxLoss, PointwiseBCELoss, ListwiseSoftmaxCELoss])
def test_losses_reject_groups_without_negatives(cls):
    with pytest.raises(ValueError):
        cls()(torch.tensor([[1.0], [2.0]]))


def test_loss_registry_and_options():
    assert set(LOSSES.names()) >= {"pairwise_softmax", "bce", "listwise_ce"}
    assert LOSSES.get("listwise_ce").from_options({"temperature": "0.5"}).temperature == 0.5
    with pytest.raises(SsftError, match="unknown option 'margin'"):
        LOSSES.get("bce").from_options({"margin": 1})
    with pytest.raises(SsftError, match="did you mean 'bce'"):
        LOSSES.get("bcee")
