"""benchmarks/efficacy.py --smoke: the whole efficacy pipeline (ssft-train runs, the start run, ssft-eval scoring on a
second dataset, the zero-shot checkpoint, sentence-transformers' own recipe, statistics, the compare mode) on a tiny
random model and two tiny synthetic datasets, 1 seed, 2 steps; its JSON holds every row and column, its p-values are
numbers in [0, 1] or null where undefined, and BENCHMARKS.md is left alone."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "efficacy.py"
ROWS = ["bm25", "zero_shot", "start", "trained", "st_baseline"]


def _p_ok(p) -> bool:
    return p is None or (isinstance(p, float) and 0.0 <= p <= 1.0 and not math.isnan(p))


def test_smoke_runs_the_whole_pipeline(tmp_path):
    benchmarks = ROOT / "BENCHMARKS.md"
    before = benchmarks.read_bytes() if benchmarks.exists() else None
    out = tmp_path / "smoke"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1500)
    log = out / "runs" / "efficacy.log"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + (log.read_text()[-3000:] if log.exists() else "")
    result = json.loads((out / "runs" / "efficacy.json").read_text())
    assert result["rows"] == ROWS and result["seeds"] == [42] and len(result["datasets"]) == 2
    assert set(result["recipes"]) == {"smoke_cross", "smoke_dense"}
    for stem, recipe in result["recipes"].items():
        assert list(recipe["datasets"]) == ["syn-a", "syn-b"], stem
        assert [d["own"] for d in recipe["datasets"].values()] == [True, False]
        for key, data in recipe["datasets"].items():
            assert set(data["rows"]) == set(ROWS), (stem, key)
            for row in ROWS:
                summary = data["rows"][row]
                assert summary is not None and 0.0 <= summary["mean"] <= 1.0, (stem, key, row)
                assert _p_ok(summary["pvalue_vs_trained"]), (stem, key, row, summary["pvalue_vs_trained"])
                assert summary["queries"] == 4 and len(summary["per_query"]) == 4  # the 4 test queries
            assert data["rows"]["trained"]["pvalue_vs_trained"] is None
        assert set(recipe["mean_over_datasets"]) == set(ROWS)
        assert all(isinstance(v, float) for v in recipe["mean_over_datasets"].values())
        assert recipe["training"]["cpu_seconds"]["mean"] > 0 and recipe["st_training"]["cpu_seconds"]["mean"] > 0
        assert recipe["start_run"]["weights_changed"] is False
    # the dense recipe scores its start in the run folder; the cross-encoder's (eval.start false) comes from the start run
    dense, cross = result["recipes"]["smoke_dense"], result["recipes"]["smoke_cross"]
    assert dense["datasets"]["syn-a"]["rows"]["start"]["sources"] == ["seed-42/metrics.json 'start'"]
    assert cross["datasets"]["syn-a"]["rows"]["start"]["sources"][0].startswith("ssft-eval")
    assert dense["first_stage"] == "full" and cross["first_stage"] == "bm25"
    compare = json.loads((out / "runs" / "compare.json").read_text())
    (pair,) = compare["pairs"]
    assert (pair["a"], pair["b"]) == ("smoke_cross", "smoke_dense") and list(pair["datasets"]) == ["syn-a", "syn-b"]
    for key, data in pair["datasets"].items():
        assert _p_ok(data["pvalue"]) and data["a"]["mean"] == result["recipes"]["smoke_cross"]["datasets"][key]["rows"][
            "trained"]["mean"]
    assert "| trained |" in done.stdout and "p (B vs A)" in done.stdout
    assert (benchmarks.read_bytes() if benchmarks.exists() else None) == before  # --smoke never writes BENCHMARKS.md


def test_statistics_and_arguments():
    script = load_script(SCRIPT)
    assert script.ttest({"a": 0.5, "b": 0.2}, {"a": 0.5, "b": 0.2}) == (None, 2)  # identical: undefined
    assert script.ttest({"a": 0.5}, {"a": 0.1}) == (None, 1)  # one query: undefined
    p, n = script.ttest({"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.1}, {"a": 0.1, "b": 0.3, "c": 0.2, "d": 0.0, "e": 1.0})
    assert n == 4 and 0.0 < p < 0.1
    summary = script.summarise([{"value": 0.2, "per_query": {"a": 0.0, "b": 0.4}, "seed": 1, "source": "x"},
                                {"value": 0.4, "per_query": {"a": 0.4, "b": 0.4}, "seed": 2, "source": "x"}])
    assert summary["mean"] == pytest.approx(0.3) and summary["sd"] == pytest.approx(math.sqrt(0.02))
    assert summary["per_query"] == pytest.approx({"a": 0.2, "b": 0.4})
    for argv in (["--seeds", "x", "--recipes", "recipes/quickstart.yaml"], [], ["--smoke", "--write"],
                 ["--compare", "recipes/quickstart.yaml"], ["--recipes", "nope.yaml"],
                 ["--recipes", "recipes/quickstart.yaml", "--write", "--notes", "absent.md"]):  # before hours of runs
        with pytest.raises(SystemExit) as err:
            script.parse(argv)
        assert err.value.code == 2, argv
