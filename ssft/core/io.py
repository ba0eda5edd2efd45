"""Atomic writes: a file is written under a temporary name and renamed, so it is complete or absent."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def current_umask() -> int:
    """The process's umask (read from /proc where it can be: setting it to read it back races with other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode ``open()`` gives a new file under the current umask (0644 under umask 022)."""
    return 0o666 & ~current_umask()


def new_dir_mode() -> int:
    """The mode ``mkdir`` gives a new folder under the current umask (0755 under umask 022)."""
    return 0o777 & ~current_umask()


def give_umask_modes(root: Path) -> None:
    """Give ``root`` and everything under it the modes a plain ``open()`` / ``mkdir`` would have: ``tempfile``
    makes 0600 files and 0700 folders, and safetensors writes 0600 files, which other users of a shared
    results folder could not read."""
    root = Path(root)
    file_mode, dir_mode = new_file_mode(), new_dir_mode()
    paths = [root, *root.rglob("*")] if root.is_dir() else [root]
    for path in paths:
        if path.is_symlink():
            continue
        os.chmod(path, dir_mode if path.is_dir() else file_mode)


def replace_folder(tmp: Path, path: Path) -> None:
    """Put the complete folder ``tmp`` (beside ``path``) in its place with two renames: a previous ``path`` is
    moved to ``.<name>.old`` first and removed once the new folder is in place, so a kill leaves one whole folder
    (``ssft.models.base.remove_stale_save_folders`` puts a lone ``.old`` back). Modes as a plain ``mkdir`` gives."""
    give_umask_modes(tmp)
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)  # the new folder is in place; a leftover .old is removed next time


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), new_file_mode())  # not mkstemp's 0600: what the umask gives any other new file
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_file(path: Path, write: Callable[[str], None]) -> None:
    """``write(temporary path)`` (np.save, faiss.write_index ...), then renamed to ``path``: complete or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
