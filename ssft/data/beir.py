"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv`` (``.gz`` and CRLF accepted).

A dataset is named by a folder path or by a folder name under ``$SSFT_DATA_HOME``.
"""
from __future__ import annotations

import gzip
import io
import json
import logging
import math
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ssft.core.errors import SsftError
from ssft.core.paths import cache_home, data_home

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


BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"


def download_beir(name: str, timeout: float = 10.0) -> Path:
    """Fetch a BEIR dataset zip into ``$SSFT_CACHE/datasets/<name>`` (extracted atomically).
    Raises SsftError when there is no network or no such dataset."""

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
    a_file = next((p for p in map(Path, looked) if p.is_file()), None)  # the name as given, then under $SSFT_DATA_HOME
    not_a_folder = a_file and SsftError(f"dataset '{name_or_path}': {a_file} is a file, not a BEIR folder (a folder holding "
                                        f"corpus.jsonl, queries.jsonl and qrels/){_file_hint(a_file)}")
    if "/" in name_or_path or "\\" in name_or_path or name_or_path.startswith("."):
        raise not_a_folder or SsftError(f"dataset '{name_or_path}' not found: no BEIR folder (corpus.jsonl) at "
                                        f"{' or '.join(looked)}{hint}")
    try:
        return download_beir(name_or_path)
    except SsftError as err:
        if not_a_folder:
            raise not_a_folder from None
        raise SsftError(
            f"dataset '{name_or_path}' not found: no BEIR folder (corpus.jsonl) at {' or '.join(looked)} or in "
            f"{cache_home() / 'datasets'}{hint}; BEIR download: {err}"
        ) from None


def _file_hint(path: Path) -> str:
    """What to pass instead of a file given as a dataset."""
    if path.name.split(".")[0] in ("corpus", "queries") or path.parent.name == "qrels":
        folder = path.parent.parent if path.parent.name == "qrels" else path.parent
        return f"; pass its folder {folder}"
    if path.suffix in (".zip", ".gz", ".tar", ".tgz"):
        return "; extract the archive and pass the extracted folder"
    return ""


def _open_text(path: Path) -> io.TextIOBase:
    # newline=None: universal newlines, so CRLF files (official SciFact/NFCorpus qrels) read like LF ones;
    # utf-8-sig: a byte order mark before the first line (Windows editors write one) is dropped, not read as text
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline=None)
    return open(path, encoding="utf-8-sig", newline=None)


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text without its newline) for each line of a UTF-8 text file, ``.gz`` read through: a byte order
    mark before the first line is dropped, CRLF and CR end lines like LF. A line that is not UTF-8, or a ``.gz`` that
    is truncated or damaged, is an SsftError naming the file and the line."""
    path = Path(path)
    try:
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, 1):
                yield lineno, line.removesuffix("\n")
    except (UnicodeDecodeError, EOFError, OSError, zlib.error) as err:
        raise SsftError(_unreadable(path, err)) from None


def _unreadable(path: Path, err: Exception) -> str:
    """The one-line message for a text file that failed to read: file:line of the damage where it can be found."""
    if isinstance(err, (UnicodeDecodeError, EOFError, zlib.error, gzip.BadGzipFile)):
        found = _first_damage(path)
        if found is not None:
            return f"{path}:{found[0]}: {found[1]}"
    return f"{path}: unreadable: {err}"


def _first_damage(path: Path) -> tuple[int, str] | None:
    """(line, what) of the first line that is not UTF-8, or where a ``.gz`` stream breaks off; None when the bytes are
    fine. Lines counted at LF as the text reader counts them (files ending lines with a lone CR aside)."""
    lineno = 0
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    if lineno == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
                        return lineno, "UTF-16 text, not UTF-8; save the file as UTF-8"
                    return lineno, (f"not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1}); "
                                    f"save the file as UTF-8")
    except EOFError:
        return lineno + 1, "the gzip data ends early (a truncated file); download or compress it again"
    except (OSError, zlib.error) as err:
        return lineno + 1, f"damaged gzip data ({err}); download or compress it again"
    return None


def _existing(path: Path) -> Path:
    if path.is_file():
        return path
    gz = path.with_name(path.name + ".gz")
    if gz.is_file():
        return gz
    raise SsftError(f"missing file: {path}")


def _read_jsonl(path: Path):
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise SsftError(f"{path}:{lineno}: invalid JSON: {err.msg}") from None
        if not isinstance(obj, dict) or "_id" not in obj:
            raise SsftError(f"{path}:{lineno}: expected an object with an '_id' field")
        yield lineno, obj


_WHITESPACE = re.compile(r"\s")


def _checked_id(value, what: str, path: Path, lineno: int) -> str:
    """An ``_id`` as a string; one a TREC run file cannot hold (empty, or with whitespace) is an SsftError."""
    ident = str(value)
    if not ident or _WHITESPACE.search(ident):
        raise SsftError(f"{path}:{lineno}: {what} id {ident!r} {'is empty' if not ident else 'contains whitespace'}: "
                        f"TREC run files are whitespace-separated, so ssft could not write it to a run file and read "
                        f"it back; rename the id (e.g. spaces to '_') here and in the qrels")
    return ident


def load_dataset(name_or_path: str) -> IRDataset:
    path = resolve_dataset(name_or_path)
    warnings: list[str] = []
    corpus: dict[str, Document] = {}
    corpus_file = _existing(path / "corpus.jsonl")
    empty_docs = 0
    for lineno, obj in _read_jsonl(corpus_file):
        doc_id = _checked_id(obj["_id"], "document", corpus_file, lineno)
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
        qid = _checked_id(obj["_id"], "query", queries_file, lineno)
        if qid in queries:
            raise SsftError(f"{queries_file}:{lineno}: duplicate query id '{qid}'")
        queries[qid] = str(obj.get("text") or "")
    for w in warnings:
        logger.warning(w)
    return IRDataset(path.name, path, corpus, queries, warnings)


