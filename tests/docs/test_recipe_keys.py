"""The documentation's recipe-key table (docs/recipes.md, "Every key") cannot drift from the typed configs: every key
a recipe may set (each field of ModelConfig and of every architecture's Config, DataConfig, EvalConfig,
DistillationConfig and of every adapter, loss and callback Config) is named in backticks in the table row of its section."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ssft.config.recipe import DataConfig, DistillationConfig, EvalConfig, GeneratedQueriesConfig, LossSection, ModelConfig
from ssft.config.registry import ADAPTERS, CALLBACKS, LOSSES, MODELS

KEY_TABLE = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"


def _rows() -> dict[str, str]:
    """"``| `section` | keys |`` rows of the recipe-key table, by section."""
    rows = {}
    for line in KEY_TABLE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `(\w+)` \| (.*) \|$", line)
        if match and match.group(1) not in rows:
            rows[match.group(1)] = match.group(2)
    return rows


def _plugin_configs(registry) -> list[tuple[str, type]]:
    return [(name, registry.get(name).Config) for name in registry.names()]


SECTIONS = [("model", [("model", ModelConfig), *_plugin_configs(MODELS)]), ("data", [("data", DataConfig)]),
            ("eval", [("eval", EvalConfig)]),
            ("distillation", [("distillation", DistillationConfig),
                              ("distillation.generated_queries", GeneratedQueriesConfig)])]


@pytest.mark.parametrize("section, configs", SECTIONS + [("adapter", "ADAPTERS"), ("loss", "LOSSES"), ("callbacks", "CALLBACKS")],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_recipe_key_is_in_the_key_table(section, configs):
    if isinstance(configs, str):
        configs = _plugin_configs({"ADAPTERS": ADAPTERS, "LOSSES": LOSSES, "CALLBACKS": CALLBACKS}[configs])
    row = _rows().get(section)
    assert row is not None, f"docs/recipes.md has no recipe-key row for `{section}`"
    named = set(re.findall(r"`([\w+.]+)`", row))
    if section == "loss":  # beside every loss's own options: the loss section's own keys
        configs = [*configs, ("loss", LossSection)]
    missing = [f"{owner}.{f.name}" for owner, config in configs for f in dataclasses.fields(config)
               if f.init and f.name not in named and f.name != "options"]
    assert not missing, f"docs/recipes.md row `{section}` does not name: {', '.join(missing)}"
    if section in ("adapter", "loss", "callbacks"):  # every plugin by its name too
        registry = {"adapter": ADAPTERS, "loss": LOSSES, "callbacks": CALLBACKS}[section]
        assert not [n for n in registry.names() if n not in named], f"docs/recipes.md row `{section}` lacks a {section} name"
