"""``data.train``: training rows from a Hugging Face dataset (``datasets.load_dataset``, which caches it) instead of
the BEIR training qrels. The source is a local ``.jsonl`` / ``.json`` / ``.parquet`` / ``.csv`` / ``.tsv`` file, a
folder of them, or a hub dataset id (``data.train_subset``: its configuration name). Three forms:

- ``text``: columns ``query``, ``positive`` and the negatives ``negative`` or ``negative_1`` … ``negative_n``
  (sentence-transformers' MS MARCO ``triplet`` / ``triplet-50`` subsets); texts used as they are.
- ``ids``: ``query_id``, ``positive_id`` and ``negative_id`` / ``negative_1_id`` … / a list column
  ``negative_ids`` (sentence-transformers/msmarco ``triplets``), or ``query``, ``positive``, ``negative(_k)``
  holding integer ids (the ``triplet-ids`` / ``triplet-50-ids`` subsets): ids of the recipe's queries and corpus.
- ``scored``: ``query_id``, ``document_ids`` (a list) and ``scores`` (a list as long, a teacher's scores of
  those documents), one row per query (PyLate's knowledge-distillation layout, e.g. lightonai/ms-marco-en-bge's
  ``train`` subset; what ``ssft-mine`` writes): for the distillation losses (``margin_mse``, ``listwise_kl``).
  The first document of a list is the one the group leads with (the positive: column 0 of the loss).

``auto`` picks the form from the columns. Every bad row is refused with one line naming the source, the
column and the row (1-based: the line of a jsonl file).

``data.max_train_queries`` / ``data.max_positives_per_query`` subsample the rows as they subsample the BEIR training
qrels (``TrainSource.subsample``): the same seeded draw over the sorted distinct queries (a query id; in the text form
the query text), then per query over its sorted distinct positives; every row of a kept (query, positive) stays.
"""
from __future__ import annotations

import math
import random
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssft.config.choices import TRAIN_FORMS as FORMS
from ssft.core.errors import SsftError
from ssft.data.beir import IRDataset
from ssft.data.examples import Example, subsample_queries

BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}
_NEGATIVE = re.compile(r"negative(?:_(\d+))?(?:_id)?|negative_id(?:_(\d+))?")


@dataclass
class TextExample:
    query: str
    positive: str
    negatives: list[str]


@dataclass
class ScoredExample:
    qid: str
    document_ids: list[str]
    scores: list[float]


@dataclass
class TrainSource:
    """What a ``data.train`` source holds: ``examples`` of its form (``Example`` for ids, ``TextExample``,
    ``ScoredExample``)."""

    form: str
    name: str
    examples: list[Any] = field(default_factory=list)

    @property
    def query_ids(self) -> list[str]:
        return sorted({ex.qid for ex in self.examples}) if self.form != "text" else []

    def query_key(self, example: Any) -> str:
        """The query a row trains: its query id, or in the text form its query text."""
        return example.query if self.form == "text" else example.qid

    def positive_key(self, example: Any) -> str:
        """The positive a row leads with: a document id (scored: the list's first), or in the text form its text."""
        if self.form == "scored":
            return example.document_ids[0]
        return example.positive

    def query_texts(self, dataset: IRDataset) -> list[str]:
        """The distinct query texts of the rows, in row order (the text form brings its own; ids: the dataset's)."""
        keys = dict.fromkeys(self.query_key(ex) for ex in self.examples)
        return list(keys) if self.form == "text" else [dataset.queries[q] for q in keys]

    def subsample(self, max_queries: int | None, max_positives: int | None, seed: int) -> TrainSource:
        """The rows of ``max_queries`` distinct queries and, per query, of at most ``max_positives`` distinct positives,
        drawn as ``data.max_train_queries`` / ``data.max_positives_per_query`` draw from the BEIR training qrels
        (``subsample_queries``; ``build_examples``' per-query draw, one ``random.Random(seed)`` over the sorted
        queries): rows in their order, every row of a kept (query, positive) kept."""
        if max_queries is None and max_positives is None:
            return self
        positives: dict[str, dict[str, None]] = {}
        for ex in self.examples:
            positives.setdefault(self.query_key(ex), {})[self.positive_key(ex)] = None
        kept_queries = subsample_queries(positives, max_queries, seed)
        rng = random.Random(seed)
        kept: set[tuple[str, str]] = set()
        for key in sorted(kept_queries):
            chosen = sorted(positives[key])
            if max_positives is not None and len(chosen) > max_positives:
                chosen = sorted(rng.sample(chosen, max_positives))
            kept.update((key, p) for p in chosen)
        rows = [ex for ex in self.examples if (self.query_key(ex), self.positive_key(ex)) in kept]
        return TrainSource(self.form, self.name, rows)


