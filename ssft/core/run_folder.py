"""Output folders and files: what an ssft command may write into, and what ``--overwrite`` may remove.

The rule (README, "Reliability": "Output folders and files"), the same for every command that writes (ssft-train,
ssft-rerank, ssft-retrieve, ssft-encode, ssft-export, ssft-sweep; ssft-mine and ssft-ambiguity write files):

- A command writes only into a folder that is new, empty, or already its own. A folder is a tool's own when it holds
  the manifest ``.ssft-outputs.json`` that the tool wrote there (or, for folders written before manifests existed,
  when everything in it carries a name the tool writes and one of them marks its output, e.g. ``metrics.json``).
  Anything else -- ``.``, a project, a dataset folder, ``/``, another tool's output -- is refused before anything
  is written.
- Never into what it reads: an output that is a source (the run folder, its ``model/``, the dataset, an index, a
  run file), holds one (a parent folder) or lies inside one is refused (``refuse_overlap``); paths are compared
  resolved, so a symbolic link is followed (a link to a folder is that folder; a dangling link is refused).
- The manifest names the tool and the patterns of what it writes (``metrics.json``, ``run.*.trec``, ``model`` ...;
  ssft-export: the names its export holds); a file or folder a user adds under any other name is never touched.
  ``--overwrite`` removes only the entries that match those patterns.
- One process at a time: a lock file (``.ssft.lock``, an exclusive ``flock``) is held for the whole run; a second
  process on the same folder is refused in one line. ``claim`` takes it and checks the folder again under it, so two
  commands started at once into one new folder cannot both write. ``release`` removes the file (a finished run leaves
  none behind); a holder checks, once locked, that the file it locked is still the one at the path, so removing it
  never lets two processes hold the lock (``_LockBeside``). A killed process leaves the file, unlocked: harmless.
- ``metrics.json`` marks a finished run: it is removed first and written last, so an interrupted run never leaves a
  folder that looks finished with results of two runs.
- A file output (``OutputFile``: ssft-mine's ``FILE.jsonl`` + ``FILE.mining.json``, ssft-ambiguity's TSV) follows
  the same rule: an existing file is replaced only when the tool's own mark says it wrote it, and only with
  ``--overwrite``; a lock file ``.FILE.ssft.lock`` beside it (removed afterwards) keeps out a second writer.
"""
from __future__ import annotations

import errno
import fcntl
import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_json, give_umask_modes
from ssft.core.paths import data_home

MANIFEST = ".ssft-outputs.json"
LOCK = ".ssft.lock"
FILES = "files"  # the manifest's record of every file a finished output holds (paths relative to its folder)

# what ssft-train writes into its output folder (logs: only when ssft chose that TensorBoard folder; sweep.log: what
# ssft-sweep writes into a run's folder before it starts ssft-train there)
GENERATED_QUERIES = "generated_queries.jsonl"  # distillation.generated_queries (004 App. E): what the run generated
CURVES = "curves.png"  # a finished run's training loss and validation measures against epoch
TRAIN_OUTPUTS = ("metrics.json", "run_info.json", "README.md", "recipe.yaml", "model", "logs", "checkpoint-*",
                 "phase-*", "run.*.trec", "per_query.*.tsv", "sweep.log", GENERATED_QUERIES, CURVES)
# what ssft-rerank / ssft-retrieve write into theirs
RERANK_OUTPUTS = ("metrics.json", "run.trec", "run.*.trec", "per_query.*.tsv")
RETRIEVE_OUTPUTS = ("metrics.json", "run.trec", "run.*.trec", "per_query.*.tsv", "fusion.json", "results.jsonl")
# ssft-encode: the shards, their manifest and the index built from them
ENCODE_OUTPUTS = ("encode.json", "shards", "index.faiss", "index.plaid", "index.json", "corpus.jsonl")
# ssft-sweep's output root: the runs' folders, the K-fold datasets, the results rows (its own name when elsewhere)
SWEEP_TABLE = "results.png"  # the results rows as a figure
SWEEP_OUTPUTS = ("runs", "folds", "results.jsonl", SWEEP_TABLE)
# in a folder without a manifest (written by an older ssft), one of these must be there to call it the tool's
TRAIN_MARKERS = ("metrics.json", "run_info.json", "checkpoint-*", "phase-*", "sweep.log")
RESULT_MARKERS = ("metrics.json", "run.trec")
ENCODE_MARKERS = ("encode.json",)
SWEEP_MARKERS = ("runs", "folds", "results.jsonl")
# temporary names of atomic writes (ssft.core.io) and of an atomic model save (Ranker.save), and the lock / manifest
TRANSIENT = (".*.tmp", ".model.*", MANIFEST, LOCK)

