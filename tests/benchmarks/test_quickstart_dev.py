"""benchmarks/quickstart_dev.py: the adapter column names the layers an arm adapts, so arms that differ only there
are told apart; --title names the section (default: the learning-rate one)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import quickstart_dev  # noqa: E402


def test_adapter_label_names_the_adapted_layers():
    assert quickstart_dev.adapter_label("full") == "full"
    assert quickstart_dev.adapter_label({"method": "ss_lora", "sharing": "hetero_value"}) == "ss_lora"
    assert (quickstart_dev.adapter_label({"method": "ss_lora", "shared_modules": ["attention.self.key", "output.dense"]})
            == "ss_lora, shared_modules: attention.self.key + output.dense")
    assert (quickstart_dev.adapter_label({"method": "lora", "target_modules": ["query", "value"], "r": 16})
            == "lora, target_modules: query + value")


def _run_folder(tmp_path: Path, name: str, lr: float, epochs: list[tuple[float, float]]) -> Path:
    run = tmp_path / name
    run.mkdir()
    recipe = {"seed": 42, "adapter": {"method": "ss_lora", "sharing": "hetero_value"},
              "data": {"dataset": "scifact", "validation_split": "train", "holdout_queries": 150, "num_negatives": 1},
              "training": {"learning_rate": lr, "per_device_train_batch_size": 16, "num_train_epochs": 2}}
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    rows = [{"epoch": e, "eval_nDCG@10": v, "eval_R@100": 0.9, "eval_RR@10": 0.6} for e, v in epochs]
    (run / "run_info.json").write_text(json.dumps({"validation_history": rows}))
    return run


def test_title_names_the_section_and_defaults_to_the_learning_rate_one(tmp_path, monkeypatch, capsys):
    a = _run_folder(tmp_path, "a", 3e-3, [(0.0, 0.68), (1.0, 0.70), (2.0, 0.73)])
    b = _run_folder(tmp_path, "b", 1.5e-3, [(1.0, 0.69), (2.0, 0.71)])
    monkeypatch.setattr(sys, "argv", ["quickstart_dev.py", "--runs", f"{a},{b}"])
    quickstart_dev.main()
    out = capsys.readouterr().out
    assert out.startswith("## The quickstart's learning rate on scifact (validation only)\n")
    assert "| trained | ss_lora | 0.0015 | 2 | 42 | 0.7100 |" in out
    assert "(ss_lora, learning rate 0.003, epoch 2) beats the start" in out
    monkeypatch.setattr(sys, "argv", ["quickstart_dev.py", "--runs", f"{a},{b}", "--title", "Capacity arms"])
    quickstart_dev.main()
    assert capsys.readouterr().out.startswith("## Capacity arms\n")
