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
    retrieve, rerank = int8_collections.jobs("m", ["c"], 20)
    _eval_json(tmp_path / "retrieve" / "fp32", {"a": 0.600, "b": 0.300})
    _eval_json(tmp_path / "retrieve" / "int8", {"a": 0.603, "b": 0.290})
    _eval_json(tmp_path / "rerank-0" / "fp32", {"a": 0.500, "b": 0.200})
    _eval_json(tmp_path / "rerank-0" / "int8", {"a": 0.501, "b": 0.204})
    results = [(job, {arm: int8_collections.run_arm(job, ["a", "b"], arm, tmp_path) for arm in ("fp32", "int8")})
               for job in (retrieve, rerank)]
    text = int8_collections.markdown(["a", "b"], ["fp32", "int8"], results, "cmd")
    first, second = text.split("### ")[1:]
    assert first.startswith("`m`: full retrieval") and second.startswith("`c`: reranking BM25's top 20")
    assert "--first-stage bm25 --depth 20 --precision ARM" in second
    assert "| a | 0.6000 | 0.6030 (+0.0030) |" in first and "| b | 0.3000 | 0.2900 (-0.0100) |" in first
    assert "int8: worst |ΔnDCG@10| 0.0100 over 2 collections (beyond 0.005)" in first
    assert "int8: worst |ΔnDCG@10| 0.0040 over 2 collections (within 0.005)" in second


def test_a_model_at_its_own_depth_one_job_per_dataset_and_what_int8_served_as(tmp_path):
    first, second = int8_collections.jobs("", ["c", "d@100"], 20)
    assert (first.model, first.depth, second.model, second.depth) == ("c", 20, "d", 100)
    for arm, scores, served in (("fp32", (0.5, 0.2), "openvino:fp32"), ("int8", (0.49, 0.2), "openvino:bf16")):
        for dataset, score in zip("ab", scores):
            _eval_json(tmp_path / "rerank-1" / f"{arm}-{dataset}", {dataset: score})
            path = tmp_path / "rerank-1" / f"{arm}-{dataset}" / "eval.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), "precision": served if dataset == "a" else arm}))
    results = [(second, {arm: int8_collections.run_arm(second, ["a", "b"], arm, tmp_path, per_dataset=True)
                         for arm in ("fp32", "int8")})]
    text = int8_collections.markdown(["a", "b"], ["fp32", "int8"], results, "cmd", per_dataset=True)
    assert "`ssft-eval d --datasets DATASET --first-stage bm25 --depth 100 --precision ARM` for each arm and dataset" in text
    assert "| a | 0.5000 | 0.4900 (-0.0100), served bf16 |" in text and "| b | 0.2000 | 0.2000 (+0.0000) |" in text
