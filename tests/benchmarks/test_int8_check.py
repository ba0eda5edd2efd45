"""benchmarks/int8_check.py: the table serves int8 where the check's measure is within the limit and bf16 above it,
and its verdict is the worst served case."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import int8_check  # noqa: E402


def test_served_is_int8_within_the_limit_and_bf16_above_it():
    rows = [{"model": "m", "dataset": "x:dev", "depth": 20, "arm": "fp32", "seed": 0, "nDCG@10": 0.500},
            {"model": "m", "dataset": "x:dev", "depth": 20, "arm": "bf16", "seed": 0, "nDCG@10": 0.501},
            {"model": "m", "dataset": "x:dev", "depth": 20, "arm": "int8", "seed": 0, "nDCG@10": 0.498, "check": 0.1},
            {"model": "m", "dataset": "x:dev", "depth": 20, "arm": "int8", "seed": 1, "nDCG@10": 0.490, "check": 0.3},
            {"model": "m", "dataset": "x:dev", "depth": 20, "arm": "int8", "seed": 0, "nDCG@10": 0.450, "check": 0.5,
             "setting": "no_smooth_quant"}]  # shown, not in the verdict: not what ssft serves
    text = int8_check.table(rows, ["m"], ["x:dev"], 20, 0.2)
    assert "| `m` | x:dev | 0.5000 | 0.5010 (+0.0010) | base | 0 | 0.100 | 0.4980 (-0.0020) | int8 (-0.0020) |" in text
    assert "| `m` | x:dev | 0.5000 | 0.5010 (+0.0010) | base | 1 | 0.300 | 0.4900 (-0.0100) | bf16 (+0.0010) |" in text
    assert "| no_smooth_quant | 0 | 0.500 | 0.4500 (-0.0500) | bf16 (+0.0010) |" in text
    assert ("As ssft quantises (`base`), int8 unchecked: worst |ΔnDCG@10| 0.0100; served under the check: 0.0020 "
            "(1 of 2 jobs served at bf16)") in text
