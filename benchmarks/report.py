"""BENCHMARKS.md is written by the benchmark scripts, one marked section each, so they don't overwrite each other."""
from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
HEADER = "# ssft benchmarks\n\nWritten by the scripts in `benchmarks/`; each section names the command that produced it.\n"


def write_section(name: str, body: str) -> None:
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else HEADER
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    tmp = BENCHMARKS.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(BENCHMARKS)
