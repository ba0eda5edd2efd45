"""Output folders: what an ssft CLI may write into, and what ``--overwrite`` may remove.

The rule (README, "Output folders"):

- A CLI writes only into a folder that is new, empty, or already its own. A folder is a tool's own when it holds the
  manifest ``.ssft-outputs.json`` that the tool wrote there (or, for folders written before manifests existed, when
  everything in it carries a name the tool writes and one of them marks its output, e.g. ``metrics.json``).
  Anything else -- ``.``, a project, a dataset folder, ``/``, another tool's output -- is refused before anything
  is written.
- The manifest names the tool and the patterns of what it writes (``metrics.json``, ``run.*.trec``, ``model`` ...);
  a file or folder a user adds to a run folder under any other name is never touched. ``--overwrite`` removes only
  the entries that match those patterns.
- One process at a time: a lock file (``.ssft.lock``, the ``filelock`` package) is held for the whole run; a second
  process on the same folder is refused in one line.
- ``metrics.json`` marks a finished run: it is removed first and written last, so an interrupted run never leaves a
  folder that looks finished with results of two runs.
"""
from __future__ import annotations

import errno
import fnmatch
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_json

MANIFEST = ".ssft-outputs.json"
LOCK = ".ssft.lock"

# what ssft-train writes into its output folder (logs: only when ssft chose that TensorBoard folder; sweep.log: what
# ssft-sweep writes into a run's folder before it starts ssft-train there)
GENERATED_QUERIES = "generated_queries.jsonl"  # distillation.generated_queries (004 App. E): what the run generated
TRAIN_OUTPUTS = ("metrics.json", "run_info.json", "README.md", "recipe.yaml", "model", "logs", "checkpoint-*",
                 "phase-*", "run.*.trec", "per_query.*.tsv", "sweep.log", GENERATED_QUERIES)
# what ssft-rerank / ssft-retrieve write into theirs
RERANK_OUTPUTS = ("metrics.json", "run.trec", "run.*.trec", "per_query.*.tsv")
RETRIEVE_OUTPUTS = ("metrics.json", "run.trec", "run.*.trec", "per_query.*.tsv", "fusion.json")
# in a folder without a manifest (written by an older ssft), one of these must be there to call it the tool's
TRAIN_MARKERS = ("metrics.json", "run_info.json", "checkpoint-*", "phase-*", "sweep.log")
RESULT_MARKERS = ("metrics.json", "run.trec")
# temporary names of atomic writes (ssft.core.io) and of an atomic model save (Ranker.save), and the lock / manifest
TRANSIENT = (".*.tmp", ".model.*", MANIFEST, LOCK)


@dataclass
class OutputFolder:
    """The output folder of one CLI run. ``check`` (before anything is written) says what state it is in or
    refuses it; ``claim`` creates it, takes the lock and writes the manifest; ``clear`` removes the tool's
    earlier outputs (``--overwrite``); ``release`` drops the lock."""

    path: Path
    tool: str  # ssft-train | ssft-rerank | ssft-retrieve
    outputs: tuple[str, ...]
    markers: tuple[str, ...]
    where: str = "output folder"  # how the user named it (training.output_dir, --output), for messages
    _lock: FileLock | None = field(default=None, repr=False)

    # ------------------------------------------------------------ before anything is written
    def check(self, check_lock: bool = True) -> None:
        """Refuse a folder this tool must not write into: a file, a folder with foreign content, another tool's
        folder, one another process is writing (``check_lock``), one that cannot be written."""
        path = self.path
        if path.exists() and not path.is_dir():
            raise SsftError(f"{self.where}: {path} is a file, not a folder")
        if path.is_dir():
            owner = self.owner()
            if owner is None:
                foreign = self.foreign_entries()
                if foreign:
                    shown = ", ".join(sorted(foreign)[:4]) + (" ..." if len(foreign) > 4 else "")
                    raise SsftError(f"{self.where}: {path} is not empty and is no {self.tool} output folder (it holds "
                                    f"{shown}); name a new or empty folder (--overwrite removes only what ssft wrote)")
            elif owner != self.tool:
                raise SsftError(f"{self.where}: {path} holds the outputs of {owner}; give {self.tool} a folder of its own")
            if check_lock:
                self._check_not_locked()
        self._check_writable()

    def owner(self) -> str | None:
        """The tool whose manifest the folder holds, or None."""
        manifest = self.path / MANIFEST
        if not manifest.is_file():
            return None
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            return str(data["tool"])
        except (OSError, ValueError, KeyError, TypeError):
            raise SsftError(f"{manifest}: damaged ssft manifest; delete it only if this folder holds nothing but "
                            f"ssft's outputs") from None

    def foreign_entries(self) -> list[str]:
        """Entries of a folder without a manifest that show this tool did not write it: names it never writes, or
        (all names its own) none of the names that mark its output."""
        names = [p.name for p in self.path.iterdir()]
        foreign = [n for n in names if not self.owns(n)]
        if foreign or not names:
            return foreign
        marked = any(fnmatch.fnmatchcase(n, m) for n in names for m in self.markers)
        return [] if marked else names

    def owns(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in (*self.outputs, *TRANSIENT))

    def _check_not_locked(self) -> None:
        lock_file = self.path / LOCK
        if not lock_file.exists():
            return
        probe = FileLock(str(lock_file), timeout=0)
        try:
            probe.acquire()
        except Timeout:
            raise SsftError(f"{self.where}: {self.path} is in use by another {self.tool} process (it holds "
                            f"{LOCK}); wait for it to finish or name another folder") from None
        probe.release()

    def _check_writable(self) -> None:
        """A probe file in the folder (or in the nearest existing parent it would be created in)."""
        target = self.path
        while not target.exists():
            if target.parent == target:
                break
            target = target.parent
        try:
            fd, probe = tempfile.mkstemp(prefix=".ssft-probe.", dir=target)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            reason = "read-only file system" if err.errno == errno.EROFS else (err.strerror or type(err).__name__)
            raise SsftError(f"{self.where}: cannot write to {target} ({reason})") from None

    # ------------------------------------------------------------ writing
    def claim(self) -> None:
        """Create the folder, take the lock (held until ``release``) and write the manifest."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(str(self.path / LOCK), timeout=0)
        try:
            self._lock.acquire()
        except Timeout:
            self._lock = None
            raise SsftError(f"{self.where}: {self.path} is in use by another {self.tool} process (it holds {LOCK})") from None
        atomic_write_json(self.path / MANIFEST, {"tool": self.tool, "outputs": list(self.outputs)})

    def clear(self) -> list[str]:
        """Remove this tool's earlier outputs (the manifest's patterns; a user's own files stay). Returns the names."""
        removed = []
        for entry in sorted(self.path.iterdir()) if self.path.is_dir() else []:
            if entry.name in (MANIFEST, LOCK) or not self.owns(entry.name):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry.name)
        return removed

    def mark_unfinished(self) -> None:
        """metrics.json marks a finished run: gone before any new output is written (it is written last)."""
        (self.path / "metrics.json").unlink(missing_ok=True)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "OutputFolder":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
