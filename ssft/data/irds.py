"""Datasets by ``ir_datasets`` id (``beir/nfcorpus/test``, ``msmarco-passage/trec-dl-2019/judged``, ``cranfield``):
the optional dependency ``ir_datasets`` (``pip install 'ssft[irds]'``) downloads and caches them in its own home
(``$IR_DATASETS_HOME``, default ``~/.ir_datasets``) on first use; offline it reads what is there.

An ``ir_datasets`` id names one set of judgements, so the dataset has one split: named after the id's last part when
that is ``train``, ``dev`` or ``validation`` (``beir/nfcorpus/dev`` → ``dev``), else ``test`` (the id is a test
collection: ``beir/nfcorpus/test``, ``msmarco-passage/trec-dl-2019/judged``, ``cranfield``). Documents give
``title`` (where their type has one) and ``text`` (or, for a type without a ``text`` field, ``default_text()``);
queries ``text`` (or ``default_text()``).

An id with a ``/`` that ``ir_datasets`` registers is read here; any other id is, prefixed ``irds:``
(``irds:cranfield``), since a bare name is a BEIR dataset name first. This module imports no other part of
``ssft.data`` (``ssft.data.beir`` builds the ``IRDataset`` from the rows).
"""
from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ssft.core.errors import SsftError
from ssft.core.paths import offline
from ssft.data.hub_layouts import IR_DATASETS, DocRow, Judged, LayoutSource, QrelRow, QueryRow

PREFIXES = ("irds:", "ir_datasets:")
SPLIT_WORDS = ("train", "dev", "validation")
INSTALL = "pip install 'ssft[irds]' (or pip install ir_datasets)"


def strip_prefix(spec: str) -> str | None:
    """The id of ``irds:<id>`` / ``ir_datasets:<id>``, else None."""
    for prefix in PREFIXES:
        if spec.startswith(prefix):
            return spec[len(prefix):]
    return None


def _module(required: bool):
    try:
        import ir_datasets  # noqa: PLC0415  (optional dependency, loaded only for an ir_datasets id)
    except ImportError:
        if required:
            raise SsftError(f"ir_datasets ids need the optional package ir_datasets: {INSTALL}") from None
        return None
    return ir_datasets


def is_registered(dataset_id: str) -> bool:
    """Whether ``ir_datasets`` is installed and registers ``dataset_id`` (no download: its registry is code)."""
    module = _module(required=False)
    return module is not None and dataset_id in module.registry


def split_of(dataset_id: str) -> str:
    last = dataset_id.rstrip("/").split("/")[-1]
    return last if last in SPLIT_WORDS else "test"


def _network_error(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) is a failed connection: requests' / urllib3's / urllib's, or an OSError."""
    seen = 0
    while err is not None and seen < 10:
        names = " ".join(k.__name__ for k in type(err).__mro__)
        if isinstance(err, (ConnectionError, TimeoutError)) or any(
                word in names for word in ("ConnectionError", "NameResolution", "MaxRetry", "URLError", "Timeout")):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def _remove_empty_folders(top: Path) -> None:
    """The empty folders under ``top`` (and ``top``), deepest first: what a failed first download left behind."""
    if not top.is_dir():
        return
    for folder in sorted((p for p in top.rglob("*") if p.is_dir() and not p.is_symlink()), key=lambda p: -len(p.parts)):
        try:
            folder.rmdir()
        except OSError:
            pass  # not empty: a file is there
    try:
        top.rmdir()
    except OSError:
        pass


def _remove_new_empty_folders(home: Path, before: set[str], home_existed: bool) -> None:
    """The empty folders a failed download created in ``home`` (whose entries were ``before``), and ``home`` itself
    when it was created too and is empty now."""
    for entry in sorted(home.iterdir()) if home.is_dir() else []:
        if entry.name not in before:
            _remove_empty_folders(entry)
    if not home_existed:
        _remove_empty_folders(home)


