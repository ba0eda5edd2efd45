"""benchmarks/int8_collections.py: the table states each arm's difference to fp32 and its worst case against the
documented promise, from ssft-eval's eval.json of each arm (reused when present)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import int8_collections  # noqa: E402


def _eval_json(folder: Path, scores: dict[str, float]) -> None:
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text(json.dumps({"datasets": [{"dataset": d, "model": {"nDCG@10": v}}
                                                               for d, v in scores.items()]}))


def test_the_worst_collection_decides_the_verdict(tmp_path):
    _eval_json(tmp_path / "fp32", {"a": 0.600, "b": 0.300})
    _eval_json(tmp_path / "int8", {"a": 0.603, "b": 0.290})
    scores = {arm: int8_collections.run_arm("m", ["a", "b"], arm, tmp_path) for arm in ("fp32", "int8")}
    text = int8_collections.markdown("m", ["a", "b"], ["fp32", "int8"], scores, "cmd")
    assert "| a | 0.6000 | 0.6030 (+0.0030) |" in text and "| b | 0.3000 | 0.2900 (-0.0100) |" in text
    assert "int8: worst |ΔnDCG@10| 0.0100 over 2 collections (beyond 0.005)" in text