Source = tuple[Path, str]  # a path a command reads, and how a message names it ("the dataset folder being mined")


def resolved(path: Path) -> Path:
    """``path`` absolute with every symbolic link followed (what exists of it; the rest as written)."""
    return Path(os.path.realpath(os.path.abspath(path)))


def refuse_overlap(path: Path, sources: Iterable[Source], where: str) -> None:
    """Refuse an output that is a source, holds one (a parent folder: replacing or clearing it would reach the
    source) or lies inside one (writing into what is being read); the closest relation is named first."""
    out = resolved(path)
    found = [(resolved(source), source, what) for source, what in sources]
    for src, source, what in found:
        if out == src:
            raise SsftError(f"{where}: {path} is {what}; write the output elsewhere")
    for src, source, what in found:
        if out in src.parents:
            raise SsftError(f"{where}: {path} holds {what} ({source}); name a place outside it")
    for src, source, what in found:
        if src in out.parents:
            raise SsftError(f"{where}: {path} lies inside {what} ({source}); name a place outside it")


def refuse_current_folder(path: Path, where: str) -> None:
    """For a command that puts a whole folder in place by renaming it (ssft-export): never the working folder or a
    folder above it (``.``, ``..``, ``/``)."""
    out, cwd = resolved(path), resolved(Path.cwd())
    if out == cwd:
        raise SsftError(f"{where}: {path} is the current folder; name a folder of its own (e.g. ./export)")
    if out in cwd.parents:
        raise SsftError(f"{where}: {path} holds the current folder ({cwd}); name a folder of its own (e.g. ./export)")


def local_dataset_folder(name: str | Path | None) -> Path | None:
    """The BEIR folder a dataset name or path names, if it is one here (the path itself, or a name under
    $SSFT_DATA_HOME): known before the dataset is loaded, nothing downloaded to find it."""
    if not name:
        return None
    home = data_home()
    for candidate in (Path(name).expanduser(), home / str(name) if home is not None else None):
        if candidate is not None and ((candidate / "corpus.jsonl").exists() or (candidate / "corpus.jsonl.gz").exists()):
            return candidate
    return None


def _make_dirs(path: Path) -> list[Path]:
    """``mkdir -p path``; returns the folders it created, deepest first (to remove them again if unused)."""
    created = []
    target = path
    while not target.exists() and target.parent != target:
        created.append(target)
        target = target.parent
    path.mkdir(parents=True, exist_ok=True)
    return created


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (or gone): it and the folders above it stay


def _dangling(path: Path, where: str) -> None:
    if path.is_symlink() and not path.exists():
        raise SsftError(f"{where}: {path} is a symbolic link to {os.readlink(path)}, which does not exist; name an "
                        f"existing folder or a new path")


def probe_writable(path: Path, where: str) -> None:
    """Refuse a place that cannot be written: a probe file in ``path`` (or in the nearest existing parent it would
    be created in)."""
    target = path
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
        raise SsftError(f"{where}: cannot write to {target} ({reason})") from None


