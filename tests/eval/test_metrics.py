import math

import pytest

from ssft.core.errors import SsftError
from ssft.eval.fusion import interpolate
from ssft.eval.metrics import evaluate_run, parse_measures


def test_metrics_against_hand_computed_values():
    qrels = {"q1": {"a": 1, "c": 2}, "q2": {"z": 1}}
    run = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"x": 2.0, "z": 1.0}}
    agg, per_q = evaluate_run(qrels, run, ["P@2", "RR@10", "nDCG@3", "R@100"])
    # q1: ranks a(1) b(0) c(2); DCG = 1/log2(2) + (2^2-1... ir_measures uses gain = rel (trec_eval): 1 + 2/log2(4)
    dcg_q1 = 1 / math.log2(2) + 2 / math.log2(4)
    idcg_q1 = 2 / math.log2(2) + 1 / math.log2(3)
    dcg_q2 = 1 / math.log2(3)
    assert per_q["q1"]["nDCG@3"] == pytest.approx(dcg_q1 / idcg_q1)
    assert per_q["q2"]["nDCG@3"] == pytest.approx(dcg_q2)
    assert per_q["q1"]["P@2"] == pytest.approx(0.5)
    assert per_q["q2"]["RR@10"] == pytest.approx(0.5)
    assert agg["RR@10"] == pytest.approx(0.75)
    assert agg["R@100"] == pytest.approx(1.0)
    assert agg["nDCG@3"] == pytest.approx((dcg_q1 / idcg_q1 + dcg_q2) / 2)


def test_queries_missing_from_run_score_zero():
    agg, per_q = evaluate_run({"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}, {"q1": {"a": 1.0}, "q2": {}}, ["P@1", "nDCG@10"])
    assert agg["P@1"] == pytest.approx(1 / 3) and agg["nDCG@10"] == pytest.approx(1 / 3)
    assert per_q["q2"] == {"P@1": 0.0, "nDCG@10": 0.0} and per_q["q3"]["P@1"] == 0.0


def test_queries_without_relevant_documents_are_left_out():
    # a query judged only non-relevant cannot score: trec_eval leaves it out of the mean
    agg, per_q = evaluate_run({"q1": {"a": 1}, "q2": {"b": 0}}, {"q1": {"a": 1.0}, "q2": {"b": 1.0}}, ["P@1"])
    assert agg["P@1"] == 1.0 and set(per_q) == {"q1"}


def test_unknown_metric_is_a_clear_error():
    with pytest.raises(SsftError, match="unknown metric 'nDCG@@10'"):
        parse_measures(["nDCG@@10"])


def test_interpolation_minmax():
    model = {"q": {"a": 10.0, "b": 0.0}}
    first = {"q": {"a": 1.0, "b": 3.0}}
    fused = interpolate(model, first, 0.25)
    assert fused["q"]["a"] == pytest.approx(0.25 * 1 + 0.75 * 0)
    assert fused["q"]["b"] == pytest.approx(0.25 * 0 + 0.75 * 1)
    assert interpolate(model, first, 1.0)["q"] == {"a": 1.0, "b": 0.0}
