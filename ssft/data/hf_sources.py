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

A negative that is not one is dropped, with one counted warning per kind in ``dataset.warnings`` (what ssft-train
writes to run_info.json's ``data_warnings``): a negative equal to the row's positive, a negative listed again in the
row (its first listing stays) and, in the ids and scored forms, a negative that the recipe's training qrels
(``data.train_split``, when the dataset has it) judge relevant to the row's query at ``data.min_relevance`` or above —
a positive of the BEIR training path, which never draws one as a negative. A scored row drops a document with its
score; a document a scored row lists twice with two different teacher scores is refused (neither can be trusted as
the teacher's).

``data.max_train_queries`` / ``data.max_positives_per_query`` subsample the rows as they subsample the BEIR training
qrels (``TrainSource.subsample``): the same seeded draw over the sorted distinct queries (a query id; in the text form
the query text), then per query over its sorted distinct positives; every row of a kept (query, positive) stays.
"""
from __future__ import annotations

import logging
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
from ssft.data.beir import IRDataset, Qrels
from ssft.data.examples import Example, subsample_queries

BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}
_NEGATIVE = re.compile(r"negative(?:_(\d+))?(?:_id)?|negative_id(?:_(\d+))?")

logger = logging.getLogger(__name__)


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
    row: int = 0  # the source's row (1-based) it was read from; 0: not from a file
    dropped: int = 0  # documents the reader dropped from the row (repeats, judged-relevant negatives)


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


def load_train_source(spec: str, dataset: IRDataset, form: str = "auto", subset: str | None = None,
                      train_split: str | None = None, min_relevance: int = 1) -> TrainSource:
    """Read and check ``spec`` (see the module docstring) against ``dataset``'s queries and corpus. Negatives that
    ``dataset``'s ``train_split`` qrels judge relevant to their row's query (grade >= ``min_relevance``) are dropped,
    as are repeats, with counted warnings in ``dataset.warnings`` (no ``train_split``, or a dataset without that
    split: no judgments to check against)."""
    rows = read_rows(spec, subset)
    columns = list(rows.column_names)
    if form == "auto":
        form = detect_form(columns, dict(rows.features), spec)
    reader = {"text": _text_rows, "ids": _id_rows, "scored": _scored_rows}[form]
    judged = _judged_relevant(dataset, train_split, min_relevance) if form != "text" else None
    dropped = _Dropped(spec, f"{train_split}, grade >= {min_relevance}")
    examples = reader(rows, columns, dataset, spec, judged or {}, dropped)
    dropped.report(dataset.warnings)
    return TrainSource(form, spec, examples)


def _judged_relevant(dataset: IRDataset, split: str | None, min_relevance: int) -> dict[str, set[str]] | None:
    """Per query, the documents the ``split`` qrels grade ``min_relevance`` or more: the positives the BEIR training
    path would train on, never a negative. None when there is no such split to read."""
    if split is None or split not in dataset.splits():
        return None
    qrels: Qrels = dataset.qrels(split)
    return {q: {d for d, grade in rels.items() if grade >= min_relevance} for q, rels in qrels.items()}


class _Dropped:
    """The negatives a reader leaves out of its rows, by reason, with the rows they were in: one counted warning per
    reason, as the other data warnings (logged, and in run_info.json's ``data_warnings``)."""

    REASONS = {"positive": "equal to the row's positive", "repeat": "listed again in the same row",
               "judged": "judged relevant to the row's query by the training qrels ({qrels})"}
    ROWS_SHOWN = 5

    def __init__(self, name: str, qrels: str):
        self.name, self.qrels = name, qrels
        self.counts: dict[str, int] = {}
        self.rows: dict[str, list[int]] = {}

    def add(self, reason: str, row: int) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        rows = self.rows.setdefault(reason, [])
        if not rows or rows[-1] != row:
            rows.append(row)

    def report(self, warnings: list[str]) -> None:
        for reason, what in self.REASONS.items():
            n = self.counts.get(reason, 0)
            if not n:
                continue
            rows = self.rows[reason]
            shown = ", ".join(str(r) for r in rows[:self.ROWS_SHOWN]) + (f", ... ({len(rows)} rows)"
                                                                         if len(rows) > self.ROWS_SHOWN else "")
            message = (f"data.train: {self.name}: {n} {'negative' if n == 1 else 'negatives'} "
                       f"{what.format(qrels=self.qrels)} dropped ({'row' if len(rows) == 1 else 'rows'} {shown})")
            if message not in warnings:  # a source read twice over the same dataset warns once
                logger.warning(message)
                warnings.append(message)


def _kept_negatives(positive: str, negatives: list[str], judged: set[str], row: int, dropped: _Dropped) -> list[str]:
    """``negatives`` without the positive, repeats and judged-relevant documents, in order (each drop counted)."""
    kept, seen = [], set()
    for d in negatives:
        if d == positive:
            dropped.add("positive", row)
        elif d in seen:
            dropped.add("repeat", row)
        elif d in judged:
            seen.add(d)
            dropped.add("judged", row)
        else:
            seen.add(d)
            kept.append(d)
    return kept


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


def _text_rows(rows, columns: list[str], dataset: IRDataset, name: str, judged: dict[str, set[str]],
               dropped: _Dropped) -> list[TextExample]:
    q_col = _need(columns, ("query",), name, "text")
    p_col = _need(columns, ("positive",), name, "text")
    neg_cols = negative_columns(columns)
    out = []
    for i, row in enumerate(rows, start=1):
        negatives = [_text(row[c], name, c, i) for c in neg_cols if row[c] is not None]
        positive = _text(row[p_col], name, p_col, i)
        out.append(TextExample(_text(row[q_col], name, q_col, i), positive,
                               _kept_negatives(positive, negatives, set(), i, dropped)))
    return out


def _id_rows(rows, columns: list[str], dataset: IRDataset, name: str, judged: dict[str, set[str]],
             dropped: _Dropped) -> list[Example]:
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
        out.append(Example(qid, positive, _kept_negatives(positive, negatives, judged.get(qid, set()), i, dropped)))
    return out


def _scored_rows(rows, columns: list[str], dataset: IRDataset, name: str, judged: dict[str, set[str]],
                 dropped: _Dropped) -> list[ScoredExample]:
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
        out.append(_scored_example(qid, docs, values, judged.get(qid, set()), name, d_col, i, dropped))
    return out


def _scored_example(qid: str, docs: list[str], scores: list[float], judged: set[str], name: str, column: str, row: int,
                    dropped: _Dropped) -> ScoredExample:
    """A scored row without its repeats and judged-relevant negatives (dropped with their scores). A document listed
    again with another score is refused: the row says two things about one (query, document) pair."""
    first: dict[str, int] = {}  # document -> the position it is first listed at
    keep = []
    for j, (d, s) in enumerate(zip(docs, scores)):
        if d in first:
            k = first[d]
            if not math.isclose(s, scores[k], rel_tol=1e-6, abs_tol=1e-9):  # the same number written twice passes
                where = (f"is the row's positive (score {scores[k]:g}) and listed again at position {j + 1} with "
                         f"score {s:g}" if k == 0 else
                         f"is listed at positions {k + 1} and {j + 1} with scores {scores[k]:g} and {s:g}")
                raise SsftError(f"data.train: {name}: column '{column}', row {row}: document '{d}' {where}: "
                                f"one document, two teacher scores")
            dropped.add("positive" if k == 0 else "repeat", row)
            continue
        first[d] = j
        if j > 0 and d in judged:
            dropped.add("judged", row)
            continue
        keep.append(j)
    return ScoredExample(qid, [docs[j] for j in keep], [scores[j] for j in keep], row, len(docs) - len(keep))


__all__ = ["FORMS", "ScoredExample", "TextExample", "TrainSource", "detect_form", "load_train_source", "negative_columns",
           "read_rows"]