@dataclass
class OutputFolder:
    """The output folder of one command. ``check`` (before anything is written) says what state it is in or
    refuses it; ``claim`` creates it, takes the lock, checks it again under the lock and writes the manifest;
    ``clear`` removes the tool's earlier outputs (``--overwrite``); ``publish`` puts a folder built beside it in its
    place (ssft-export); ``release`` drops the lock; ``abandon`` also removes a folder ``claim`` created."""

    path: Path
    tool: str  # ssft-train | ssft-rerank | ssft-retrieve | ssft-encode | ssft-export | ssft-sweep
    outputs: tuple[str, ...]
    markers: tuple[str, ...]
    where: str = "output folder"  # how the user named it (training.output_dir, --output), for messages
    sources: tuple[Source, ...] = ()  # what the command reads: the folder must not be, hold or lie inside one
    finished: str | tuple[str, ...] | None = None  # what marks a finished result (any of several): refused unless
    # ``overwrite``
    overwrite: bool = False
    _lock: _LockBeside | None = field(default=None, repr=False)
    _created: list[Path] = field(default_factory=list, repr=False)  # the folders claim made (deepest first)
    _added: list[str] = field(default_factory=list, repr=False)  # the lock / manifest files claim added

    # ------------------------------------------------------------ before anything is written
    def check(self, check_lock: bool = True) -> None:
        """Refuse a folder this tool must not write into: a file, a dangling link, a source or a folder around or
        inside one, a folder with foreign content, another tool's folder, one another process is writing
        (``check_lock``), a finished result without ``overwrite``, one that cannot be written."""
        path = self.path
        _dangling(path, self.where)
        if path.exists() and not path.is_dir():
            raise SsftError(f"{self.where}: {path} is a file, not a folder")
        refuse_overlap(path, self.sources, self.where)
        if path.is_dir():
            if check_lock:  # first: a folder another process is filling would look foreign or unfinished
                self._check_not_locked()
            self._check_contents()
            if self.overwrite:
                self.refuse_unrecorded()
        self._check_writable()

    def add_sources(self, *sources: Source) -> None:
        """Sources known only later (the dataset's folder once it is found): checked at once and at ``claim``."""
        self.sources = (*self.sources, *sources)
        refuse_overlap(self.path, sources, self.where)

    def _check_contents(self) -> None:
        owner = self.owner()
        if owner is None:
            foreign = self.foreign_entries()
            if foreign:
                shown = ", ".join(sorted(foreign)[:4]) + (" ..." if len(foreign) > 4 else "")
                raise SsftError(f"{self.where}: {self.path} is not empty and holds no {self.tool} output (it holds "
                                f"{shown}); name a new or empty folder (--overwrite removes only what ssft wrote)")
        elif owner != self.tool:
            raise SsftError(f"{self.where}: {self.path} holds the outputs of {owner}; give {self.tool} a folder of its own")
        marks = (self.finished,) if isinstance(self.finished, str) else self.finished or ()
        done = next((m for m in marks if (self.path / m).exists()), None)
        if done is not None and not self.overwrite:
            raise SsftError(f"{self.where}: {self.path} holds a finished {self.tool} result ({done}), so it is "
                            f"not empty; pass --overwrite to replace it (only what {self.tool} wrote is removed), or "
                            f"name another folder")

    def _manifest(self) -> dict | None:
        manifest = self.path / MANIFEST
        if not manifest.is_file():
            return None
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            str(data["tool"])
            if not isinstance(data.get("outputs", []), list):
                raise TypeError
            return data
        except (OSError, ValueError, KeyError, TypeError):
            raise SsftError(f"{manifest}: damaged ssft manifest; delete it only if this folder holds nothing but "
                            f"ssft's outputs") from None

    def owner(self) -> str | None:
        """The tool whose manifest the folder holds, or None."""
        data = self._manifest()
        return None if data is None else str(data["tool"])

    def foreign_entries(self) -> list[str]:
        """Entries of a folder without a manifest that show this tool did not write it: names it never writes, or
        (all names its own) none of the names that mark its output. Temporaries and a lock alone are no content."""
        names = [p.name for p in self.path.iterdir() if not _matches(p.name, TRANSIENT)]
        foreign = [n for n in names if not self.owns(n)]
        if foreign or not names:
            return foreign
        marked = any(_matches(n, self.markers) for n in names)
        return [] if marked else names

    def owns(self, name: str) -> bool:
        """Whether ``name`` is one this tool writes: its patterns, and those its manifest in the folder lists."""
        patterns = (*self.outputs, *TRANSIENT)
        data = self._manifest() if self.path.is_dir() else None
        if data is not None and data["tool"] == self.tool:
            patterns += tuple(str(p) for p in data.get("outputs", []))
        return _matches(name, patterns)

    def _check_not_locked(self) -> None:
        if _LockBeside(self.path / LOCK).held_elsewhere():  # a probe that never creates the file
            raise SsftError(f"{self.where}: {self.path} is in use by another {self.tool} process (it holds "
                            f"{LOCK}); wait for it to finish or name another folder")

    def _check_writable(self) -> None:
        probe_writable(self.path, self.where)

    # ------------------------------------------------------------ writing
    def claim(self, write_manifest: bool = True) -> None:
        """Create the folder, take the lock (held until ``release``), check the folder again under the lock
        (another command may have written it since ``check``) and write the manifest (``write_manifest``)."""
        self._created = _make_dirs(self.path)
        self._added = [name for name in (LOCK, MANIFEST if write_manifest else None)
                       if name and not (self.path / name).exists()]
        lock = _LockBeside(self.path / LOCK)
        if not lock.acquire():
            self._added, self._created = [], []  # the lock file and folder are the other process's
            raise SsftError(f"{self.where}: {self.path} is in use by another {self.tool} process (it holds {LOCK}); "
                            f"wait for it to finish or name another folder")
        self._lock = lock
        try:
            refuse_overlap(self.path, self.sources, self.where)
            self._check_contents()
        except SsftError:
            self.abandon()
            raise
        if write_manifest:
            recorded = self._recorded()  # what an earlier finished run wrote: kept until ``clear`` uses it
            atomic_write_json(self.path / MANIFEST, {"tool": self.tool, "outputs": list(self.outputs),
                                                     **({} if recorded is None else {FILES: sorted(recorded)})})

    def clear(self) -> list[str]:
        """Remove this tool's earlier outputs (the manifest's patterns; a user's own files stay). Returns the names.
        A file a user added inside one of the tool's folders (``model/``, an export's ``openvino/``) is refused
        first, in one line (``refuse_unrecorded``): removing the folder would take it along."""
        self.refuse_unrecorded()
        removed = []
        for entry in sorted(self.path.iterdir()) if self.path.is_dir() else []:
            if entry.name in (MANIFEST, LOCK) or not self.owns(entry.name):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry.name)
        if self._recorded() is not None:  # nothing recorded is left: a later record starts afresh
            data = self._manifest() or {"tool": self.tool, "outputs": list(self.outputs)}
            atomic_write_json(self.path / MANIFEST, {**data, FILES: []})
        return removed

    # ------------------------------------------------------------ what the tool wrote inside its folders
    def _recorded(self) -> set[str] | None:
        """The files (paths relative to the folder) the tool's manifest records it wrote, or None (no record: a
        folder an older ssft wrote, or a run that has not finished)."""
        data = self._manifest() if self.path.is_dir() else None
        if data is None or data["tool"] != self.tool or not isinstance(data.get(FILES), list):
            return None
        return {str(name) for name in data[FILES]}

    def _owned_files(self, root: Path) -> dict[str, list[str]]:
        """Each of the tool's entries in ``root`` (a folder of the tool's) -> the files under it, relative to ``root``
        (a file entry: itself; a symbolic link is a file, never followed)."""
        found: dict[str, list[str]] = {}
        for entry in sorted(root.iterdir()) if root.is_dir() else []:
            if entry.name in (MANIFEST, LOCK) or _matches(entry.name, TRANSIENT) or not self.owns(entry.name):
                continue
            if entry.is_dir() and not entry.is_symlink():
                files = []
                for folder, dirs, names in os.walk(entry):
                    links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
                    files += [os.path.relpath(os.path.join(folder, n), root) for n in sorted(names + links)]
                found[entry.name] = files
            else:
                found[entry.name] = [entry.name]
        return found

    def unrecorded(self) -> list[str]:
        """Files inside the tool's own folders that it did not write: under a folder whose files the manifest records,
        the ones it does not list (a folder written after the record -- an unfinished run's checkpoint -- is the
        tool's whole). Empty without a record."""
        recorded = self._recorded()
        if recorded is None:
            return []
        extra = []
        for entry, files in self._owned_files(self.path).items():
            if any(f in recorded for f in files):
                extra += [f for f in files if f not in recorded]
        return extra

    def refuse_unrecorded(self) -> None:
        """A one-line refusal when replacing the tool's earlier output would remove a file a user put inside it."""
        extra = self.unrecorded()
        if extra:
            shown = ", ".join(extra[:3]) + (" ..." if len(extra) > 3 else "")
            raise SsftError(f"{self.where}: {self.path} holds {shown}, which {self.tool} did not write, inside its own "
                            f"output; --overwrite would remove it: move it out of {self.path}, then run again")

    def record_files(self) -> None:
        """Record in the manifest every file the tool's entries now hold (called once its output is complete), so a
        later ``--overwrite`` tells them from files a user adds inside them."""
        data = self._manifest() or {"tool": self.tool, "outputs": list(self.outputs)}
        files = sorted(f for files in self._owned_files(self.path).values() for f in files)
        atomic_write_json(self.path / MANIFEST, {**data, FILES: files})

    def publish(self, tmp: Path, outputs: list[str]) -> None:
        """Put the complete folder ``tmp`` (built beside the folder, on the same file system) in the folder's place
        with two renames, as ssft-export does: the manifest (``outputs``: the names the tool wrote) goes into
        ``tmp`` first; what a user keeps in the old folder (names no earlier run of the tool wrote) moves into
        ``tmp``; the lock file is hard-linked into ``tmp``, so the lock stays held across the swap. The old folder
        is renamed to ``.<name>.old`` and removed once the new one is in place: a kill leaves one whole folder."""
        give_umask_modes(tmp)  # before the user's entries move in: their modes stay theirs
        self.refuse_unrecorded()  # a user's file inside the old export's folders would go with them
        files = sorted(os.path.relpath(os.path.join(folder, n), tmp) for folder, dirs, names in os.walk(tmp)
                       for n in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))])
        atomic_write_json(tmp / MANIFEST, {"tool": self.tool, "outputs": sorted(outputs), FILES: files})
        kept = [e for e in sorted(self.path.iterdir()) if e.name not in (MANIFEST, LOCK) and not self.owns(e.name)]
        clash = [e.name for e in kept if os.path.lexists(tmp / e.name)]
        if clash:
            raise SsftError(f"{self.where}: {self.path} holds {', '.join(clash)}, which {self.tool} did not write but "
                            f"would write now; move it away and run again")
        if (self.path / LOCK).exists():
            try:
                os.link(self.path / LOCK, tmp / LOCK)
            except OSError:
                pass  # a file system without hard links: the lock ends with the swap, a moment early
        for entry in kept:
            os.replace(entry, tmp / entry.name)
        old = self.path.with_name(f".{self.path.name}.old")
        if os.path.lexists(old):
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        os.replace(self.path, old)
        os.replace(tmp, self.path)
        self._created, self._added = [], []
        shutil.rmtree(old, ignore_errors=True)

    def mark_unfinished(self) -> None:
        """metrics.json marks a finished run: gone before any new output is written (it is written last)."""
        (self.path / "metrics.json").unlink(missing_ok=True)

    def release(self) -> None:
        """Drop the lock; its file goes with it (a finished command leaves no ``.ssft.lock`` behind)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def abandon(self) -> None:
        """Undo ``claim`` after a refusal or a failure before the outputs: the manifest and lock file it added go
        (the lock is ours: a second process opening it now is refused or finds none), and so does a folder it
        created that holds nothing else; then the lock is released."""
        self._remove_if_created()
        self.release()

    def _remove_if_created(self) -> None:
        for name in self._added:
            (self.path / name).unlink(missing_ok=True)
        self._added = []
        _remove_empty(self._created)
        self._created = []

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


class _LockBeside:
    """An exclusive ``flock`` on a lock file that is removed on release; a holder checks that the file it locked
    is still the one at the path (a previous holder may have removed it meanwhile), so removing it is safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> bool:
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                return True
            os.close(fd)
        return False

    def held_elsewhere(self) -> bool:
        if not self.path.exists():
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # closing drops a probe lock
        return False

    def release(self) -> None:
        if self.fd is not None:
            # before unlocking: a newcomer then finds no file or a new one. Only the file this holder locked: after
            # ssft-export's swap without hard links (``OutputFolder.publish``) the path may name another one's lock;
            # while the path names ours nobody can create another there, so the check cannot go stale.
            try:
                ours = os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
            except FileNotFoundError:
                ours = False
            if ours:
                self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None


