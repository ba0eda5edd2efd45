"""docs/reliability.md's promises each name the tests that hold them (``Held by `tests/...py::test_name```), and every
test named there exists."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reliability.md"
NAMED = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _promises() -> list[str]:
    """The page's bullets under the resume / output-folder section and its Python API paragraphs."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Resume, checkpoints and the output-folder contract", 1)[1]
    bullets = re.split(r"\n- \*\*", section.split("## The Python API", 1)[0])[1:]
    api = [p for p in section.split("## The Python API", 1)[1].split("\n\n") if p.strip()]
    return bullets + api


def test_every_promise_names_a_test():
    promises = _promises()
    assert len(promises) >= 12
    for promise in promises:
        assert NAMED.search(promise), promise[:200]


def test_every_named_test_exists():
    named = NAMED.findall(PAGE.read_text(encoding="utf-8"))
    assert named
    for path, name in named:
        file = ROOT / path
        assert file.is_file(), path
        tests = {node.name for node in ast.walk(ast.parse(file.read_text(encoding="utf-8")))
                 if isinstance(node, ast.FunctionDef)}
        assert name in tests, f"{path}::{name}"
