"""The API reference (docs/api.md, rendered by mkdocstrings from Google-style docstrings) documents every parameter
and every return value of the public API: each name ``ssft`` exports, and each public method of the classes it
exports (``ssft.Ranker``, ``ssft.Index``, ``ssft.Run``). A public callable fails here when its docstring lacks an
``Args:`` entry for a parameter it takes, names a parameter it does not take, or lacks ``Returns:`` (or ``Yields:``)
where it returns something. Docstrings are read as the documentation site reads them (griffe's Google parser)."""
from __future__ import annotations

import ast
import importlib
import inspect
import logging
import textwrap
from collections.abc import Callable, Iterator

import pytest

import ssft


def _home(name: str) -> object:
    """The object ``ssft.<name>`` stands for (``ssft.train`` / ``ssft.retrieve`` are also old modules: the function)."""
    module = ssft._LAZY.get(name, "ssft.api")
    return getattr(importlib.import_module(module), name)


def _methods(cls: type) -> Iterator[tuple[str, Callable, int]]:
    """(name, function, leading parameters to skip) of every public method ssft defines on ``cls`` or its bases:
    plain methods skip self, classmethods cls, staticmethods nothing; properties are attributes, not callables."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("ssft."):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen or inspect.isclass(value):
                continue
            seen.add(name)
            if isinstance(value, staticmethod):
                yield name, value.__func__, 0
            elif isinstance(value, classmethod):
                yield name, value.__func__, 1
            elif inspect.isfunction(value):
                yield name, value, 1


def public_callables() -> dict[str, tuple[Callable, int]]:
    """``ssft.<name>`` and ``ssft.<Class>.<method>`` -> (function, leading parameters to skip)."""
    found: dict[str, tuple[Callable, int]] = {}
    for name in ssft.__all__:
        if name.startswith("__"):
            continue
        obj = _home(name)
        if inspect.isclass(obj):
            for method, fn, skip in _methods(obj):
                found[f"ssft.{name}.{method}"] = (fn, skip)
        else:
            found[f"ssft.{name}"] = (obj, 0)
    return found


def _sections(doc: str) -> dict[str, list[str]]:
    """The Google sections griffe reads from ``doc``: kind -> the names it lists (parameters) or [''] (returns)."""
    from griffe import Docstring

    logging.getLogger("griffe").setLevel(logging.ERROR)  # "no type annotation": the site reads them from the code
    found: dict[str, list[str]] = {}
    for section in Docstring(doc, parser="google").parse():
        kind = section.kind.value
        values = section.value if isinstance(section.value, list) else [section.value]
        found.setdefault(kind, []).extend(getattr(v, "name", "") or "" for v in values)
    return found


def _returns_something(fn: Callable) -> bool:
    """Whether ``fn`` returns a value: its return annotation (not None), else a ``return <value>`` in its own body."""
    annotation = inspect.signature(fn).return_annotation
    if annotation is not inspect.Signature.empty:
        return str(annotation) not in ("None", "NoReturn", "<class 'NoneType'>")
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0]
    stack, found = list(ast.iter_child_nodes(body)), False
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue  # a nested function's returns are its own
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) and getattr(node, "value", None) is not None:
            found = True
        stack.extend(ast.iter_child_nodes(node))
    return found


def problems(fn: Callable, skip: int) -> list[str]:
    """What the docstring of ``fn`` lacks (or names wrongly), one phrase each; [] when it is complete."""
    doc = inspect.cleandoc(fn.__doc__ or "")
    if not doc:
        return ["no docstring"]
    sections = _sections(doc)
    documented = {name.lstrip("*") for name in sections.get("parameters", []) + sections.get("other parameters", [])}
    parameters = [p.name for p in list(inspect.signature(fn).parameters.values())[skip:]]
    found = [f"Args: lacks '{name}'" for name in parameters if name not in documented]
    found += [f"Args: names '{name}', which it does not take" for name in sorted(documented - set(parameters))]
    if _returns_something(fn) and not (sections.get("returns") or sections.get("yields")):
        found.append("no Returns:")
    return found


CALLABLES = public_callables()


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_every_public_callable_documents_its_arguments_and_return(name):
    fn, skip = CALLABLES[name]
    assert problems(fn, skip) == [], f"{name}: {'; '.join(problems(fn, skip))}"


def test_the_walk_covers_the_api():
    names = set(CALLABLES)
    for expected in ("ssft.load", "ssft.train", "ssft.retrieve", "ssft.load_dataset", "ssft.read_run",
                     "ssft.Ranker.rank", "ssft.Ranker.predict", "ssft.Ranker.encode_query", "ssft.Ranker.save",
                     "ssft.Index.search", "ssft.Index.load"):
        assert expected in names, expected


def test_the_checker_finds_what_is_missing():
    def half(a: int, b: int = 0) -> int:
        """Adds.

        Args:
            a: the first.
            c: not a parameter.
        """
        return a + b

    def whole(a, *args, **kwargs):
        """Collects.

        Args:
            a: the first.
            *args: the rest.
            **kwargs: options.

        Returns:
            All of them.
        """
        return a, args, kwargs

    assert problems(half, 0) == ["Args: lacks 'b'", "Args: names 'c', which it does not take", "no Returns:"]
    assert problems(whole, 0) == []
