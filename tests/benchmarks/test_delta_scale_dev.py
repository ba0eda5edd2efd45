"""benchmarks/delta_scale_dev.py: scales outside adapter.delta_scale's (0, 1] and a test split are refused by name
before any run is loaded."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import delta_scale_dev  # noqa: E402


@pytest.mark.parametrize("scales", ["1,0", "0.5,1.5", "-0.25", "1,half"])
def test_a_scale_outside_zero_to_one_is_refused_by_name(scales, tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        delta_scale_dev.main([str(tmp_path / "no_run"), f"--scales={scales}"])
    assert refused.value.code != 0
    assert "argument --scales:" in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_other_collections_test_split_is_refused(tmp_path):
    with pytest.raises(SystemExit) as refused:
        delta_scale_dev.main([str(tmp_path / "no_run"), "--other-split", "test"])
    assert "--other-split: test splits are looked at once" in str(refused.value.code)


def test_scales_parse_in_order():
    assert delta_scale_dev.scale_list("1,0.75,0.5,1e-6") == [1.0, 0.75, 0.5, 1e-6]
