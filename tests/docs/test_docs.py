"""The front door works as written: every ```python block of README.md and of docs/getting-started.md runs, in order,
one namespace per file, in a fresh working directory (the repository's recipes/ beside it, as in a checkout) on the
shared data; and no user-facing page names a tracker issue. (`mkdocs build --strict` is .ci/run's step, not a test.)"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "docs" / "getting-started.md"]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.I)


def python_blocks(text: str) -> list[str]:
    """The ```python fenced blocks of a Markdown text, in order."""
    return [match.group(1) for match in FENCE.finditer(text)]


def test_python_blocks_are_found():
    text = "intro\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = x + 1\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x + 1\n"]
    for page in PAGES:
        assert python_blocks(page.read_text(encoding="utf-8")), f"{page.name} has no python block"


@pytest.mark.integration
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_runs(page, tmp_path, monkeypatch):
    monkeypatch.setenv("SSFT_DATA_HOME", os.environ.get("SSFT_DATA_HOME") or str(SHARED_DATA))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    (tmp_path / "recipes").symlink_to(REPO / "recipes", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    for number, block in enumerate(python_blocks(page.read_text(encoding="utf-8")), start=1):
        code = compile(block, f"{page.name}, python block {number}", "exec")
        exec(code, namespace)  # an exception fails the test with the block's name in the traceback


def user_facing_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_issue_pattern():
    assert ISSUE.search("fixed in issue 21") and ISSUE.search("issues 18–21") and ISSUE.search("Issue #3")
    assert not ISSUE.search("an issue with 2 cores") and not ISSUE.search("issued 3 times")


@pytest.mark.parametrize("page", user_facing_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_issue_numbers(page):
    hits = [f"line {n}: {line.strip()}" for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            if ISSUE.search(line)]
    assert not hits, f"{page.relative_to(REPO)} names tracker issues: " + "; ".join(hits)
