"""benchmarks/int8_settings.py: each setting's NNCF arguments, and the ignored scopes match the layers they name."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

int8_settings = pytest.importorskip("int8_settings", exc_type=ImportError)  # nncf: the openvino extra

NODES = ["__module.model.encoder.layer.0.attention.output.dense/aten::linear/MatMul",
         "__module.model.encoder.layer.0.output.dense/aten::linear/MatMul",
         "__module.model.encoder.layer.0.intermediate.dense/aten::linear/MatMul",
         "__module.model.encoder.layer.5.layer.output.dense/aten::linear/MatMul",  # the [CLS]-only last layer
         "__module.model.encoder.layer.5.layer.attention.self.query/aten::linear/MatMul",
         "__module.model.encoder.layer.2.attention.self.value/aten::linear/MatMul"]


def _ignored(setting: str) -> list[str]:
    scope = int8_settings.nncf_arguments(setting, 6)["ignored_scope"]
    return [n for n in NODES if any(re.match(p, n) for p in scope.patterns)]


def test_ffn_out_ignores_the_feed_forward_output_projections_only():
    assert _ignored("ffn_out") == [NODES[1], NODES[3]]


def test_last_ignores_the_last_layer_only():
    assert _ignored("last") == NODES[3:5]


def test_qkv_adds_the_attention_value_projections_only():
    assert _ignored("qkv") == [NODES[5]]


def test_the_other_settings():
    assert int8_settings.nncf_arguments("base", 6) == {} == int8_settings.nncf_arguments("calibration_1000", 6)
    assert int8_settings.nncf_arguments("scores_int8", 6) == {}  # the difference lies in what ssft itself keeps
    assert int8_settings.nncf_arguments("no_smooth_quant", 6)["advanced_parameters"].smooth_quant_alphas.matmul == -1
    assert "preset" in int8_settings.nncf_arguments("performance", 6)
    with pytest.raises(SystemExit, match="unknown setting 'fast'"):
        int8_settings.nncf_arguments("fast", 6)
    with pytest.raises(SystemExit, match="give name:split"):
        int8_settings.fidelity_pairs("nfcorpus", 10, 20)


def test_sq_sets_smooth_quants_alpha_and_scores_int8_sq_quantises_query_and_key_too():
    for setting in ("sq_0.75", "scores_int8_sq_0.75"):
        assert int8_settings.nncf_arguments(setting, 6)["advanced_parameters"].smooth_quant_alphas.matmul == 0.75
    assert int8_settings.smooth_quant_alpha("scores_int8_sq_1") == 1.0
    assert int8_settings.smooth_quant_alpha("base") is None
    assert int8_settings.all_projections_int8("scores_int8_sq_0.5") and int8_settings.all_projections_int8("scores_int8")
    assert not int8_settings.all_projections_int8("sq_0.5")
    with pytest.raises(SystemExit, match="between 0 and 1"):
        int8_settings.nncf_arguments("sq_1.5", 6)
    with pytest.raises(SystemExit, match="unknown setting 'sq_high'"):
        int8_settings.nncf_arguments("sq_high", 6)


def test_ranges_and_full_bias_reach_nncf_with_or_without_the_query_and_key_quantised():
    for setting in ("ranges_mean_quantile", "scores_int8_ranges_mean_quantile"):
        ranges = int8_settings.nncf_arguments(setting, 6)["advanced_parameters"].activations_range_estimator_params
        assert ranges == int8_settings.RangeEstimatorParametersSet.MEAN_QUANTILE
    assert int8_settings.nncf_arguments("scores_int8_full_bias", 6) == {"fast_bias_correction": False}
    with pytest.raises(SystemExit, match="no range estimator 'widest'"):
        int8_settings.nncf_arguments("ranges_widest", 6)


def test_qk_float_names_the_layers_whose_query_and_key_stay_float():
    assert int8_settings.qk_float_layers("qk_float_0_5", 6) == {0, 5}
    assert int8_settings.qk_float_layers("qk_float_", 6) == set()
    assert int8_settings.nncf_arguments("qk_float_1", 6) == {}  # the choice lies in what ssft itself keeps
    with pytest.raises(SystemExit, match="names layers 0 to 5"):
        int8_settings.nncf_arguments("qk_float_6", 6)
    with pytest.raises(SystemExit, match="names layers 0 to 5"):
        int8_settings.nncf_arguments("qk_float_first", 6)


def test_by_length_draws_one_item_from_each_length_stratum():
    items = [("q", "d" * n) for n in range(100, 0, -1)] + ["t" * n for n in range(1, 101)]  # pairs and lone texts
    drawn = int8_settings.by_length(items, 10, seed=0)
    lengths = sorted(sum(map(len, i)) if isinstance(i, tuple) else len(i) for i in drawn)
    order = sorted(sum(map(len, i)) if isinstance(i, tuple) else len(i) for i in items)
    assert len(drawn) == 10 and all(i in items for i in drawn)
    assert all(order[20 * k] <= length <= order[20 * k + 19] for k, length in enumerate(lengths))  # one per stratum
    assert int8_settings.by_length(items, 10, seed=0) == drawn
    assert int8_settings.by_length(items, 10, seed=1) != drawn
    assert int8_settings.by_length(items[:5], 10) == items[:5]
    assert int8_settings.nncf_arguments("by_length", 6) == {}


def test_a_setting_serves_int8_whatever_the_check_says_and_restores_the_limit(monkeypatch):
    openvino = int8_settings.openvino
    monkeypatch.setattr(openvino, "CHECK_LIMIT", 0.2)
    with int8_settings.applied("scores_int8_sq_0.5", seed=0):
        assert openvino.CHECK_LIMIT == float("inf")
    assert openvino.CHECK_LIMIT == 0.2
