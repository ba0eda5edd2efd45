"""Long stages show that they are alive (``ssft.core.progress``), the Trainer's metrics read as ssft's log lines, and
``eval.start: false`` skips the starting model's scoring, saying so."""
from __future__ import annotations

import json
import logging
import re

import pytest
import yaml

from ssft.core import progress
from ssft.training.callbacks.log_lines import format_logs
from tests.cli_runner import run_cli
from tests.helpers import write_synthetic_beir

LINE = re.compile(r"^\d\d:\d\d:\d\d INFO ssft\.progress: (.+): [\d,]+/[\d,]+ \w+ \(\d+%\), .+/s, elapsed \d+:\d\d:\d\d, "
                  r"ETA \d+:\d\d:\d\d$")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return write_synthetic_beir(tmp_path_factory.mktemp("progress") / "syn", queries=30, docs=24)


def _recipe(path, model_dir, data, out, architecture="twin", **eval_keys):
    recipe = {
        "model": {"architecture": architecture, "name": str(model_dir), "max_length": 32,
                  **({"scorer": "cosine"} if architecture == "twin" else {})},
        "adapter": {"method": "full"},
        **({"loss": {"name": "contrastive"}} if architecture == "dense" else {}),
        "data": {"dataset": str(data), "num_negatives": 2, "negatives": "random"},
        "eval": {"depth": 24, "metrics": ["nDCG@10", "RR@10"], "batch_size": 8, **eval_keys},
        "training": {"output_dir": str(out), "num_train_epochs": 1, "per_device_train_batch_size": 4,
                     "learning_rate": 1e-4, "use_cpu": True, "report_to": [], "logging_steps": 2},
    }
    path.write_text(yaml.safe_dump(recipe))
    return path


