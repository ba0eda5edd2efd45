"""Checks of the values a caller passes, shared by the console scripts and the Python API (``ssft.api``, the
``Ranker``'s inference methods), so both refuse a wrong value with the same one-line ``SsftError`` naming the
argument, never a raw ``TypeError`` from deep inside."""
from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from ssft.core.errors import SsftError


def _error(message: str) -> SsftError:
    return SsftError(message)


def whole_number(value: Any, name: str, minimum: int = 1, allow_none: bool = False) -> int | None:
    """``value`` as an ``int`` (a numpy integer too) >= ``minimum``; None only with ``allow_none``. A bool, a float or
    a string (``"5"``) is refused: the API takes what the CLI has parsed, not text to parse."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
        more = " or None" if allow_none else ""
        # "must be >= 1" first: the words the CLI has always used for a flag below its minimum
        kind = "" if isinstance(value, numbers.Integral) and not isinstance(value, bool) else "a whole number "
        raise _error(f"{name} must be {kind}>= {minimum}{more}, got {value!r}")
    return int(value)


def text(value: Any, name: str) -> str:
    """``value`` as a string that can be tokenised: a string holding no lone surrogate (a text decoded wrongly,
    e.g. ``"\\ud800"``, which no tokenizer and no UTF-8 file can take)."""
    if not isinstance(value, str):
        raise _error(f"{name}: expected a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise _error(f"{name}: not valid Unicode text (a lone surrogate {value[err.start]!r} at character "
                     f"{err.start})") from None
    return value


def texts(values: Any, name: str) -> list[str]:
    """``values`` (a list, a tuple, any iterable such as a generator) as a list of strings, each checked by ``text``.
    A lone string and a mapping are refused: they would be read as their characters or their keys."""
    if isinstance(values, (str, bytes)):
        raise _error(f"{name}: expected a list of strings, got one {type(values).__name__} (wrap it in a list)")
    if isinstance(values, Mapping):
        raise _error(f"{name}: expected a list of strings, got a {type(values).__name__} (its keys would be read as "
                     f"the texts); pass list(d.values()) and map the returned positions back to the keys")
    if not isinstance(values, Iterable):
        raise _error(f"{name}: expected a list of strings, got {type(values).__name__}")
    items = list(values)  # a generator is read once, here
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise _error(f"{name}: expected a list of strings, item {i} is a {type(item).__name__}")
        text(item, f"{name}: item {i}")
    return items


def string_list(values: Any, name: str) -> list[str]:
    """A comma-separated string (as the CLI's flag gives it) or a list of strings, as a list of non-empty names."""
    if isinstance(values, str):
        items = values.split(",")
    elif isinstance(values, Iterable) and not isinstance(values, (bytes, Mapping)):
        items = list(values)
        for item in items:
            if not isinstance(item, str):
                raise _error(f"{name}: expected names (strings), got {item!r}")
    else:
        raise _error(f"{name}: expected a comma-separated string or a list of strings, got {type(values).__name__}")
    return [item.strip() for item in items if item.strip()]


__all__ = ["string_list", "text", "texts", "whole_number"]
