"""benchmarks/delta_scale_dev.py: scales outside adapter.delta_scale's (0, 1] and a test split are refused by name
before any run is loaded."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def refusal(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "delta_scale_dev.py"), str(tmp_path / "no_run"),
                           *args], capture_output=True, text=True, cwd=tmp_path)


@pytest.mark.parametrize("scales", ["1,0", "0.5,1.5", "-0.25", "1,half"])
def test_a_scale_outside_zero_to_one_is_refused_by_name(scales, tmp_path):
    done = refusal("--scales", scales, tmp_path=tmp_path)
    assert done.returncode != 0
    assert "argument --scales:" in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr


def test_the_other_collections_test_split_is_refused(tmp_path):
    done = refusal("--other-split", "test", tmp_path=tmp_path)
    assert done.returncode != 0
    assert "--other-split: test splits are looked at once" in done.stderr
