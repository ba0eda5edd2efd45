"""The names of the run files and per-query files a command writes beside its metrics.json, defined once here (and
documented once, in docs/evaluation.md, "Output file names").

Each row of metrics.json has a TREC run ``run.<label>.trec`` and per-query metrics ``per_query.<label>.tsv``:

- a row that names the split already -- the model's own row (``test``) and the rows built on it (``test+bm25``, the
  interpolation; ``test+bm25.fusion``) -- is its own label: ``run.test.trec``, ``run.test+bm25.trec``;
- any other row -- the first stage (``bm25``), the starting model (``start``) -- gets the split after it, so that the
  file says which queries it holds: ``run.bm25.test.trec``, ``per_query.start.test.tsv``.

A first stage read from a run file is named after the file (``first_stage_row``): its name without the extension,
without ssft's own ``run.`` prefix and without a trailing ``.<split>``. ``run.bm25.test.trec`` reranked on ``test``
is ``bm25`` again (its files ``run.bm25.test.trec``, ``per_query.bm25.test.tsv``), never ``run.run.bm25.test.test``;
the doubled names earlier ssft versions wrote (``run.run.bm25.test.test.trec``) read the same way. A name that would
take the model's place -- empty, ``run`` (ssft-rerank's ``run.trec``), the split itself, or the split followed by
``+`` -- becomes ``first_stage`` (``first_stage.<name>`` for the last kind).
"""
from __future__ import annotations

from pathlib import Path

RUN_PREFIX, PER_QUERY_PREFIX = "run.", "per_query."
RUN_EXTENSIONS = (".trec", ".txt", ".run", ".tsv")  # what a first-stage run file's name may end with
FIRST_STAGE = "first_stage"  # the row of a first stage whose own name would take the model's place


def label(row: str, split: str) -> str:
    """The part of the file names that says which row of which split: ``row`` when it names the split already
    (``test``, ``test+bm25``), else ``<row>.<split>`` (``bm25.test``, ``start.test``)."""
    return row if row == split or row.startswith(split + "+") else f"{row}.{split}"


def run_file(row: str, split: str) -> str:
    """The TREC run file of a metrics.json row: ``run.test.trec``, ``run.bm25.test.trec``, ``run.test+bm25.trec``."""
    return f"{RUN_PREFIX}{label(row, split)}.trec"


def per_query_file(row: str, split: str) -> str:
    """The per-query metrics of a metrics.json row: ``per_query.test.tsv``, ``per_query.bm25.test.tsv``."""
    return f"{PER_QUERY_PREFIX}{label(row, split)}.tsv"


def file_stem(path: str | Path) -> str:
    """A run file's name without its extension: ``runs/bm25.test.trec`` -> ``bm25.test``."""
    name = Path(path).name
    for ext in RUN_EXTENSIONS:
        name = name.removesuffix(ext)
    return name


def first_stage_row(name: str, split: str) -> str:
    """The metrics.json row (and file label) of a first stage called ``name`` (``bm25``, or a run file's stem) on
    ``split``: ssft's ``run.`` prefix and trailing ``.<split>`` dropped, as often as they repeat (module docstring);
    never a name that would take the model's row or a row built on it."""
    row = name
    while row.startswith(RUN_PREFIX):
        row = row.removeprefix(RUN_PREFIX)
    while row.endswith("." + split):
        row = row.removesuffix("." + split)
    if row in ("", "run", split):
        return FIRST_STAGE
    if row.startswith(split + "+"):
        return f"{FIRST_STAGE}.{row}"
    return row


__all__ = ["FIRST_STAGE", "PER_QUERY_PREFIX", "RUN_EXTENSIONS", "RUN_PREFIX", "file_stem", "first_stage_row", "label",
           "per_query_file", "run_file"]
