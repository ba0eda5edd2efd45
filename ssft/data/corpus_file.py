"""A corpus to index and search (``ssft.index``, ``ssft-retrieve --corpus``), from whatever a user holds:

- a dataset name or a BEIR folder (its ``corpus.jsonl``; ``ssft.data.beir.load_dataset``);
- a ``.jsonl`` file (``.jsonl.gz``): BEIR's ``corpus.jsonl``, one ``{"_id", "title", "text"}`` object a line;
- a ``.tsv`` file (or any text file whose first line has a tab): ``id<TAB>text`` or ``id<TAB>title<TAB>text`` lines;
- a list of texts, with ``ids`` (one per text) or without (their positions 0, 1, ... are their ids, as
  sentence-transformers' ``util.semantic_search`` names a corpus list's entries).

Ids must fit a TREC run (no whitespace) and be unique; a bad line is an SsftError naming ``file:line``.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_file
from ssft.data.beir import Document, IRDataset, _read_corpus, _read_jsonl, load_dataset, text_lines


def _tsv_rows(path: Path):
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        cells = line.rstrip("\r\n").split("\t")
        if len(cells) not in (2, 3):
            raise SsftError(f"{path}:{lineno}: expected id<TAB>text or id<TAB>title<TAB>text")
        title, text = (cells[1], cells[2]) if len(cells) == 3 else ("", cells[1])
        yield f"{path}:{lineno}", cells[0].strip(), title, text


def read_corpus(corpus: str | Path | Sequence[str] | IRDataset, ids: Sequence[str] | None = None,
                where: str = "corpus") -> tuple[IRDataset, bool]:
    """(the corpus as a dataset without queries, True when its ids are list positions) of ``corpus`` (module
    docstring); ``where`` names the argument in messages."""
    if isinstance(corpus, IRDataset):
        return corpus, False
    if isinstance(corpus, (str, Path)):
        if ids is not None:
            raise SsftError(f"ids: for a corpus given as a list of texts; {where} {corpus} names its own ids")
        path = Path(corpus)
        if path.is_file():
            warnings: list[str] = []
            if path.name.endswith((".jsonl", ".jsonl.gz")):
                rows = ((f"{path}:{n}", o["_id"], o.get("title"), o.get("text")) for n, o in _read_jsonl(path))
            else:
                rows = _tsv_rows(path)
            documents = _read_corpus(rows, str(path), warnings, str)
            return IRDataset(path.stem, path, documents, {}, warnings), False
        return load_dataset(str(corpus)), False
    if isinstance(corpus, (bytes, bytearray)) or not isinstance(corpus, Sequence):
        raise SsftError(f"{where}: expected a dataset name, a BEIR folder, a .jsonl / .tsv file or a list of texts, "
                        f"got {type(corpus).__name__}")
    texts = list(corpus)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise SsftError(f"{where}: item {i} is {type(text).__name__}, not a text")
    positions = ids is None
    if ids is None:
        ids = [str(i) for i in range(len(texts))]
    elif isinstance(ids, (str, bytes)) or len(ids) != len(texts):
        raise SsftError(f"ids: expected one id per text of {where} ({len(texts)})")
    documents = _read_corpus(((f"{where}[{i}]", ident, "", text) for i, (ident, text) in enumerate(zip(ids, texts))),
                             where, [], str)
    return IRDataset("corpus", Path("."), documents, {}), positions


def write_corpus(dataset: IRDataset, path: Path) -> None:
    """The corpus as BEIR's ``corpus.jsonl`` at ``path`` (what ``read_corpus`` reads back)."""
    lines = "".join(json.dumps({"_id": d, "title": doc.title, "text": doc.text}, ensure_ascii=False) + "\n"
                    for d, doc in dataset.corpus.items())
    atomic_write_file(path, lambda tmp: Path(tmp).write_text(lines, encoding="utf-8"))


__all__ = ["Document", "read_corpus", "write_corpus"]