def _train(tmp_path, model_dir, data, env, architecture="twin", **eval_keys):
    recipe = _recipe(tmp_path / "r.yaml", model_dir, data, tmp_path / "run", architecture, **eval_keys)
    result = run_cli("ssft.cli.train", [str(recipe)], tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, tmp_path / "run"


def test_a_run_logged_to_a_file_shows_progress_lines_and_formatted_metrics(tiny_model_dir, synthetic, tmp_path):
    """stderr is a file here (not a terminal): with an interval shorter than any stage, every long stage -- the
    start's scoring, validation, training, the test -- leaves progress lines in ssft's log-line format; the Trainer's
    metrics are formatted lines, never a Python dict."""
    result, _ = _train(tmp_path, tiny_model_dir, synthetic, {"SSFT_PROGRESS_INTERVAL": "0.000001"})
    log = result.stderr + result.stdout
    stages = {m.group(1) for line in log.splitlines() if (m := LINE.match(line))}
    assert any(s.startswith("start (test)") for s in stages), stages
    assert any(s.startswith("validation") for s in stages), stages
    assert any(s.startswith("test") for s in stages), stages
    assert "training" in stages, stages
    assert re.search(r"INFO ssft\.progress: .+: done, [\d,]+ \w+ in \d+:\d\d:\d\d$", log, re.M)
    # the Trainer's metrics: ssft's lines with numbers, no dicts of strings
    assert re.search(r"INFO ssft\.training: validation \(epoch 0, step 0\): RR@10 \d\.\d{4}, nDCG@10 \d\.\d{4}$", log, re.M), log
    assert re.search(r"INFO ssft\.training: step 2/\d+ \(epoch [\d.]+\): loss \d+\.\d{4}", log, re.M), log
    assert re.search(r"INFO ssft\.training: training done: \d+ steps in \d+:\d\d:\d\d; ", log), log
    assert not re.search(r"\{'(eval_|loss|train_)", log), log
    assert "pin_memory" not in log  # no accelerator here: ssft does not ask for pinned memory


def test_progress_off(tiny_model_dir, synthetic, tmp_path):
    """SSFT_PROGRESS=0: no progress line at all, even with the tiny interval; the metrics lines stay."""
    result, _ = _train(tmp_path, tiny_model_dir, synthetic, {"SSFT_PROGRESS_INTERVAL": "0.000001", "SSFT_PROGRESS": "0"})
    log = result.stderr + result.stdout
    assert "ssft.progress" not in log
    assert "INFO ssft.training: validation (epoch 0, step 0)" in log


@pytest.mark.parametrize("architecture", ["twin", "dense"])
def test_eval_start_false_skips_the_start_and_says_so(architecture, tiny_model_dir, synthetic, tmp_path):
    """eval.start: false: no start row, no epoch 0 on validation; the plan (--check and the run's notes), run_info's
    selection and the summary say so."""
    recipe = _recipe(tmp_path / "r.yaml", tiny_model_dir, synthetic, tmp_path / "run", architecture, start=False)
    check = run_cli("ssft.cli.train", ["--check", str(recipe)], tmp_path)
    assert "start: not scored (eval.start: false)" in check.stdout, check.stdout + check.stderr
    assert "the starting model not scored: eval.start false" in check.stdout
    result, out = _train(tmp_path, tiny_model_dir, synthetic, {}, architecture, start=False)
    metrics = json.loads((out / "metrics.json").read_text())
    assert "start" not in metrics and set(metrics) == {"test", "bm25"}
    info = json.loads((out / "run_info.json").read_text())
    assert info["start"] == {"scored": False, "reason": "not scored: eval.start is false"}
    assert [h["epoch"] for h in info["validation_history"]] == [1.0]  # no epoch 0
    assert info["best_validation"]["candidates"] == "the trained epochs only (eval.start: false)"
    assert not list(out.glob("*start*"))
    log = result.stderr + result.stdout
    assert "start: not scored (eval.start: false)" in log and "among the trained epochs" in log
    assert "step 0" not in log  # no validation before the first step


def test_a_dense_run_encodes_the_corpus_once_for_its_start(tiny_model_dir, synthetic, tmp_path):
    """The start row (test) and epoch 0 of validation score the same weights: the corpus is encoded once for both,
    and the plan says how often the corpus is encoded."""
    result, out = _train(tmp_path, tiny_model_dir, synthetic, {}, "dense")
    log = result.stderr + result.stdout
    assert "corpus encoded by the document tower: once for the starting model" in log
    assert log.count("reused: these weights encoded this corpus last") >= 1, log
    start = log.index("start (test, before training)")
    encodings_before_training = log[:log.index("validation (epoch 0")].count("with the document tower")
    assert encodings_before_training == 1 and start > 0
    assert json.loads((out / "run_info.json").read_text())["validation_history"][0]["epoch"] == 0.0


def test_progress_lines_are_rate_limited_and_obey_the_switches(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="ssft.progress")
    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    monkeypatch.setenv("SSFT_PROGRESS_INTERVAL", "3600")
    with progress.stage("test"):
        list(progress.track(range(50), "scoring", unit="batches"))
    assert not caplog.records  # faster than the interval: silent, no closing line either
    monkeypatch.setenv("SSFT_PROGRESS_INTERVAL", "0")
    with progress.stage("test"):
        list(progress.track(range(3), "scoring", unit="batches"))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("test: scoring: 1/3 batches (33%), ") and "ETA" in lines[0]
    assert lines[-1].startswith("test: scoring: done, 3 batches in ")
    caplog.clear()
    monkeypatch.setenv("SSFT_PROGRESS", "0")
    list(progress.track(range(3), "scoring"))
    assert not caplog.records
    monkeypatch.delenv("SSFT_PROGRESS")
    caplog.set_level(logging.WARNING, logger="ssft.progress")  # --log-level WARNING: no progress either
    list(progress.track(range(3), "scoring"))
    assert not caplog.records


def test_trainer_logs_become_formatted_lines():
    assert format_logs({"eval_P@20": 0.16, "eval_nDCG@10": 0.31234, "eval_runtime": 1.5, "epoch": 1.0}, 50, 100) == \
        "validation (epoch 1, step 50): P@20 0.1600, nDCG@10 0.3123, runtime 1.5"
    assert format_logs({"loss": 0.69314, "grad_norm": 1.2345, "learning_rate": 4.5e-05, "epoch": 0.2}, 10, 50) == \
        "step 10/50 (epoch 0.20): loss 0.6931, grad_norm 1.234, learning_rate 4.5e-05"
    assert format_logs({"train_runtime": 75.2, "train_loss": 0.5, "total_flos": 1.0, "epoch": 1.0}, 50, 50) == \
        "training done: 50 steps in 0:01:15; train_loss 0.5000"
