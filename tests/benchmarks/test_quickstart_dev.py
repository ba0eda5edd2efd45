"""benchmarks/quickstart_dev.py: the adapter column names the layers an arm adapts, so arms that differ only there
are told apart."""
from __future__ import annotations

import sys
from pathlib import Path

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
