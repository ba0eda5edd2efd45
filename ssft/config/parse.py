"""One parser for every typed config: a recipe section, an adapter's / loss's / callback's / architecture's
``Config`` dataclass, a sweep grid file and its ``folds``. Each key is checked against the dataclass's fields (an
unknown key: one line with the closest name and the allowed ones), each value against the field's annotation (int,
float, bool, str, lists of them, unions with None; YAML 1.1 strings such as ``1e-4`` coerced; floats must be
finite), then the dataclass's own ``check(where)`` runs when it has one (``Checked``: value ranges and
combinations, one-line errors naming the key)."""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from ssft.core.errors import SsftError, closest

_UNION_TYPES = (typing.Union, getattr(types, "UnionType", None))

# what ``Checked.problem()`` returns: None (fine), "text" (the section), or ("key", "text") (one key)
Problem = str | tuple[str, str] | None


@dataclasses.dataclass
class NoOptions:
    """The config of a plugin that takes no options."""


class Checked:
    """Mixin of every config dataclass (a recipe section, an adapter's / loss's / callback's / architecture's
    ``Config``, a sweep grid): its value rules are written once, as ``problem()``: None when the values are fine,
    else the problem: ``"text"`` about the section as a whole, or ``("key", "text")`` about one key.
    ``check(where)`` raises it as the recipe's one-line SsftError (``where: text``, ``where.key: text``), and a
    plugin's constructor as a ValueError (``raise_problem``), so both say the same. Rules between sections stay
    with the recipe (``ssft.config.recipe``)."""

    def problem(self) -> Problem:
        return None

    def check(self, where: str) -> None:
        problem = self.problem()
        if isinstance(problem, tuple):
            raise SsftError(f"{where}.{problem[0]}: {problem[1]}")
        if problem:
            raise SsftError(f"{where}: {problem}")

    def raise_problem(self) -> None:
        problem = self.problem()
        if problem:
            raise ValueError(": ".join(problem) if isinstance(problem, tuple) else problem)


def problem_of(check: Callable[[Any, str], Any], value: Any, key: str) -> Problem:
    """A shared validator's one-line error (``check(value, where)`` raises ``SsftError("where: text")``, e.g.
    ``ssft.core.precision.check``) as a ``Checked`` problem about ``key``."""
    try:
        check(value, key)
    except SsftError as err:
        return key, str(err).removeprefix(f"{key}: ")
    return None


def field_names(cls) -> list[str]:
    """The init fields of a config dataclass, in order."""
    return [f.name for f in dataclasses.fields(cls) if f.init]


def parse_dataclass(cls, value: Any, where: str, *, unknown: Callable[[str, list[str]], str] | None = None,
                    field_where: str | None = None):
    """``cls(**value)`` with every key and value checked (see the module doc). ``where`` starts every message
    (``r.yaml: model``); a field's type error names ``{field_where or where}.{key}``; ``unknown(key, names)``
    writes the whole message for an unknown key (default: ``{where}: unknown key 'k' (did you mean ...); known:
    ...``). ``None`` is the defaults."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise SsftError(f"{where}: expected a mapping, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    names = field_names(cls)
    kwargs = {}
    for key, val in value.items():
        if key not in names:
            if unknown is not None:
                raise SsftError(unknown(key, names))
            raise SsftError(f"{where}: unknown key '{key}'{closest(str(key), names)}; known: {', '.join(names)}")
        kwargs[key] = check_type(val, hints[key], f"{field_where or where}.{key}")
    config = cls(**kwargs)
    check = getattr(config, "check", None)
    if callable(check):
        check(where)
    return config


def check_type(val: Any, hint: Any, where: str) -> Any:
    """Check/coerce ``val`` against a simple annotation: int, float, str, bool, list[...], unions with None (other
    annotations, e.g. ``dict[str, Any]``, are left to the config's own check)."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in _UNION_TYPES:
        if val is None and type(None) in args:
            return None
        errors = []
        for option in [a for a in args if a is not type(None)]:
            try:
                return check_type(val, option, where)
            except SsftError as err:
                errors.append(err)
        raise errors[0]
    if origin is list:
        if isinstance(val, str):
            val = [v.strip() for v in val.split(",") if v.strip()]
        if not isinstance(val, list):
            raise SsftError(f"{where}: expected a list, got {val!r}")
        return [check_type(v, args[0], where) for v in val]
    if hint is Any:
        return val
    if hint in (int, float, bool):
        return coerce(val, hint, where)
    if hint is str:
        if not isinstance(val, str):
            raise SsftError(f"{where}: expected a string, got {val!r}")
        return val
    return val


def coerce(val: Any, target: type, where: str) -> Any:
    """``val`` as a bool, int or float (``target``): YAML 1.1 strings (``1e-4``, ``yes``) read, whole floats taken
    as ints, floats finite; anything else one SsftError naming ``where``."""
    if target is bool:
        if isinstance(val, bool):
            return val
        if isinstance(val, str) and val.lower() in ("true", "false", "yes", "no"):
            return val.lower() in ("true", "yes")
        raise SsftError(f"{where}: expected true/false, got {val!r}")
    if isinstance(val, bool):
        raise SsftError(f"{where}: expected a number, got {val!r}")
    if target not in (int, float):
        return val
    return _to_int(val, where) if target is int else _to_float(val, where)


def _to_int(val: Any, where: str) -> int:
    if isinstance(val, int):
        return val
    if isinstance(val, float) and val.is_integer():
        return int(val)
    if isinstance(val, str):
        try:
            return int(val)
        except ValueError:
            pass
    raise SsftError(f"{where}: expected an integer, got {val!r}")


def _to_float(val: Any, where: str) -> float:
    number = None
    if isinstance(val, (int, float)):
        number = float(val) if isinstance(val, float) or abs(val) < 2 ** 1000 else math.inf  # float(10**400) overflows
    elif isinstance(val, str):  # YAML 1.1 reads 1e-4 as a string
        try:
            number = float(val)
        except ValueError:
            pass
    if number is None:
        raise SsftError(f"{where}: expected a number, got {val!r}")
    if not math.isfinite(number):
        raise SsftError(f"{where}: expected a finite number, got {val!r}")
    return number


def plain_type(hint: Any) -> type | None:
    """int/float/bool/str for simple (optional) annotations, else None."""
    args = typing.get_args(hint)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        hint = rest[0] if len(rest) == 1 else None
    return hint if hint in (int, float, bool, str) else None


__all__ = ["Checked", "NoOptions", "Problem", "check_type", "coerce", "field_names", "parse_dataclass", "plain_type",
           "problem_of"]
