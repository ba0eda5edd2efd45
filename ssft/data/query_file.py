"""A file of queries to rank, given beside a dataset (``ssft-rerank --queries FILE``): users' own queries, with no
relevance judgements.

Three forms, told apart by the file, never by guessing line by line:

- ``.jsonl`` (``.jsonl.gz``): BEIR's ``queries.jsonl``, one ``{"_id": ..., "text": ...}`` object a line (also a
  file under another name, e.g. ``queries.json``, whose first line is such an object; a ``.json`` file is read only so);
- a text file whose first line holds a tab: ``id<TAB>text`` on every line (the TSV of MS MARCO's queries);
- any other text file: one query text a line, its id its line number (``1``, ``2`` ...), as a TREC run then names it.

Blank lines are skipped (they keep their number in the third form). Ids must fit a TREC run (no whitespace) and be
unique; a bad line is an SsftError naming ``file:line``.
"""
from __future__ import annotations

import json
from pathlib import Path

from ssft.core.errors import SsftError
from ssft.data.beir import _checked_id, _read_jsonl, field_text, text_lines


def _json_object_with_id(line: str) -> bool:
    """Whether ``line`` is a JSON object with an ``_id`` (a queries.jsonl line)."""
    if not line.lstrip().startswith("{"):
        return False
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and "_id" in obj


def read_query_file(path: str | Path) -> dict[str, str]:
    """Query id → text of a query file (module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise SsftError(f"--queries {path}: no such file (expected queries.jsonl, id<TAB>text lines, or one query a line)")
    queries: dict[str, str] = {}

    def add(qid: str, text: str, where: str) -> None:
        if qid in queries:
            raise SsftError(f"{where}: duplicate query id '{qid}'")
        if not text.strip():
            raise SsftError(f"{where}: query '{qid}' has no text")
        queries[qid] = text

    lines = [(n, line) for n, line in text_lines(path) if line.strip()]
    if path.name.endswith((".jsonl", ".jsonl.gz")) or (lines and _json_object_with_id(lines[0][1])):
        # BEIR's queries.jsonl, also when saved under another name (queries.json): never one text a line
        for lineno, obj in _read_jsonl(path):
            add(_checked_id(obj["_id"], "query", path, lineno), field_text(obj.get("text"), "text", f"{path}:{lineno}"),
                f"{path}:{lineno}")
    elif path.name.endswith((".json", ".json.gz")):
        raise SsftError(f"--queries {path}: a .json file is read as BEIR's queries.jsonl (one {{\"_id\": ..., "
                        f"\"text\": ...}} object a line); its first line is not such an object")
    else:
        tsv = bool(lines) and "\t" in lines[0][1]
        for lineno, line in lines:
            if tsv:
                qid, tab, text = line.partition("\t")
                if not tab:
                    raise SsftError(f"{path}:{lineno}: expected id<TAB>text (the first line has a tab, so every line "
                                    f"does)")
                add(_checked_id(qid.strip(), "query", path, lineno), text.strip(), f"{path}:{lineno}")
            else:
                add(str(lineno), line.strip(), f"{path}:{lineno}")
    if not queries:
        raise SsftError(f"{path}: no queries")
    return queries


__all__ = ["read_query_file"]
