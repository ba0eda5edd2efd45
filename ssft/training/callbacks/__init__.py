"""Trainer callbacks by name. A recipe lists a callback by name, or as ``{name: daft, delta: 250}`` with the
options its constructor takes."""
from __future__ import annotations

import inspect
from typing import Any

from ssft.training.callbacks import best_epoch, collapse_monitor, daft, negative_cache  # noqa: F401  (registers)
from ssft.core.errors import SsftError


def callback_name(entry: Any) -> str:
    return entry if isinstance(entry, str) else entry["name"]


def build_callback(entry: Any, where: str = "callbacks"):
    """The callback an entry of ``recipe.callbacks`` names, built with its options (bad options: SsftError)."""
    from ssft.config.recipe import _check_type
    from ssft.config.registry import CALLBACKS

    name = callback_name(entry)
    cls = CALLBACKS.get(name, where)
    options = {} if isinstance(entry, str) else {k: v for k, v in entry.items() if k != "name"}
    params = {n: p for n, p in inspect.signature(cls.__init__).parameters.items() if n != "self"}
    import typing

    hints = typing.get_type_hints(cls.__init__)
    kwargs = {}
    for key, value in options.items():
        if key not in params:
            raise SsftError(f"{where}: unknown option '{key}' for callback '{name}' (allowed: {', '.join(params) or 'none'})")
        kwargs[key] = _check_type(value, hints.get(key, Any), f"{where}.{name}.{key}")
    try:
        return cls(**kwargs)
    except (SsftError, ValueError) as err:
        raise SsftError(f"{where}.{name}: {err}") from None


def build_callbacks(entries: list[Any], **context) -> list:
    """Callbacks of a recipe; those with a ``setup`` method are given ``context`` (dataset, validation_qrels,
    train_qrels) — what a Trainer event does not carry."""
    out = []
    for entry in entries:
        callback = build_callback(entry)
        if hasattr(callback, "setup"):
            callback.setup(**context)
        out.append(callback)
    return out