def read_rows(spec: str, subset: str | None = None):
    """The ``train`` split of a local file / folder or hub dataset, as a ``datasets.Dataset``. A hub dataset goes
    through ``datasets``' own download cache; local files are read into memory through a temporary cache folder
    removed afterwards (a refused run leaves nothing behind; a copy of a local file is worth nothing)."""
    import datasets  # noqa: PLC0415  (heavy optional library, loaded on first use)

    if not sys.stderr.isatty():
        datasets.disable_progress_bars()
    path = Path(spec).expanduser()
    try:
        if path.is_file() or path.is_dir():
            with tempfile.TemporaryDirectory(prefix="ssft-train-rows-") as tmp:
                if path.is_file():
                    builder = BUILDERS.get(path.suffix.lower())
                    if builder is None:
                        raise SsftError(f"data.train: {spec}: expected a {', '.join(BUILDERS)} file")
                    kwargs = {"delimiter": "\t"} if path.suffix.lower() == ".tsv" else {}
                    rows = datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=tmp,
                                                 keep_in_memory=True, **kwargs)
                else:
                    rows = datasets.load_dataset(str(path), subset, split="train", cache_dir=tmp, keep_in_memory=True)
        else:
            rows = datasets.load_dataset(spec, subset, split="train")
    except SsftError:
        raise
    except StopIteration:  # datasets' json reader on a file without a row
        raise SsftError(f"data.train: {spec}: the dataset has no rows") from None
    except (OSError, ValueError, TypeError, KeyError, datasets.exceptions.DatasetsError, ConnectionError) as err:
        text = str(err).strip().splitlines()
        if text and "corresponds to no data" in text[0]:  # datasets' word for a file without rows
            raise SsftError(f"data.train: {spec}: the dataset has no rows") from None
        raise SsftError(f"data.train: {spec}: cannot be read as a dataset: {text[0] if text else type(err).__name__}") from None
    if len(rows) == 0:
        raise SsftError(f"data.train: {spec}: the dataset has no rows")
    return rows


def negative_columns(columns: list[str]) -> list[str]:
    """The negative columns in order: ``negative`` / ``negative_id`` first, then ``negative_<k>`` by k."""
    found = []
    for c in columns:
        m = _NEGATIVE.fullmatch(c)
        if m:
            k = m.group(1) or m.group(2)
            found.append((int(k) if k else 0, c))
    return [c for _, c in sorted(found)]


def detect_form(columns: list[str], features: dict, name: str) -> str:
    if "document_ids" in columns or "scores" in columns:
        return "scored"
    if "query_id" in columns or "positive_id" in columns:
        return "ids"
    if "query" in columns:
        dtype = getattr(features.get("query"), "dtype", "string")
        return "text" if dtype in ("string", "large_string") else "ids"
    raise SsftError(f"data.train: {name}: no column 'query', 'query_id' or 'document_ids' (columns: {', '.join(columns)}); "
                    f"expected the text form (query, positive, negative_1 ...), the ids form (query_id, positive_id, "
                    f"negative_id ...) or the scored form (query_id, document_ids, scores)")


def load_train_source(spec: str, dataset: IRDataset, form: str = "auto", subset: str | None = None) -> TrainSource:
    """Read and check ``spec`` (see the module docstring) against ``dataset``'s queries and corpus."""
    rows = read_rows(spec, subset)
    columns = list(rows.column_names)
    if form == "auto":
        form = detect_form(columns, dict(rows.features), spec)
    reader = {"text": _text_rows, "ids": _id_rows, "scored": _scored_rows}[form]
    return TrainSource(form, spec, reader(rows, columns, dataset, spec))


