"""A prefix- or prompt-tuned cross-encoder validated in bf16 (the default precision on a CPU that computes bf16
natively): its virtual-token table, first built under ``torch.inference_mode``, is an inference tensor, which the
bf16 weights' fingerprint must take (it has no version counter). The oneDNN kernels are off here: on a CPU without
native bf16 they cannot run bf16 at all, and the fingerprint is what this test is about."""
from __future__ import annotations

import pytest

import ssft
from tests.helpers import write_synthetic_beir


@pytest.mark.parametrize("method", ["prefix", "prompt"])
def test_a_prefix_or_prompt_cross_encoder_trains_with_bf16_validation(method, tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("SSFT_CPU_KERNELS", "0")
    data = write_synthetic_beir(tmp_path / "data", queries=12, docs=20)
    recipe = {"model": {"name": str(tiny_model_dir), "max_length": 48},
              "adapter": {"method": method, "num_virtual_tokens": 4},
              "data": {"dataset": str(data), "num_negatives": 2, "negatives_depth": 6, "negatives": "random"},
              "eval": {"depth": 6, "precision": "bf16", "start": False},
              "training": {"output_dir": str(tmp_path / "run"), "num_train_epochs": 1,
                           "per_device_train_batch_size": 4}}
    run = ssft.train(recipe)
    assert "nDCG@10" in run.metrics["test"] and run.info["precision"] == "bf16"
