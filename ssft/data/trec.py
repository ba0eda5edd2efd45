"""TREC run files: ``qid Q0 docid rank score tag``, read and written."""
from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from pathlib import Path

from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_text
from ssft.data.beir import text_lines

logger = logging.getLogger(__name__)

Run = dict[str, dict[str, float]]


def read_run(path: str | Path) -> Run:
    """A TREC run file (UTF-8, ``.gz`` read through; a byte order mark dropped). Refused with file:line: a row without 6
    columns, a score that is not a finite number, a document listed twice for one query.

    Args:
        path: the run file (``qid Q0 docid rank score tag`` lines).

    Returns:
        ``{query id: {document id: score}}``.
    """
    path = Path(path)
    if not path.is_file():
        raise SsftError(f"run file not found: {path}")
    run: Run = {}
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 6:
            raise SsftError(f"{path}:{lineno}: expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}")
        qid, _, did, _, text, _ = parts
        try:
            score = float(text)
        except ValueError:
            raise SsftError(f"{path}:{lineno}: score '{text}' is not a number") from None
        if not math.isfinite(score):
            raise SsftError(f"{path}:{lineno}: score '{text}' is not a finite number (a run ranks by its scores)")
        docs = run.setdefault(qid, {})
        if did in docs:
            raise SsftError(f"{path}:{lineno}: document '{did}' is listed twice for query '{qid}' (lines "
                            f"{_first_row(path, qid, did)} and {lineno}); a run lists each document once per query")
        docs[did] = score
    if not run:
        raise SsftError(f"{path}: empty run file")
    return run


def _first_row(path: Path, qid: str, did: str) -> int | str:
    """The line of a run file's first row for (qid, did)."""
    for lineno, line in text_lines(path):
        parts = line.split()
        if len(parts) == 6 and parts[0] == qid and parts[2] == did:
            return lineno
    return "?"


def restrict_to_corpus(run: Run, corpus: Mapping[str, object], source: str | Path, warnings: list[str] | None = None) -> Run:
    """``run`` without the documents ``corpus`` lacks (a reranker has no text to score them, the qrels cannot judge
    them), and without the queries left with none. Their count is logged once and appended to ``warnings`` (e.g.
    ``dataset.warnings``, which ssft-train writes to run_info.json). A run none of whose documents is in the corpus
    (a run for another dataset) is an SsftError naming ``source``."""
    kept: Run = {}
    rows = dropped = 0
    example = None
    for qid, docs in run.items():
        inside = {did: score for did, score in docs.items() if did in corpus}
        rows += len(docs)
        if len(inside) < len(docs):
            dropped += len(docs) - len(inside)
            example = example or next(did for did in docs if did not in corpus)
        if inside:
            kept[qid] = inside
    if rows and not kept:
        raise SsftError(f"{source}: none of the run's {rows} documents is in the dataset's corpus (e.g. '{example}'): "
                        f"is it a run for another dataset?")
    if dropped:
        message = (f"{source}: {dropped} of {rows} rows name documents not in the corpus (e.g. '{example}'); left out "
                   f"(not reranked, not in the first stage's metrics)")
        if warnings is None or message not in warnings:
            logger.warning(message)
            if warnings is not None:
                warnings.append(message)
    return kept


def top_k(run: Run, k: int) -> Run:
    return {q: dict(sorted(docs.items(), key=lambda kv: (-kv[1], kv[0]))[:k]) for q, docs in run.items()}


_WHITESPACE = re.compile(r"\s")


def format_run(run: Run, tag: str = "ssft") -> str:
    tag = "_".join(tag.split()) or "ssft"  # a tag with spaces (a run named after a file 'my run.trec') would add columns
    lines = []
    for qid in sorted(run):
        ranked = sorted(run[qid].items(), key=lambda kv: (-kv[1], kv[0]))
        lines.extend(f"{qid} Q0 {did} {rank} {score:.6f} {tag}" for rank, (did, score) in enumerate(ranked, 1))
    return "\n".join(lines) + "\n"


def write_run(run: Run, path: str | Path, tag: str = "ssft") -> None:
    """Write ``run`` as a TREC run file; an id that it could not hold (empty, or with whitespace) is an SsftError."""
    for qid, docs in run.items():
        bad = [qid] if not qid or _WHITESPACE.search(qid) else [d for d in docs if not d or _WHITESPACE.search(d)][:1]
        if bad:
            what = "query" if bad[0] == qid else f"query '{qid}': document"
            raise SsftError(f"{path}: {what} id {bad[0]!r} is empty or contains whitespace: a TREC run file is "
                            f"whitespace-separated and could not be read back; rename the id in the dataset")
    atomic_write_text(Path(path), format_run(run, tag))