def _need(columns: list[str], wanted: tuple[str, ...], name: str, form: str) -> str:
    for c in wanted:
        if c in columns:
            return c
    raise SsftError(f"data.train: {name}: the {form} form needs a column {' or '.join(repr(c) for c in wanted)} "
                    f"(columns: {', '.join(columns)})")


def _text(value, name: str, column: str, row: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SsftError(f"data.train: {name}: column '{column}', row {row}: expected a non-empty text, got {value!r}")
    return value


def _id(value, name: str, column: str, row: int, known: dict, what: str) -> str:
    if value is None or isinstance(value, (float, bool, list, dict)) or str(value).strip() == "":
        raise SsftError(f"data.train: {name}: column '{column}', row {row}: expected a {what} id, got {value!r}")
    key = str(value)
    if key not in known:
        raise SsftError(f"data.train: {name}: column '{column}', row {row}: {what} id '{key}' is not in the recipe's "
                        f"dataset")
    return key


def _text_rows(rows, columns: list[str], dataset: IRDataset, name: str) -> list[TextExample]:
    q_col = _need(columns, ("query",), name, "text")
    p_col = _need(columns, ("positive",), name, "text")
    neg_cols = negative_columns(columns)
    out = []
    for i, row in enumerate(rows, start=1):
        negatives = [_text(row[c], name, c, i) for c in neg_cols if row[c] is not None]
        out.append(TextExample(_text(row[q_col], name, q_col, i), _text(row[p_col], name, p_col, i), negatives))
    return out


def _id_rows(rows, columns: list[str], dataset: IRDataset, name: str) -> list[Example]:
    q_col = _need(columns, ("query_id", "query"), name, "ids")
    p_col = _need(columns, ("positive_id", "positive"), name, "ids")
    list_col = "negative_ids" if "negative_ids" in columns else None
    neg_cols = negative_columns(columns)
    out = []
    for i, row in enumerate(rows, start=1):
        qid = _id(row[q_col], name, q_col, i, dataset.queries, "query")
        if not dataset.queries[qid].strip():
            raise SsftError(f"data.train: {name}: column '{q_col}', row {i}: query '{qid}' has an empty text")
        positive = _id(row[p_col], name, p_col, i, dataset.corpus, "document")
        negatives = [_id(row[c], name, c, i, dataset.corpus, "document") for c in neg_cols if row[c] is not None]
        if list_col is not None:
            values = row[list_col]
            if not isinstance(values, list):
                raise SsftError(f"data.train: {name}: column '{list_col}', row {i}: expected a list of document ids, "
                                f"got {values!r}")
            negatives += [_id(v, name, list_col, i, dataset.corpus, "document") for v in values]
        out.append(Example(qid, positive, [d for d in dict.fromkeys(negatives) if d != positive]))
    return out


def _scored_rows(rows, columns: list[str], dataset: IRDataset, name: str) -> list[ScoredExample]:
    q_col = _need(columns, ("query_id",), name, "scored")
    d_col = _need(columns, ("document_ids",), name, "scored")
    s_col = _need(columns, ("scores",), name, "scored")
    out = []
    for i, row in enumerate(rows, start=1):
        qid = _id(row[q_col], name, q_col, i, dataset.queries, "query")
        ids, scores = row[d_col], row[s_col]
        if not isinstance(ids, list) or not ids:
            raise SsftError(f"data.train: {name}: column '{d_col}', row {i}: expected a non-empty list of document ids, "
                            f"got {ids!r}")
        if not isinstance(scores, list):
            raise SsftError(f"data.train: {name}: column '{s_col}', row {i}: expected a list of scores, got {scores!r}")
        if len(scores) != len(ids):
            raise SsftError(f"data.train: {name}: column '{s_col}', row {i}: {len(scores)} scores for {len(ids)} "
                            f"document ids")
        docs = [_id(d, name, d_col, i, dataset.corpus, "document") for d in ids]
        values = []
        for s in scores:
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
                raise SsftError(f"data.train: {name}: column '{s_col}', row {i}: scores must be finite numbers, got {s!r}")
            values.append(float(s))
        out.append(ScoredExample(qid, docs, values))
    return out


__all__ = ["FORMS", "ScoredExample", "TextExample", "TrainSource", "detect_form", "load_train_source", "negative_columns",
           "read_rows"]