def file_lock_path(path: Path) -> Path:
    """The lock file of a file output: ``.NAME.ssft.lock`` beside it."""
    return path.with_name(f".{path.name}.ssft.lock")


@dataclass
class OutputFile:
    """A file output (with companions written beside it, e.g. ssft-mine's ``.mining.json``), under the folder rule:
    not a folder, not a source nor inside one; an existing file replaced only when ``foreign`` finds the tool's
    mark on it (it returns what shows the tool did not write the files, or None) and only with ``overwrite``; one
    writer at a time (``.NAME.ssft.lock`` beside it)."""

    path: Path
    tool: str
    foreign: Callable[[], str | None]
    companions: tuple[Path, ...] = ()
    where: str = "--output"
    sources: tuple[Source, ...] = ()
    overwrite: bool = False
    _lock: _LockBeside | None = field(default=None, repr=False)
    _created: list[Path] = field(default_factory=list, repr=False)

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.path, *self.companions)

    def check(self, check_lock: bool = True) -> None:
        for path in self.files:
            _dangling(path, self.where)
            if path.is_dir():
                raise SsftError(f"{self.where}: {path} is a folder, not a file")
        parent = self.path.parent
        if parent.exists() and not parent.is_dir():
            raise SsftError(f"{self.where}: {parent} is not a folder")
        for path in self.files:
            refuse_overlap(path, self.sources, self.where)
        if check_lock and _LockBeside(file_lock_path(self.path)).held_elsewhere():
            raise SsftError(f"{self.where}: {self.path} is being written by another {self.tool} process (it holds "
                            f"{file_lock_path(self.path).name}); wait for it to finish or name another file")
        self._check_existing()
        probe_writable(parent, self.where)

    def add_sources(self, *sources: Source) -> None:
        self.sources = (*self.sources, *sources)
        for path in self.files:
            refuse_overlap(path, sources, self.where)

    def _check_existing(self) -> None:
        existing = [p for p in self.files if p.exists()]
        if not existing:
            return
        why = self.foreign()
        if why is not None:
            raise SsftError(f"{self.where}: {existing[0]} exists and {self.tool} did not write it ({why}); name another "
                            f"file (--overwrite replaces only what {self.tool} wrote)")
        if not self.overwrite:
            raise SsftError(f"{self.where}: {existing[0]} exists; pass --overwrite to replace it")

    def claim(self) -> None:
        """Create the parent folder, take the lock (held until ``release``) and check the files again under it."""
        self._created = _make_dirs(self.path.parent)
        lock = _LockBeside(file_lock_path(self.path))
        if not lock.acquire():
            self.release()
            raise SsftError(f"{self.where}: {self.path} is being written by another {self.tool} process; wait for it "
                            f"to finish or name another file")
        self._lock = lock
        try:
            for path in self.files:
                refuse_overlap(path, self.sources, self.where)
            self._check_existing()
        except SsftError:
            self.release()
            raise

    def release(self) -> None:
        """Drop the lock (its file goes); folders ``claim`` created that stayed empty go too."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        _remove_empty(self._created)
        self._created = []

    def __enter__(self) -> OutputFile:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


# ------------------------------------------------------------ a run folder without its model


def missing_model_message(path: Path, expected: str) -> str:
    """Why ``path`` (given as a run folder or its ``model/``) holds no saved model, for a command that reads one:
    not there; an ssft-train run still training (its lock held) or stopped before it saved the model (checkpoints,
    no ``model/``: killed or failed), with how to go on; or no run folder at all."""
    run = path.parent if path.name == "model" and not path.exists() and path.parent.is_dir() else path
    if not run.exists():
        return f"run folder not found: {path}"
    return unfinished_run_message(path) or \
        f"{path}: no trained model: not a run folder or saved ssft model (expected {path}/model/{expected})"


def unfinished_run_message(path: Path) -> str | None:
    """Why ``path`` (a run folder or its ``model/``) holds no model yet when it is an ssft-train run that has not
    finished -- still training (its lock held) or stopped (checkpoints, no ``model/``) -- else None."""
    run = path.parent if path.name == "model" and not path.exists() and path.parent.is_dir() else path
    if not run.is_dir():
        return None
    training = _LockBeside(run / LOCK).held_elsewhere()
    started = any(run.glob("checkpoint-*")) or any(run.glob("phase-*")) or (run / "recipe.yaml").is_file() \
        or _train_manifest(run)
    if training:
        return (f"{path}: no trained model yet: ssft-train is still training in {run} (it holds {LOCK}); wait "
                f"until it finishes (model/ and metrics.json are written at the end)")
    if started:
        return (f"{path}: no trained model yet: {run} is an unfinished ssft-train run (checkpoints but no model/): "
                f"it stopped before the end (killed or failed); run the same ssft-train command again to resume "
                f"it from its last checkpoint")
    return None


def _train_manifest(folder: Path) -> bool:
    try:
        return OutputFolder(folder, "ssft-train", (), ()).owner() == "ssft-train"
    except SsftError:  # a damaged manifest: not what this message is about
        return False
