"""Datasets on the Hugging Face Hub, read with ``datasets`` in the two layouts retrieval collections are published in.

- **BeIR** (``BeIR/<name>``, e.g. ``BeIR/nfcorpus``): configurations ``corpus`` (split ``corpus``; columns ``_id``,
  ``title``, ``text``) and ``queries`` (split ``queries``; ``_id``, ``title``, ``text``); the judgements live in a
  companion repository ``BeIR/<name>-qrels`` of TSV files ``train.tsv`` / ``dev.tsv`` / ``test.tsv`` (columns
  ``query-id``, ``corpus-id``, ``score``), one split each (``datasets`` names ``dev.tsv``'s split ``validation``; ssft
  names it ``dev``, as the BEIR folder does, and answers to either name).
- **MTEB** (``mteb/<name>``, e.g. ``mteb/nfcorpus``): one repository with configurations ``corpus`` (split ``corpus``;
  ``_id``, ``title``, ``text``), ``queries`` (split ``queries``; ``_id``, ``text``) and ``default``, the judgements
  (``query-id``, ``corpus-id``, ``score``), one split per qrels split (``train``, ``dev``, ``test``). A ``qrels``
  configuration is read like ``default`` (the NanoBEIR-style repositories), and a corpus / queries configuration
  with one split of another name (``train``, ``test``) gives that split.

Which layout a repository has is read from its configurations: ``corpus`` + ``queries`` + ``default`` (or ``qrels``)
is MTEB; ``corpus`` + ``queries`` alone is BeIR, with its ``-qrels`` companion. A local copy of a repository (a folder
holding the repository's files with its README.md, e.g. from ``huggingface-cli download --repo-type dataset``) is read
the same way; a BeIR copy finds its companion beside it (``<folder>-qrels``), or, for a snapshot folder of the hub
cache (``datasets--BeIR--<name>/snapshots/<commit>``), in the companion's snapshot that its ``refs/main`` names.

A hub id goes through ``datasets``' own cache (``$HF_DATASETS_CACHE``), so the second run, and a run with
``HF_HUB_OFFLINE=1``, reads the prepared copy; offline with nothing cached is one error that says so. The revision
``datasets`` resolved (the repository commit; for a local copy, its hash of the data files) is part of the dataset's
identity (``source_identity``).

This module imports no other part of ``ssft.data``: it hands ``ssft.data.beir`` rows (``LayoutSource``), which builds
the ``IRDataset`` and checks them as it checks a BEIR folder.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssft.core.errors import SsftError

# (where a message names the row, document id, title, text) / (where, query id, text) / (where, qid, doc id, grade)
DocRow = tuple[str, Any, Any, Any]
QueryRow = tuple[str, Any, Any]
QrelRow = tuple[str, Any, Any, Any]

HUB_BEIR = "hub-beir"
HUB_MTEB = "hub-mteb"
BEIR_FOLDER = "beir-folder"
IR_DATASETS = "ir_datasets"

# column names the layouts use (first) and the few other spellings published copies use
DOC_ID_COLUMNS = ("_id", "id", "doc_id", "docid", "corpus-id", "corpus_id")
QUERY_ID_COLUMNS = ("_id", "id", "query_id", "query-id", "qid")
QUERY_TEXT_COLUMNS = ("text", "query")
QREL_QUERY_COLUMNS = ("query-id", "query_id", "qid")
QREL_DOC_COLUMNS = ("corpus-id", "corpus_id", "doc_id", "docid", "doc-id")
QREL_GRADE_COLUMNS = ("score", "relevance", "label", "grade")
# a split a qrels file of this name gives (datasets renames BEIR's dev.tsv to 'validation'); either name answers
SPLIT_ALIASES = {"dev": "validation", "validation": "dev"}


@dataclass
class Judged:
    """Judgements read from somewhere other than a BEIR folder's qrels/: ``splits`` maps each split to a function giving
    its rows; ``aliases`` another name a split answers to; ``where`` names the source in messages."""

    where: str
    splits: dict[str, Callable[[], Iterable[QrelRow]]]
    aliases: dict[str, str] = field(default_factory=dict)

    def names(self) -> list[str]:
        return sorted(self.splits)

    def find(self, split: str) -> str | None:
        """The split ``split`` names (itself, or the split it is another name of), or None."""
        if split in self.splits:
            return split
        other = self.aliases.get(split)
        return other if other in self.splits else None


@dataclass
class LayoutSource:
    """What a reader found: the dataset's identity, its rows, and its judgements (``ssft.data.beir`` builds the
    ``IRDataset`` from them)."""

    layout: str
    id: str
    name: str
    path: Path
    revision: str | None
    corpus_where: str
    corpus: Iterable[DocRow]
    queries_where: str
    queries: Iterable[QueryRow]
    judged: Judged
    extra: dict[str, Any] = field(default_factory=dict)  # more identity (e.g. the qrels companion and its revision)

    def identity(self) -> dict[str, Any]:
        return {"layout": self.layout, "id": self.id, "revision": self.revision, "path": str(self.path), **self.extra}


# ---------------------------------------------------------------- which layout


def hub_id(spec: str) -> tuple[str, str | None] | None:
    """``(repository id, revision)`` of ``org/name`` or ``org/name@revision``; None for anything else (a path, a
    bare name, an id of more parts)."""
    repo, _, revision = spec.partition("@")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts) or repo.startswith((".", "~")) or "\\" in repo:
        return None
    return repo, (revision or None)


def is_hub_copy(folder: Path) -> bool:
    """A local copy of a hub repository: a README.md whose YAML header declares ``configs``."""
    readme = folder / "README.md"
    if not readme.is_file():
        return False
    try:
        head = readme.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    if not head.startswith("---"):
        return False
    header = head.split("\n---", 1)[0]
    return any(line.startswith("configs:") for line in header.splitlines())


def _datasets():
    import datasets  # noqa: PLC0415  (heavy optional library, loaded on first use)
    import huggingface_hub  # noqa: PLC0415  (with datasets)

    if not sys.stderr.isatty():
        datasets.disable_progress_bars()
    if _offline() and not datasets.config.HF_HUB_OFFLINE:
        # both read HF_HUB_OFFLINE once, when first imported; ssft honours it as it is when a dataset is loaded, rather
        # than trying the network for half a minute
        datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    return datasets


def _cache_dir() -> str | None:
    """``$HF_DATASETS_CACHE`` as it is now (``datasets`` reads it once, at import)."""
    return os.environ.get("HF_DATASETS_CACHE") or None


def _offline() -> bool:
    return any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _first_line(err: BaseException) -> str:
    """The first line of an error, and of its cause (``datasets`` wraps a reader's error in a generic one)."""
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    cause = err.__cause__ or err.__context__
    if cause is not None and str(cause).strip():
        line += f": {str(cause).strip().splitlines()[0]}"
    return line


def _unreachable(spec: str, err: BaseException) -> SsftError:
    """The one line for a hub id ``datasets`` could neither reach nor find in its cache."""
    datasets = _datasets()
    cache = _cache_dir() or str(datasets.config.HF_DATASETS_CACHE)
    why = "offline (HF_HUB_OFFLINE=1)" if _offline() else f"the Hugging Face Hub cannot be reached ({_first_line(err)})"
    return SsftError(f"dataset '{spec}': {why} and nothing of it is in the datasets cache ({cache}); load it once "
                     f"with a network, or pass a local copy of the repository (a folder)")


def _config_names(spec: str, revision: str | None, hub: bool) -> list[str]:
    """The configurations of a repository (a hub id or a local copy). Offline, or with the hub out of reach, a hub id's
    are those ``datasets`` prepared in its cache (its own answer then is a bare 'default', whatever the cache holds)."""
    datasets = _datasets()
    if hub and _offline():
        cached = _cached_configs(spec)
        if not cached:
            raise _unreachable(spec, ConnectionError("offline"))
        return cached
    try:
        module = datasets.load.dataset_module_factory(spec, revision=revision, cache_dir=_cache_dir())
        if module.module_path.endswith(".cache.cache"):  # datasets could not reach the hub and found a cached copy
            return _cached_configs(spec)
        builder_cls = datasets.load.get_dataset_builder_class(module, dataset_name=os.path.basename(spec))
        return list(builder_cls.builder_configs) or [builder_cls.DEFAULT_CONFIG_NAME or "default"]
    except ConnectionError as err:
        raise _unreachable(spec, err) from None
    except datasets.exceptions.DatasetNotFoundError as err:
        raise SsftError(f"dataset '{spec}': {_first_line(err)}") from None
    except (OSError, ValueError, TypeError, KeyError, RuntimeError, datasets.exceptions.DatasetsError) as err:
        raise SsftError(f"dataset '{spec}': cannot be read as a Hugging Face dataset: {_first_line(err)}") from None


def _cached_configs(repo: str) -> list[str]:
    """The configurations of a hub id that ``datasets`` prepared in its cache (``<org>___<name>/<config>/...``)."""
    datasets = _datasets()
    org, name = repo.split("/", 1)
    cache = Path(_cache_dir() or str(datasets.config.HF_DATASETS_CACHE))
    root = cache / f"{org}___{datasets.naming.camelcase_to_snakecase(name)}"
    if not root.is_dir():
        return []
    # a configuration prepared with extra arguments is cached as '<config>-<16 hex digits>'; ssft passes none
    return sorted(d.name for d in root.iterdir()
                  if d.is_dir() and any(d.glob("*/*/dataset_info.json")) and not re.search(r"-[0-9a-f]{16}$", d.name))


@dataclass
class _Config:
    """One configuration, prepared: its splits as ``datasets.Dataset`` and the revision ``datasets`` resolved."""

    splits: dict[str, Any]
    revision: str | None
    cache: Path | None


def _read_config(spec: str, config: str, revision: str | None, where: str) -> _Config:
    datasets = _datasets()
    try:
        builder = datasets.load_dataset_builder(spec, config, revision=revision, cache_dir=_cache_dir())
        builder.download_and_prepare()
        names = list(builder.info.splits or {})
        splits = {name: builder.as_dataset(split=name) for name in names}
    except ConnectionError as err:
        raise _unreachable(spec, err) from None
    except (OSError, ValueError, TypeError, KeyError, datasets.exceptions.DatasetsError) as err:
        raise SsftError(f"{where}: cannot be read: {_first_line(err)}") from None
    cache = Path(builder.cache_dir) if getattr(builder, "cache_dir", None) else None
    return _Config(splits, getattr(builder, "hash", None), cache)


def _column(table, choices: tuple[str, ...], what: str, where: str, required: bool = True) -> str | None:
    found = next((c for c in choices if c in table.column_names), None)
    if found is None and required:
        raise SsftError(f"{where}: no {what} column (expected {' or '.join(repr(c) for c in choices)}; it has "
                        f"{', '.join(table.column_names) or 'no columns'})")
    return found


def _one_split(cfg: _Config, wanted: str, where: str):
    """The split ``wanted`` of a corpus / queries configuration, or its only split."""
    if wanted in cfg.splits:
        return cfg.splits[wanted]
    if len(cfg.splits) == 1:
        return next(iter(cfg.splits.values()))
    raise SsftError(f"{where}: no split '{wanted}' (have: {', '.join(cfg.splits) or 'none'})")


def _doc_rows(table, where: str) -> Iterator[DocRow]:
    id_col = _column(table, DOC_ID_COLUMNS, "document id", where)
    text_col = _column(table, ("text",), "text", where)
    title_col = _column(table, ("title",), "title", where, required=False)
    ids, texts = table[id_col], table[text_col]
    titles = table[title_col] if title_col else [""] * len(ids)
    for row, (doc_id, title, text) in enumerate(zip(ids, titles, texts), 1):
        yield f"{where} row {row}", doc_id, title, text


def _query_rows(table, where: str) -> Iterator[QueryRow]:
    id_col = _column(table, QUERY_ID_COLUMNS, "query id", where)
    text_col = _column(table, QUERY_TEXT_COLUMNS, "query text", where)
    for row, (qid, text) in enumerate(zip(table[id_col], table[text_col]), 1):
        yield f"{where} row {row}", qid, text


def _qrel_rows(table, where: str) -> Callable[[], Iterator[QrelRow]]:
    q_col = _column(table, QREL_QUERY_COLUMNS, "query id", where)
    d_col = _column(table, QREL_DOC_COLUMNS, "document id", where)
    g_col = _column(table, QREL_GRADE_COLUMNS, "relevance grade", where)

    def rows() -> Iterator[QrelRow]:
        for row, (qid, did, grade) in enumerate(zip(table[q_col], table[d_col], table[g_col]), 1):
            yield f"{where} row {row}", qid, did, grade

    return rows


# ---------------------------------------------------------------- the readers


def read_hub(spec: str, local: Path | None = None) -> LayoutSource:
    """A hub id (``org/name[@revision]``) or a local copy of a hub repository (``local``) in the BeIR or MTEB layout."""
    if local is not None:
        target, revision, shown = str(local.resolve()), None, str(local)
    else:
        found = hub_id(spec)
        if found is None:
            raise SsftError(f"dataset '{spec}': not a hub id (expected org/name, e.g. BeIR/nfcorpus or mteb/nfcorpus)")
        target, revision = found
        shown = target
    configs = _config_names(target, revision, hub=local is None)
    if "corpus" not in configs or "queries" not in configs:
        raise SsftError(f"dataset '{spec}': a Hugging Face dataset in neither the BeIR layout (configurations corpus "
                        f"and queries, judgements in '{shown}-qrels') nor the MTEB layout (configurations corpus, queries "
                        f"and default); it has the configurations {', '.join(configs) or 'none'}")
    corpus_cfg = _read_config(target, "corpus", revision, f"{shown} (configuration corpus)")
    queries_cfg = _read_config(target, "queries", revision, f"{shown} (configuration queries)")
    qrels_config = next((c for c in ("default", "qrels") if c in configs), None)
    extra: dict[str, Any] = {}
    if qrels_config is not None:
        layout = HUB_MTEB
        qrels_where = f"{shown} (configuration {qrels_config})"
        qrels_cfg = _read_config(target, qrels_config, revision, qrels_where)
        extra["qrels_config"] = qrels_config
    else:
        layout = HUB_BEIR
        companion, companion_shown = _companion(spec, local, revision)
        qrels_where = companion_shown
        companion_configs = _config_names(companion, None, hub=local is None)
        qrels_cfg = _read_config(companion, companion_configs[0] if companion_configs else None, None, qrels_where)
        extra.update({"qrels_id": companion_shown, "qrels_revision": qrels_cfg.revision})
    if not qrels_cfg.splits:
        raise SsftError(f"{qrels_where}: no qrels splits")
    splits: dict[str, Callable[[], Iterable[QrelRow]]] = {}
    aliases: dict[str, str] = {}
    for split, table in qrels_cfg.splits.items():
        # the BeIR qrels are BEIR's files (train.tsv, dev.tsv, test.tsv): datasets' 'validation' is dev.tsv
        name = "dev" if layout == HUB_BEIR and split == "validation" else split
        splits[name] = _qrel_rows(table, f"{qrels_where} split {name}")
    for name in list(splits):  # dev answers to validation and back, where only one of them exists
        other = SPLIT_ALIASES.get(name)
        if other and other not in splits:
            aliases.setdefault(other, name)
    corpus_where = f"{shown} (configuration corpus)"
    queries_where = f"{shown} (configuration queries)"
    corpus = _one_split(corpus_cfg, "corpus", corpus_where)
    queries = _one_split(queries_cfg, "queries", queries_where)
    path = local if local is not None else _repo_cache(corpus_cfg.cache, target)
    name = target.split("/")[-1] if local is None else _local_name(local)
    return LayoutSource(layout, str(local) if local is not None else target, name, path, corpus_cfg.revision,
                        corpus_where, _doc_rows(corpus, corpus_where), queries_where, _query_rows(queries, queries_where),
                        Judged(qrels_where, splits, aliases), extra)


def _companion(spec: str, local: Path | None, revision: str | None) -> tuple[str, str]:
    """The BeIR layout's qrels repository: ``<id>-qrels`` on the hub, ``<folder>-qrels`` beside a local copy."""
    if local is not None:
        folder = local.parent / f"{local.name}-qrels"
        snapshot = _cache_snapshot_companion(local)
        if snapshot is not None:
            folder = snapshot
        if not folder.is_dir():
            raise SsftError(f"dataset '{spec}': a copy of a BeIR-layout repository (configurations corpus and queries), "
                            f"whose judgements live in a companion repository; no folder {folder} beside it (download "
                            f"the '-qrels' repository there)")
        return str(folder.resolve()), str(folder)
    repo = hub_id(spec)[0]  # checked by the caller
    return f"{repo}-qrels", f"{repo}-qrels"


def _local_name(local: Path) -> str:
    """A local copy's dataset name: its folder's, or for a hub-cache snapshot its repository's (not the commit)."""
    resolved = local.resolve()
    if resolved.parent.name == "snapshots" and resolved.parent.parent.name.startswith("datasets--"):
        return resolved.parent.parent.name.split("--")[-1]
    return local.name


def _cache_snapshot_companion(local: Path) -> Path | None:
    """In the Hugging Face hub cache (``datasets--<org>--<name>/snapshots/<commit>``) the companion is the snapshot of
    ``datasets--<org>--<name>-qrels`` its ``refs/main`` names (else its newest); None outside that layout."""
    repo_dir = local.resolve().parent.parent
    if local.resolve().parent.name != "snapshots" or not repo_dir.name.startswith("datasets--"):
        return None
    other = repo_dir.with_name(f"{repo_dir.name}-qrels")
    ref = other / "refs" / "main"
    if ref.is_file():
        return other / "snapshots" / ref.read_text(encoding="utf-8").strip()
    snapshots = sorted((other / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime) if other.is_dir() else []
    return snapshots[-1] if snapshots else other / "snapshots"


def _repo_cache(cache: Path | None, repo: str) -> Path:
    """The folder of ``datasets``' cache that holds this repository (``<org>___<name>``), where messages and the output
    folder checks point for a dataset read from the hub."""
    if cache is not None:
        for parent in (cache, *cache.parents):
            if "___" in parent.name:
                return parent
        return cache
    return Path(_cache_dir() or str(_datasets().config.HF_DATASETS_CACHE)) / repo.replace("/", "___")


__all__ = ["BEIR_FOLDER", "HUB_BEIR", "HUB_MTEB", "IR_DATASETS", "Judged", "LayoutSource", "hub_id", "is_hub_copy",
           "read_hub"]
