"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv`` (``.gz`` and CRLF accepted).

A dataset is named by a folder path or by a folder name under ``$SSFT_DATA_HOME``.
"""
from __future__ import annotations

import gzip
import io
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ssft.errors import SsftError

logger = logging.getLogger(__name__)

Qrels = dict[str, dict[str, int]]


@dataclass
class Document:
    title: str
    text: str

    @property
    def full_text(self) -> str:
        return f"{self.title} {self.text}".strip() if self.title else self.text


@dataclass
class IRDataset:
    name: str
    path: Path
    corpus: dict[str, Document]
    queries: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    _qrels: dict[str, Qrels] = field(default_factory=dict)

    def splits(self) -> list[str]:
        qdir = self.path / "qrels"
        names = set()
        for p in qdir.glob("*.tsv*"):
            names.add(p.name.split(".tsv")[0])
        return sorted(names)

    def qrels(self, split: str) -> Qrels:
        if split not in self._qrels:
            self._qrels[split] = read_qrels(self._find_qrels(split), self)
        return self._qrels[split]

    def _find_qrels(self, split: str) -> Path:
        for name in (f"{split}.tsv", f"{split}.tsv.gz"):
            p = self.path / "qrels" / name
            if p.is_file():
                return p
        raise SsftError(f"{self.path}/qrels: no split '{split}' (have: {', '.join(self.splits()) or 'none'})")


def data_home() -> Path | None:
    home = os.environ.get("SSFT_DATA_HOME")
    return Path(home).expanduser() if home else None


BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"


def cache_home() -> Path:
    return Path(os.environ.get("SSFT_CACHE", Path.home() / ".cache" / "ssft")).expanduser()


def download_beir(name: str, timeout: float = 10.0) -> Path:
    """Fetch a BEIR dataset zip into ``$SSFT_CACHE/datasets/<name>`` (extracted atomically).
    Raises SsftError when there is no network or no such dataset."""
    import shutil
    import tempfile
    import urllib.error
    import urllib.request
    import zipfile

    target = cache_home() / "datasets" / name
    if (target / "corpus.jsonl").exists():
        return target
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("SSFT_OFFLINE") == "1":
        raise SsftError("offline (HF_HUB_OFFLINE/SSFT_OFFLINE)")
    url = BEIR_URL.format(name=name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
    try:
        archive = tmp / "data.zip"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response, open(archive, "wb") as fh:
                shutil.copyfileobj(response, fh)
        except (urllib.error.URLError, OSError) as err:
            raise SsftError(f"download of {url} failed: {getattr(err, 'reason', err)}") from None
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp / "x")
        found = [p.parent for p in (tmp / "x").rglob("corpus.jsonl*")]
        if not found:
            raise SsftError(f"{url}: the archive holds no corpus.jsonl")
        os.replace(found[0], target)
        return target
    except zipfile.BadZipFile:
        raise SsftError(f"{url}: not a zip archive") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def resolve_dataset(name_or_path: str) -> Path:
    """A BEIR folder path, a folder name under $SSFT_DATA_HOME, an earlier download in the ssft cache,
    or (only with a network) a download of the BEIR dataset of that name."""
    looked = []
    direct = Path(name_or_path).expanduser()
    looked.append(str(direct))
    if (direct / "corpus.jsonl").exists() or (direct / "corpus.jsonl.gz").exists():
        return direct
    home = data_home()
    if home is not None:
        candidate = home / name_or_path
        looked.append(str(candidate))
        if (candidate / "corpus.jsonl").exists() or (candidate / "corpus.jsonl.gz").exists():
            return candidate
    hint = "" if home is not None else " (SSFT_DATA_HOME is not set)"
    if "/" in name_or_path or "\\" in name_or_path or name_or_path.startswith("."):
        raise SsftError(f"dataset '{name_or_path}' not found: no BEIR folder (corpus.jsonl) at {' or '.join(looked)}{hint}")
    try:
        return download_beir(name_or_path)
    except SsftError as err:
        raise SsftError(
            f"dataset '{name_or_path}' not found: no BEIR folder (corpus.jsonl) at {' or '.join(looked)} or in "
            f"{cache_home() / 'datasets'}{hint}; BEIR download: {err}"
        ) from None


def _open_text(path: Path) -> io.TextIOBase:
    # newline=None: universal newlines, so CRLF files (official SciFact/NFCorpus qrels) read like LF ones
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline=None)
    return open(path, encoding="utf-8", newline=None)


def _existing(path: Path) -> Path:
    if path.is_file():
        return path
    gz = path.with_name(path.name + ".gz")
    if gz.is_file():
        return gz
    raise SsftError(f"missing file: {path}")


def _read_jsonl(path: Path):
    with _open_text(path) as fh:
        try:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    raise SsftError(f"{path}:{lineno}: invalid JSON: {err.msg}") from None
                if not isinstance(obj, dict) or "_id" not in obj:
                    raise SsftError(f"{path}:{lineno}: expected an object with an '_id' field")
                yield lineno, obj
        except (UnicodeDecodeError, OSError, EOFError) as err:
            raise SsftError(f"{path}: unreadable: {err}") from None


def load_dataset(name_or_path: str) -> IRDataset:
    path = resolve_dataset(name_or_path)
    warnings: list[str] = []
    corpus: dict[str, Document] = {}
    corpus_file = _existing(path / "corpus.jsonl")
    empty_docs = 0
    for lineno, obj in _read_jsonl(corpus_file):
        doc_id = str(obj["_id"])
        if doc_id in corpus:
            raise SsftError(f"{corpus_file}:{lineno}: duplicate document id '{doc_id}'")
        title, text = str(obj.get("title") or ""), str(obj.get("text") or "")
        if not (title.strip() or text.strip()):
            empty_docs += 1
        corpus[doc_id] = Document(title, text)
    if not corpus:
        raise SsftError(f"{corpus_file}: no documents")
    if empty_docs:
        warnings.append(f"{corpus_file}: {empty_docs} documents with empty title and text")
    queries: dict[str, str] = {}
    queries_file = _existing(path / "queries.jsonl")
    for lineno, obj in _read_jsonl(queries_file):
        qid = str(obj["_id"])
        if qid in queries:
            raise SsftError(f"{queries_file}:{lineno}: duplicate query id '{qid}'")
        queries[qid] = str(obj.get("text") or "")
    for w in warnings:
        logger.warning(w)
    return IRDataset(path.name, path, corpus, queries, warnings)


def read_qrels(path: Path, dataset: IRDataset | None = None) -> Qrels:
    """Read a BEIR qrels TSV (header optional). Rows naming unknown ids are dropped with a counted warning."""
    qrels: Qrels = {}
    unknown_q = unknown_d = duplicates = 0
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if lineno == 1 and parts[0].strip().lower() in ("query-id", "query_id", "qid"):
                continue
            if len(parts) == 4:  # TREC qrels: qid 0 docid rel
                parts = [parts[0], parts[2], parts[3]]
            if len(parts) != 3:
                parts = line.split()
                if len(parts) == 4:
                    parts = [parts[0], parts[2], parts[3]]
            if len(parts) != 3:
                raise SsftError(f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>score'")
            qid, did, score = (p.strip() for p in parts)
            try:
                rel = int(float(score))
            except ValueError:
                raise SsftError(f"{path}:{lineno}: score '{score}' is not a number") from None
            if dataset is not None:
                if qid not in dataset.queries:
                    unknown_q += 1
                    continue
                if did not in dataset.corpus:
                    unknown_d += 1
                    continue
            if did in qrels.get(qid, {}):
                duplicates += 1
            qrels.setdefault(qid, {})[did] = rel
    if not qrels:
        raise SsftError(f"{path}: no usable judgments")
    for count, what in ((unknown_q, "unknown query ids"), (unknown_d, "unknown document ids"), (duplicates, "duplicate rows")):
        if count:
            msg = f"{path}: {count} rows with {what} (skipped)" if "unknown" in what else f"{path}: {count} {what} (last one kept)"
            logger.warning(msg)
            if dataset is not None:
                dataset.warnings.append(msg)
    if dataset is not None:
        empty = [q for q in qrels if not dataset.queries[q].strip()]
        if empty:
            raise SsftError(f"{path}: query '{empty[0]}' has empty text in {dataset.path}/queries.jsonl ({len(empty)} such queries)")
    return qrels
