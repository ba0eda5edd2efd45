"""int8's check of its own scores (``ssft.models.interop.openvino.int8_check``): the measure against hand-checked
values, the pairs it draws, and what a ranker serves at either side of the limit: int8 within it, the machine's float
precision above it, said in one line; a bi-encoder is not checked."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from ssft.core import precision as precisions
from tests.models.test_openvino import QUERIES, build, towers  # noqa: F401 -- towers: the module's fixture

pytest.importorskip("openvino")
from ssft.models.interop import openvino as backend  # noqa: E402 -- only with openvino installed

FLOAT = "bf16" if precisions.cpu_bf16_native() else "fp32"


def test_relative_score_error_against_hand_checked_values():
    # query 1: reference 1, 2, 3 (sd sqrt(2/3) = 0.8165), one score off by 0.5: mean |error| 1/6, 0.2041 of the sd;
    # query 2: no spread, left out; query 3: reference 0, 4 (sd 2), both off by 1: 0.5
    reference = [1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 0.0, 4.0]
    scores = [1.5, 2.0, 3.0, 9.0, 1.0, 5.0, 1.0, 3.0]
    assert backend.relative_score_error(reference, scores, [3, 3, 2]) == pytest.approx((0.5 / 3 / 0.8164966 + 0.5) / 2)
    assert backend.relative_score_error(reference, reference, [3, 3, 2]) == 0.0
    assert backend.relative_score_error([5.0, 5.0], [1.0, 2.0], [2]) == 0.0  # nothing to measure against


def test_check_groups_draws_whole_queries_their_first_pairs_and_follows_the_seed():
    items = [(f"q{i}", f"d{i}-{j}") for i in range(12) for j in range(6)] + [("lone", "d"), ("pair", "a"), ("pair", "b")]
    items.append("a lone text")
    groups = backend.check_groups(items, size=12, per_query=4, seed=0)
    assert [len(g) for g in groups] == [4, 4, 4]  # whole queries, until 12 pairs
    for group in groups:
        query = group[0][0]
        assert group == [(query, f"d{query[1:]}-{j}") for j in range(4)]  # the first 4, in order
    assert backend.check_groups(items, size=12, per_query=4, seed=0) == groups
    drawn = {g[0][0] for seed in range(6) for g in backend.check_groups(items, size=12, per_query=4, seed=seed)}
    assert len(drawn) > 3 and not drawn & {"lone", "pair"}  # other seeds, other queries; fewer than 3 pairs: never
    assert backend.check_groups(["text", "another"], seed=0) == []  # lone texts: nothing to check


def _pairs() -> list[tuple[str, str]]:
    rng = np.random.default_rng(2)
    words = "bone iron heart coffee tea calcium blood pressure diet meat beans spinach tissue hard long short".split()
    return [(QUERIES[i % 3], " ".join(rng.choice(words, size=int(rng.integers(5, 30))))) for i in range(60)]


def test_a_cross_encoder_serves_int8_within_the_limit_and_float_above_it(towers, monkeypatch, caplog):  # noqa: F811
    pairs = _pairs()
    measured: list[float] = []
    check = backend.int8_check
    monkeypatch.setattr(backend, "int8_check", lambda *a, **k: measured.append(check(*a, **k)) or measured[-1])
    caplog.set_level(logging.INFO, logger="ssft")
    ranker = backend.serve_openvino(build(towers, "cross", "lora", {"head": "classifier"}), "int8", calibration=pairs)
    assert ranker.serving_backend == "openvino:int8" and precisions.calibration_of(ranker) is not None
    assert len(measured) == 1 and measured[0] > 0  # scores moved, and within the (lifted) limit
    assert "int8: on 3 queries of the pairs served, its scores moved" in caplog.text
    int8_scores = ranker.predict(pairs)

    monkeypatch.setattr(backend, "CHECK_LIMIT", measured[0] / 2)  # the same scores, now above the limit
    caplog.clear()
    ranker = backend.serve_openvino(build(towers, "cross", "lora", {"head": "classifier"}), "int8", calibration=pairs)
    assert measured[1] == measured[0]  # the same check, the same sample: the same measure
    assert ranker.serving_backend == f"openvino:{FLOAT}" and precisions.calibration_of(ranker) is None
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == [f"int8: on 3 queries of the pairs served, its scores moved {measured[0]:.3f} of a query's "
                       f"spread from float (it keeps within {measured[0] / 2:.2f}): this model serves at {FLOAT} instead"]
    assert not np.array_equal(ranker.predict(pairs), int8_scores)
    want = backend.serve_openvino(build(towers, "cross", "lora", {"head": "classifier"}), FLOAT).predict(pairs)
    np.testing.assert_array_equal(ranker.predict(pairs), want)  # exactly what serving at float gives


def test_a_bi_encoder_is_not_checked(towers, monkeypatch):  # noqa: F811
    monkeypatch.setattr(backend, "CHECK_LIMIT", 0.0)
    dense = build(towers, "dense", "lora", {"projection_dim": 24})
    assert not dense.int8_checks_scores
    backend.serve_openvino(dense, "int8", calibration=_pairs())
    assert dense.serving_backend == "openvino:int8"


def test_pairs_with_no_query_to_measure_serve_int8_unchecked_and_say_so(towers, monkeypatch, caplog):  # noqa: F811
    monkeypatch.setattr(backend, "CHECK_LIMIT", 0.0)  # any measure would fall back: none is taken
    caplog.set_level(logging.INFO, logger="ssft")
    pairs = _pairs()[:6]
    pairs = [(f"{query} {i // 2}", document) for i, (query, document) in enumerate(pairs)]  # two pairs a query
    ranker = backend.serve_openvino(build(towers, "cross", "lora", {"head": "classifier"}), "int8", calibration=pairs)
    assert ranker.serving_backend == "openvino:int8"
    assert "int8: no query among the pairs served has 3 pairs or more" in caplog.text
