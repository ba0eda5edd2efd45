"""benchmarks/serve_length_dev.py: lengths below model.max_length's floor and a test split are refused by name before
any run is loaded."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_length_dev  # noqa: E402


@pytest.mark.parametrize("lengths", ["128,4", "long", "128,,192"])
def test_a_length_that_is_no_max_length_is_refused_by_name(lengths, tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        serve_length_dev.main([str(tmp_path / "no_run"), f"--lengths={lengths}"])
    assert refused.value.code != 0
    assert "argument --lengths:" in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_other_collections_test_split_is_refused(tmp_path):
    with pytest.raises(SystemExit) as refused:
        serve_length_dev.main([str(tmp_path / "no_run"), "--other", "nfcorpus", "--other-split", "test"])
    assert "--other-split: test splits are looked at once" in str(refused.value.code)


def test_lengths_parse_in_order():
    assert serve_length_dev.length_list("288,128,192") == [288, 128, 192]
