"""benchmarks/openvino_profile.py: the batches, the padded inputs and the useful-work counts against counts by hand."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import openvino_profile  # noqa: E402


def test_batches_are_cut_by_decreasing_token_count_ties_by_position():
    ids = [[1, 2, 3], [1, 2, 3, 4, 5], [1], [1, 2, 3, 4, 5]]
    assert openvino_profile.batches_by_tokens(ids, 2) == [[1, 3], [0, 2]]


def test_a_batch_is_padded_to_its_longest_row_or_the_length_asked_for():
    ids = [[7, 8, 9], [5]]
    input_ids, mask, segments = openvino_profile.feed(ids, [0, 1])
    assert input_ids.tolist() == [[7, 8, 9], [5, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert not segments.any()
    wide, wide_mask, _ = openvino_profile.feed(ids, [1], length=4)
    assert wide.tolist() == [[5, 0, 0, 0]] and wide_mask.tolist() == [[1, 0, 0, 0]]
    assert wide.dtype == np.int64


def test_useful_work_counts_linear_flops_and_attention_elements_of_the_padded_shapes():
    # 2 rows of 3 positions and 1 row of 2; hidden 4, FFN 8, 1 layer, 2 heads
    work = openvino_profile.useful_work([(2, 3), (1, 2)], hidden=4, intermediate=8, layers=1, heads=2)
    assert work["positions"] == 8
    assert work["linear_flops"] == 8 * 2 * (4 * 4 * 4 + 2 * 4 * 8)  # Q, K, V, output; FFN in and out; 2 per MAC
    assert work["score_elements"] == (2 * 9 + 1 * 4) * 2
