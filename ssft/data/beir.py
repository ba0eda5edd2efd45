"""Datasets: BEIR folders (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``; ``.gz`` and CRLF accepted), and
the same content read from elsewhere (``load_dataset``):

- a BEIR folder, by path or by folder name under ``$SSFT_DATA_HOME`` (a bare name found nowhere: the BEIR download);
- a Hugging Face Hub dataset in the BeIR layout (``BeIR/nfcorpus`` + ``BeIR/nfcorpus-qrels``) or the MTEB layout
  (``mteb/nfcorpus``), or a local copy of such a repository (``ssft.data.hub_layouts``);
- an ``ir_datasets`` id (``beir/nfcorpus/test``, ``irds:cranfield``; ``ssft.data.irds``).

Whatever the source, the ``IRDataset`` is the same (ids, texts, judgements) and is checked the same way; its
``identity`` (layout, id, revision, path: ``dataset_identity``) says where it came from.
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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ssft.core.errors import SsftError
from ssft.core.paths import cache_home, data_home
from ssft.data.hub_layouts import BEIR_FOLDER, DocRow, Judged, LayoutSource, QrelRow, QueryRow, hub_id, is_hub_copy, read_hub
from ssft.data.irds import is_registered, read_ir_datasets, strip_prefix

logger = logging.getLogger(__name__)

Qrels = dict[str, dict[str, int]]


@dataclass
class Document:
    title: str
    text: str

    @property
    def full_text(self) -> str:
        return f"{self.title} {self.text}".strip() if self.title else self.text


class DocumentTexts(Sequence[str]):
    """The ``full_text`` of each of ``documents``, built when read by position (a corpus of millions sampled
    without building every text)."""

    def __init__(self, documents: list[Document]):
        self._documents = documents

    def __len__(self) -> int:
        return len(self._documents)

    def __getitem__(self, position):  # noqa: ANN001 -- an index or a slice, as a list takes
        if isinstance(position, slice):
            return [d.full_text for d in self._documents[position]]
        return self._documents[position].full_text


@dataclass
class IRDataset:
    """A corpus, its queries and their judgements per split. A BEIR folder's qrels are read from ``path/qrels`` when
    a split is first asked for; a dataset read from elsewhere holds them in ``judged`` (read as lazily). ``identity``:
    where it came from (``dataset_identity``)."""

    name: str
    path: Path
    corpus: dict[str, Document]
    queries: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    _qrels: dict[str, Qrels] = field(default_factory=dict)
    judged: Judged | None = None
    identity: dict[str, Any] = field(default_factory=dict)
    queries_where: str = ""  # how a message names where the queries were read (a judged query with empty text)

    def splits(self) -> list[str]:
        if self.judged is not None:
            return self.judged.names()
        qdir = self.path / "qrels"
        names = set()
        for p in qdir.glob("*.tsv*"):
            names.add(p.name.split(".tsv")[0])
        return sorted(names)

    def qrels(self, split: str) -> Qrels:
        if self.judged is not None:
            return self._judged_qrels(split)
        if split not in self._qrels:
            self._qrels[split] = read_qrels(self._find_qrels(split), self)
        return self._qrels[split]

    def with_corpus(self, document_ids: set[str]) -> IRDataset:
        """A copy holding only the documents of ``document_ids`` (in the corpus's order); this dataset is unchanged.
        The qrels already read keep every query, with the judgements of the documents kept only (a query may be
        left with none); a split read later skips the others, counted, as it skips unknown ids."""
        corpus = {d: doc for d, doc in self.corpus.items() if d in document_ids}
        qrels = {split: {q: {d: g for d, g in rels.items() if d in corpus} for q, rels in table.items()}
                 for split, table in self._qrels.items()}
        return replace(self, corpus=corpus, _qrels=qrels, warnings=list(self.warnings))

    def _judged_qrels(self, split: str) -> Qrels:
        name = self.judged.find(split)
        if name is None:
            raise SsftError(f"{self.judged.where}: no split '{split}' (have: {', '.join(self.splits()) or 'none'})")
        if name not in self._qrels:
            where = f"{self.judged.where} split {name}"
            self._qrels[name] = _collect_judgements(_grade_rows(self.judged.splits[name]()), where, self,
                                                    self.queries_where or "the queries")
        return self._qrels[name]

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
    return _checked_id_at(str(value), what, f"{path}:{lineno}")


def _checked_id_at(value, what: str, where: str) -> str:
    """``_checked_id`` for a row ``where`` names (a file's line, a hub dataset's row)."""
    ident = str(value)
    if not ident or _WHITESPACE.search(ident):
        raise SsftError(f"{where}: {what} id {ident!r} {'is empty' if not ident else 'contains whitespace'}: "
                        f"TREC run files are whitespace-separated, so ssft could not write it to a run file and read "
                        f"it back; rename the id (e.g. spaces to '_') here and in the qrels")
    return ident


def load_dataset(name_or_path: str) -> IRDataset:
    """The dataset ``name_or_path`` names (module docstring): a BEIR folder (by path, or by name under
    ``$SSFT_DATA_HOME``), a local copy of a hub repository, an ``ir_datasets`` id, a hub id, or a BEIR download."""
    source = _layout_source(name_or_path)
    if source is not None:
        return _from_source(source)
    path = resolve_dataset(name_or_path)
    warnings: list[str] = []
    corpus_file = _existing(path / "corpus.jsonl")
    corpus = _read_corpus(((f"{corpus_file}:{n}", o["_id"], o.get("title"), o.get("text"))
                           for n, o in _read_jsonl(corpus_file)), str(corpus_file), warnings, str)
    queries_file = _existing(path / "queries.jsonl")
    queries = _read_queries(((f"{queries_file}:{n}", o["_id"], o.get("text")) for n, o in _read_jsonl(queries_file)), str)
    for w in warnings:
        logger.warning(w)
    identity = {"layout": BEIR_FOLDER, "id": name_or_path, "revision": None, "path": str(path.resolve())}
    return IRDataset(path.name, path, corpus, queries, warnings, identity=identity, queries_where=str(queries_file))


def _layout_source(name_or_path: str) -> LayoutSource | None:
    """The reader of a dataset that is not a BEIR folder, or None (a BEIR folder, or a name ``resolve_dataset``
    answers: found, downloaded or refused as today). A folder holding a valid BEIR layout is always read as one."""
    for folder in _candidate_folders(name_or_path):
        if not folder.is_dir():
            continue
        has_corpus = (folder / "corpus.jsonl").exists() or (folder / "corpus.jsonl.gz").exists()
        if has_corpus and any((folder / "qrels").glob("*.tsv*")):
            return None  # a BEIR folder, whatever else it holds
        if is_hub_copy(folder):  # an MTEB copy holds corpus.jsonl too, its qrels as qrels/<split>.jsonl
            return read_hub(name_or_path, local=folder)
        if has_corpus:
            return None
    irds_id = strip_prefix(name_or_path)
    if irds_id is not None:
        return read_ir_datasets(irds_id)
    if "/" in name_or_path and not name_or_path.startswith((".", "/", "~")) and "\\" not in name_or_path:
        if is_registered(name_or_path):
            return read_ir_datasets(name_or_path)
        if hub_id(name_or_path) is not None and not Path(name_or_path.partition("@")[0]).expanduser().exists():
            try:
                return read_hub(name_or_path)
            except SsftError as err:  # a mistyped relative path reads like a hub id: say where else ssft looked
                looked = " or ".join(str(f) for f in _candidate_folders(name_or_path))
                raise SsftError(f"{err}; no dataset folder at {looked} either") from None
    return None


def _candidate_folders(name_or_path: str) -> list[Path]:
    folders = [Path(name_or_path).expanduser()]
    if data_home() is not None:
        folders.append(data_home() / name_or_path)
    return folders


def field_text(value: Any, what: str, where: str) -> str:
    """A title or text field as a string: missing / null is empty, a number is written out; a list or an object is
    refused (its Python repr would be ranked as the text)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SsftError(f"{where}: the {what} is a JSON {type(value).__name__}, not a string")
    return str(value)


def _read_corpus(rows: Iterable[DocRow], where: str, warnings: list[str], as_id) -> dict[str, Document]:
    """Documents from (row, id, title, text) rows: ids checked and unique, empty documents counted, none refused."""
    corpus: dict[str, Document] = {}
    empty_docs = 0
    for row, ident, title, text in rows:
        doc_id = _checked_id_at(as_id(ident), "document", row)
        if doc_id in corpus:
            raise SsftError(f"{row}: duplicate document id '{doc_id}'")
        title, text = field_text(title, "title", row), field_text(text, "text", row)
        if not (title.strip() or text.strip()):
            empty_docs += 1
        corpus[doc_id] = Document(title, text)
    if not corpus:
        raise SsftError(f"{where}: no documents")
    if empty_docs:
        warnings.append(f"{where}: {empty_docs} documents with empty title and text")
    return corpus


def _read_queries(rows: Iterable[QueryRow], as_id) -> dict[str, str]:
    queries: dict[str, str] = {}
    for row, ident, text in rows:
        qid = _checked_id_at(as_id(ident), "query", row)
        if qid in queries:
            raise SsftError(f"{row}: duplicate query id '{qid}'")
        queries[qid] = field_text(text, "text", row)
    return queries


def _hub_id(value) -> str:
    """An id column's value: a string, or an integer id (``datasets`` reads numeric TSV ids as int64); None: empty."""
    return "" if value is None else str(value)


def _from_source(source: LayoutSource) -> IRDataset:
    """An ``IRDataset`` from a hub / ir_datasets reader, checked as a BEIR folder is."""
    warnings: list[str] = []
    corpus = _read_corpus(source.corpus, source.corpus_where, warnings, _hub_id)
    queries = _read_queries(source.queries, _hub_id)
    if not queries:
        raise SsftError(f"{source.queries_where}: no queries")
    for w in warnings:
        logger.warning(w)
    return IRDataset(source.name, source.path, corpus, queries, warnings, judged=source.judged,
                     identity=source.identity(), queries_where=source.queries_where)


def dataset_identity(dataset: IRDataset) -> dict[str, Any]:
    """Where a dataset came from, for run_info.json and reports: ``layout`` (beir-folder, hub-beir, hub-mteb,
    ir_datasets), ``id`` (as named), ``revision`` (the hub commit / local copy's data-file hash datasets resolved,
    the ir_datasets version; None for a BEIR folder), ``path`` (the folder, or the cache it was read from) and, for the
    BeIR layout, the qrels companion and its revision."""
    if not dataset.identity:  # an IRDataset built by hand
        return {"layout": BEIR_FOLDER, "id": dataset.name, "revision": None, "path": str(dataset.path)}
    return dict(dataset.identity)


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
    return _grade_at(f"{path}:{line}", text)


def _grade_at(where: str, text: str) -> int:
    """A relevance grade: a whole number (written 2 or 2.0), or an SsftError naming the row."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise SsftError(f"{where}: score '{text}' is not a number") from None
    if not math.isfinite(value) or value != int(value):
        raise SsftError(f"{where}: score '{text}' is not an integer relevance grade (0, 1, 2, ...)")
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

    def judgements() -> Iterator[tuple[str, str, int]]:
        for lineno, cells in rows:
            if len(cells) != width:
                raise SsftError(f"{path}:{lineno}: expected {shape}, got {len(cells)} columns")
            yield cells[q_col], cells[d_col], _grade(path, lineno, cells[g_col])

    queries_where = f"{dataset.path}/queries.jsonl" if dataset is not None else ""
    return _collect_judgements(judgements(), str(path), dataset, queries_where)


def _grade_rows(rows: Iterable[QrelRow]) -> Iterator[tuple[str, str, int]]:
    """(query id, document id, grade) of a hub / ir_datasets reader's rows, each checked (ids, whole-number grade)."""
    for where, qid, did, grade in rows:
        yield (_checked_id_at(_hub_id(qid), "query", where), _checked_id_at(_hub_id(did), "document", where),
               _grade_at(where, grade))


def _collect_judgements(rows: Iterable[tuple[str, str, int]], where: str, dataset: IRDataset | None,
                        queries_where: str) -> Qrels:
    """Qrels from (query id, document id, grade) rows, whatever they were read from: rows naming ids the dataset lacks
    are dropped and counted (a warning, kept in ``dataset.warnings``), a repeated pair keeps its last grade (counted);
    none left, or a judged query with empty text, is an SsftError naming ``where`` (the file, or the hub split)."""
    qrels: Qrels = {}
    unknown_q = unknown_d = duplicates = 0
    for qid, did, rel in rows:
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
        raise SsftError(f"{where}: no usable judgments")
    for count, what in ((unknown_q, "unknown query ids"), (unknown_d, "unknown document ids"), (duplicates, "duplicate rows")):
        if count:
            msg = (f"{where}: {count} rows with {what} (skipped)" if "unknown" in what
                   else f"{where}: {count} {what} (last one kept)")
            logger.warning(msg)
            if dataset is not None:
                dataset.warnings.append(msg)
    if dataset is not None:
        empty = [q for q in qrels if not dataset.queries[q].strip()]
        if empty:
            raise SsftError(f"{where}: query '{empty[0]}' has empty text in {queries_where} ({len(empty)} such queries)")
    return qrels
