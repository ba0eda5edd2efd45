"""benchmarks/gpu_check.py: its dry run (tiny models on the CPU, the same code the GPU check runs) passes every
check and writes its JSON; its verdicts fail where they should."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402

from tests.helpers import needs_torch_bf16  # noqa: E402


@needs_torch_bf16  # the dry run trains and serves bf16 on the CPU
def test_dry_run_passes_and_writes_every_section(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--output", str(out)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["dry_run"] and results["passed"]
    trained = {(r["architecture"], r["method"], r["precision"]) for r in results["train"]}
    assert trained == {(a, m, p) for a, m, _ in gpu_check.CONFIGS for p in ("bf16", "fp16")}
    for row in results["train"]:
        assert len(row["losses"]) == results["settings"]["steps"] and all(math.isfinite(x) for x in row["losses"])
        assert len(row["cpu_reference"]) == gpu_check.REFERENCE_STEPS
        assert row["tokens_per_s"] > 0
    assert {r["task"] for r in results["inference"]} == {"rerank", "encode"}
    assert results["ddp"]["diff"] <= 1e-4 and results["ddp"]["processes"] == 2
    assert "| ddp (2 processes" in proc.stdout and " passed, 0 failed" in proc.stdout


def test_verdicts_fail_on_nan_drift_and_a_rising_loss():
    refs = {("m", "dense", "lora"): [2.0, 1.9, 1.8]}
    row = {"model": "m", "architecture": "dense", "method": "lora", "precision": "bf16"}
    assert gpu_check.judge_training({**row, "losses": [2.01, 1.9, 1.5, 1.2]}, refs)["passed"]
    nan = gpu_check.judge_training({**row, "losses": [2.0, float("nan"), 1.0]}, refs)
    assert not nan["passed"] and "non-finite" in nan["why"]
    drift = gpu_check.judge_training({**row, "losses": [2.3, 1.9, 1.5, 1.2]}, refs)
    assert not drift["passed"] and "CPU reference" in drift["why"]
    rising = gpu_check.judge_training({**row, "losses": [2.0, 2.2, 2.4, 2.6]}, refs)
    assert not rising["passed"] and "not falling" in rising["why"]
    failed_launch = gpu_check.judge_training({"precision": "fp16", "error": "CUDA out of memory"}, refs)
    assert not failed_launch["passed"]


def test_adapter_steps_count_two_forwards_full_three():
    lengths = [256] * 32
    shape = (768, 12, 3072)
    forward = gpu_check.forward_flops(lengths, 768, 12, 3072)
    assert gpu_check.training_flops(lengths, shape, "full") == 3 * forward
    assert gpu_check.training_flops(lengths, shape, "lora") == 2 * forward
    # BERT-base, 32 x 256 tokens: about 2 x 86M weights x 8192 tokens + attention per forward
    assert 1.3e12 < forward < 1.6e12


def test_training_workers_keep_the_callers_pythonpath(tmp_path, monkeypatch):
    """Packages installed beside the machine's own (pip install --target DIR, DIR on PYTHONPATH) reach the
    accelerate-launched workers: the repository goes first, the caller's path stays."""
    seen = {}

    def fake_run(cmd, env, **kwargs):
        seen["path"] = env["PYTHONPATH"].split(os.pathsep)
        return subprocess.CompletedProcess(cmd, 1, "", "boom")

    monkeypatch.setenv("PYTHONPATH", "/tmp/site")
    monkeypatch.setattr(gpu_check.subprocess, "run", fake_run)
    a = gpu_check.argparse.Namespace(dry_run=True, steps=1, batch=4, seq_len=8, warmup=0, learning_rate=1e-3,
                                     peak_tflops=None)
    rows = gpu_check.launch_training(a, "bf16", tmp_path)
    assert seen["path"] == [str(ROOT), "/tmp/site"]
    assert rows[0]["error"] == "boom"


def test_random_models_take_a_tokenizer_folder_where_the_weights_package_is_absent(tiny_model_dir, tmp_path,
                                                                                      monkeypatch):
    import train_throughput

    from ssft.core.errors import SsftError

    def absent(name):
        raise SsftError(f"model '{name}' not found")

    monkeypatch.setattr("ssft.core.hub.resolve_model", absent)
    folder, weights = gpu_check.model_folder(tmp_path, "tiny", "sentence-transformers/all-MiniLM-L6-v2", (32, 2, 2, 64),
                                             tokenizer=str(tiny_model_dir))
    assert weights == "random" and (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
    assert train_throughput.random_bert(folder, (32, 2, 2, 64)) == folder  # made once: no tokenizer asked again


def test_a_saved_result_is_reported_without_running_the_check(tmp_path, capsys):
    result = {"device": "NVIDIA H200", "commit": "abc1234", "date": "2026-11-28", "dry_run": False, "seconds": 201.0,
              "settings": {"steps": 12, "batch": 16, "seq_len": 256, "warmup": 5, "learning_rate": 2e-4},
              "train": [{"model": "mpnet-base", "weights": "random", "architecture": "dense", "method": "lora",
                         "precision": "bf16", "losses": [3.41, 3.25], "cpu_reference": [3.42, 3.3, 3.2],
                         "tokens_per_s": 1000.0, "mfu": 0.05, "grad_scaler": False, "passed": True, "why": ""}],
              "inference": [], "faiss": {"passed": True, "why": "not run", "gpu": False},
              "ddp": {"processes": 2, "backend": "gloo", "device": "cuda:0", "loss_1_process": 1.0,
                      "loss_2_processes": 1.0, "passed": True, "why": ""},
              "mfu_target": {"target": 0.4, "measured": 0.05, "met": False}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    notes = tmp_path / "notes.md"
    notes.write_text("Reading: starved.")
    assert gpu_check.main(["--report", str(path), "--notes", str(notes)]) == 0
    out = capsys.readouterr().out
    assert "| mpnet-base | random | dense | lora | bf16 | 3.4100 (3.4200) |" in out
    assert "3 of 3 checks passed" in out and "5.0 % against the 40 % target: missed" in out
    assert out.rstrip().endswith("Reading: starved.")