# header names of the three columns a qrels file needs (BEIR writes query-id, corpus-id, score)
QUERY_COLUMNS = ("query-id", "query_id", "queryid", "qid", "query")
DOCUMENT_COLUMNS = ("corpus-id", "corpus_id", "corpusid", "doc-id", "doc_id", "docid", "docno", "document-id", "document_id")
GRADE_COLUMNS = ("score", "relevance", "rel", "grade", "label", "judgment")


def _qrels_cells(line: str) -> list[str]:
    """A qrels line's columns: tab-separated, or (no tab on the line) whitespace-separated; trailing empty ones dropped."""
    cells = [c.strip() for c in (line.split("\t") if "\t" in line else line.split())]
    while cells and not cells[-1]:
        cells.pop()
    return cells


def _is_header(cells: list[str]) -> bool:
    """A first line naming columns: a known column name among its cells, and no number (a row's grade is one)."""
    names = {*QUERY_COLUMNS, *DOCUMENT_COLUMNS, *GRADE_COLUMNS}
    if not any(c.lower() in names for c in cells):
        return False
    for cell in cells:
        try:
            float(cell)
            return False
        except ValueError:
            pass
    return True


def _qrels_layout(path: Path, header: tuple[int, list[str]] | None, rows: list[tuple[int, list[str]]]):
    """(query column, document column, grade column, columns per row, what a row looks like) of a qrels file.

    With a header, the header names the columns (other columns ignored). Without one, 3 columns are
    ``query-id corpus-id score`` and 4 are TREC ``qid iter docid rel`` only when the file is consistently TREC (the
    second column the same on every row): anything else is refused rather than guessed."""
    if header is not None:
        line, names = header
        lower = [n.lower() for n in names]
        found = []
        for choices in (QUERY_COLUMNS, DOCUMENT_COLUMNS, GRADE_COLUMNS):
            index = next((i for i, n in enumerate(lower) if n in choices), None)
            if index is None:
                raise SsftError(f"{path}:{line}: the header '{'<TAB>'.join(names)}' names no {choices[0]} column (one of "
                                f"{', '.join(choices)}); a qrels header names query-id, corpus-id and score")
            found.append(index)
        return (*found, len(names), f"'{'<TAB>'.join(names)}' (the header, line {line})")
    first_line, first = rows[0]
    if len(first) == 4:
        iteration = first[1]
        for line, cells in rows:
            if len(cells) == 4 and cells[1] != iteration:
                raise SsftError(
                    f"{path}:{line}: 4 columns and no header, and not consistently TREC 'qid iter docid rel' (the second "
                    f"column is '{cells[1]}' here, '{iteration}' on line {first_line}): add a header line naming the "
                    f"columns, e.g. 'query-id<TAB>corpus-id<TAB>score<TAB>...'")
        if len(rows) == 1 and iteration.upper() not in ("0", "Q0"):
            raise SsftError(f"{path}:{first_line}: 4 columns and no header: TREC 'qid iter docid rel' or 'query-id corpus-id "
                            f"score ...'? add a header line naming the columns, e.g. 'query-id<TAB>corpus-id<TAB>score<TAB>...'")
        return 0, 2, 3, 4, "TREC 'qid iter docid rel' (as line 1)"
    return 0, 1, 2, 3, "'query-id<TAB>corpus-id<TAB>score'"


def _grade(path: Path, line: int, text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise SsftError(f"{path}:{line}: score '{text}' is not a number") from None
    if not math.isfinite(value) or value != int(value):
        raise SsftError(f"{path}:{line}: score '{text}' is not an integer relevance grade (0, 1, 2, ...)")
    return int(value)


def read_qrels(path: Path, dataset: IRDataset | None = None) -> Qrels:
    """Read a qrels file: BEIR TSV (header optional; with one, the header names the columns) or TREC
    ``qid iter docid rel``. Rows naming unknown ids are dropped with a counted warning."""
    header: tuple[int, list[str]] | None = None
    rows: list[tuple[int, list[str]]] = []
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        cells = _qrels_cells(line)
        if header is None and not rows and _is_header(cells):
            header = (lineno, cells)
        else:
            rows.append((lineno, cells))
    if not rows:
        raise SsftError(f"{path}: no usable judgments")
    q_col, d_col, g_col, width, shape = _qrels_layout(path, header, rows)
    qrels: Qrels = {}
    unknown_q = unknown_d = duplicates = 0
    for lineno, cells in rows:
        if len(cells) != width:
            raise SsftError(f"{path}:{lineno}: expected {shape}, got {len(cells)} columns")
        qid, did = cells[q_col], cells[d_col]
        rel = _grade(path, lineno, cells[g_col])
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
            msg = (f"{path}: {count} rows with {what} (skipped)" if "unknown" in what
                   else f"{path}: {count} {what} (last one kept)")
            logger.warning(msg)
            if dataset is not None:
                dataset.warnings.append(msg)
    if dataset is not None:
        empty = [q for q in qrels if not dataset.queries[q].strip()]
        if empty:
            raise SsftError(f"{path}: query '{empty[0]}' has empty text in {dataset.path}/queries.jsonl "
                            f"({len(empty)} such queries)")
    return qrels