def _failed(dataset_id: str, home: Path, err: BaseException) -> SsftError:
    if _network_error(err):  # the transport's own text (hosts, pools, retries) is no help here
        reason = f"the download failed, no network connection ({type(err).__name__})"
    else:
        text = str(err).strip().splitlines()
        reason = text[0] if text else type(err).__name__
    return SsftError(f"ir_datasets '{dataset_id}': {reason} (ir_datasets downloads into {home} on first use, which "
                     f"needs a network; offline it reads only what is already there)")


def _text(record: Any) -> tuple[str, str]:
    """(title, text) of a document or query record of any ir_datasets type."""
    fields = getattr(record, "_fields", ())
    if "text" in fields:
        return (getattr(record, "title", "") if "title" in fields else "") or "", record.text or ""
    return "", record.default_text() if hasattr(record, "default_text") else ""


def read_ir_datasets(dataset_id: str) -> LayoutSource:
    """The corpus, queries and judgements of an ``ir_datasets`` id (see the module docstring)."""
    module = _module(required=True)
    if dataset_id not in module.registry:
        close = difflib.get_close_matches(dataset_id, list(module.registry), n=3)
        hint = f" (close: {', '.join(close)})" if close else " (ids: https://ir-datasets.com)"
        raise SsftError(f"ir_datasets '{dataset_id}': not an ir_datasets id{hint}")
    home = Path(module.util.home_path())
    top = home / dataset_id.split("/")[0]  # where ir_datasets keeps this collection's files
    fresh = not top.exists()
    if fresh and offline():  # nothing downloaded yet and no network to be asked: say so before ir_datasets tries
        raise SsftError(f"ir_datasets '{dataset_id}': not downloaded ({top} does not exist) and HF_HUB_OFFLINE=1 keeps "
                        f"ssft offline; run once with a network to download it, or give a BEIR folder")
    home_existed = home.is_dir()
    before = {p.name for p in home.iterdir()} if home_existed else set()  # what is there before a first download
    dataset = module.load(dataset_id)
    lacking = [what for what, has in (("documents", dataset.has_docs()), ("queries", dataset.has_queries()),
                                      ("judgements (qrels)", dataset.has_qrels())) if not has]
    if lacking:
        subsets = sorted(k for k in module.registry if k.startswith(dataset_id.rstrip("/") + "/"))[:6]
        hint = f"; its subsets: {', '.join(subsets)}" if subsets else ""
        raise SsftError(f"ir_datasets '{dataset_id}' has no {' and no '.join(lacking)}{hint}")
    split = split_of(dataset_id)
    where = f"ir_datasets '{dataset_id}'"

    def guarded(rows: Iterator) -> Iterator:
        try:
            yield from rows
        except SsftError:
            raise
        except Exception as err:  # noqa: BLE001 -- a download, a parser or a missing file inside ir_datasets: one line
            if fresh:  # a first download that failed leaves no empty folders behind
                _remove_new_empty_folders(home, before, home_existed)
            raise _failed(dataset_id, home, err) from None

    def docs() -> Iterator[DocRow]:
        for row, doc in enumerate(dataset.docs_iter(), 1):
            title, text = _text(doc)
            yield f"{where} document {row}", doc.doc_id, title, text

    def queries() -> Iterator[QueryRow]:
        for row, query in enumerate(dataset.queries_iter(), 1):
            yield f"{where} query {row}", query.query_id, _text(query)[1]

    def qrels() -> Iterator[QrelRow]:
        for row, qrel in enumerate(dataset.qrels_iter(), 1):
            yield f"{where} qrel {row}", qrel.query_id, qrel.doc_id, qrel.relevance

    return LayoutSource(IR_DATASETS, dataset_id, dataset_id, home, f"ir_datasets {module.__version__}",
                        f"{where} (documents)", guarded(docs()), f"{where} (queries)", guarded(queries()),
                        Judged(f"{where} (qrels)", {split: lambda: guarded(qrels())}))


__all__ = ["PREFIXES", "is_registered", "read_ir_datasets", "split_of", "strip_prefix"]
