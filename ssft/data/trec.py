"""TREC run files: ``qid Q0 docid rank score tag``, read and written."""
from __future__ import annotations

from pathlib import Path

from ssft.errors import SsftError
from ssft.io import atomic_write_text

Run = dict[str, dict[str, float]]


def read_run(path: str | Path) -> Run:
    path = Path(path)
    if not path.is_file():
        raise SsftError(f"run file not found: {path}")
    run: Run = {}
    with open(path, encoding="utf-8", newline=None) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 6:
                raise SsftError(f"{path}:{lineno}: expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}")
            qid, _, did, _, score, _ = parts
            try:
                run.setdefault(qid, {})[did] = float(score)
            except ValueError:
                raise SsftError(f"{path}:{lineno}: score '{score}' is not a number") from None
    if not run:
        raise SsftError(f"{path}: empty run file")
    return run


def top_k(run: Run, k: int) -> Run:
    return {q: dict(sorted(docs.items(), key=lambda kv: (-kv[1], kv[0]))[:k]) for q, docs in run.items()}


def format_run(run: Run, tag: str = "ssft") -> str:
    lines = []
    for qid in sorted(run):
        ranked = sorted(run[qid].items(), key=lambda kv: (-kv[1], kv[0]))
        lines.extend(f"{qid} Q0 {did} {rank} {score:.6f} {tag}" for rank, (did, score) in enumerate(ranked, 1))
    return "\n".join(lines) + "\n"


def write_run(run: Run, path: str | Path, tag: str = "ssft") -> None:
    atomic_write_text(Path(path), format_run(run, tag))
