"""Trainer callbacks by name (``ssft.config.registry.CALLBACKS``). A recipe lists a callback by name, or as
``{name: daft, delta: 250}`` with options: the fields of the callback's ``Config``."""
from __future__ import annotations

from typing import Any

from ssft.config.registry import CALLBACKS


def callback_name(entry: Any) -> str:
    return entry if isinstance(entry, str) else entry["name"]


def build_callback(entry: Any, where: str = "callbacks"):
    """The callback an entry of ``recipe.callbacks`` names, built with its options (bad options: SsftError)."""
    cls = CALLBACKS.get(callback_name(entry), where)
    options = {} if isinstance(entry, str) else {k: v for k, v in entry.items() if k != "name"}
    return cls.from_config(cls.config_from(options, where))


def build_callbacks(entries: list[Any], **context) -> list:
    """Callbacks of a recipe; those with a ``setup`` method are given ``context`` (dataset, validation_qrels,
    train_qrels, train_queries: the query texts of a data.train source) — what a Trainer event does not carry."""
    out = []
    for entry in entries:
        callback = build_callback(entry)
        if hasattr(callback, "setup"):
            callback.setup(**context)
        out.append(callback)
    return out


__all__ = ["build_callback", "build_callbacks", "callback_name"]
