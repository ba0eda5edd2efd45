"""A run killed while OpenVINO scores its test split resumes on torch (eval.backend changed, --resume-with-changes):
the training is not redone, the start is scored again on torch, and the metrics are those of a run that scored on
torch from the start."""
from __future__ import annotations

import sys

import pytest

import ssft
from ssft.core.errors import SsftError
from ssft.pipeline import report


def _recipe(tmp_path, tiny_model_dir, tiny_dataset, out: str, backend: str) -> dict:
    return {"model": {"name": str(tiny_model_dir), "max_length": 48}, "adapter": {"method": "lora", "r": 4},
            "data": {"dataset": str(tiny_dataset), "num_negatives": 2, "negatives_depth": 6, "negatives": "random"},
            "eval": {"depth": 6, "precision": "fp32", "backend": backend},
            "training": {"output_dir": str(tmp_path / out), "num_train_epochs": 1, "per_device_train_batch_size": 2}}


def test_a_run_killed_during_openvino_test_scoring_resumes_on_torch(tmp_path, tiny_model_dir, tiny_dataset,
                                                                     monkeypatch):
    pytest.importorskip("openvino")
    reference = ssft.train(_recipe(tmp_path, tiny_model_dir, tiny_dataset, "torch-run", "torch"))
    calls = []
    real = report.serve_for_test

    def killed_at_the_test_split(*args, **kwargs):
        calls.append(sys._getframe(1).f_code.co_name)
        if calls[-1] == "evaluate":  # the trained model put on OpenVINO for the test split (not the start's)
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(report, "serve_for_test", killed_at_the_test_split)
    with pytest.raises(KeyboardInterrupt):
        ssft.train(_recipe(tmp_path, tiny_model_dir, tiny_dataset, "run", "openvino"))
    monkeypatch.setattr(report, "serve_for_test", real)
    out = tmp_path / "run"
    assert not (out / "metrics.json").exists() and list(out.glob("checkpoint-*"))
    on_torch = _recipe(tmp_path, tiny_model_dir, tiny_dataset, "run", "torch")
    with pytest.raises(SsftError, match="eval.backend.*--resume-with-changes"):
        ssft.train(on_torch)
    resumed = ssft.train(on_torch, resume_with_changes=True)
    assert resumed.info["resumed_with_changes"] == ["eval.backend"]
    assert resumed.metrics == reference.metrics
