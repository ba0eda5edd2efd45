"""Progress of the long stages (scoring, validation, corpus encoding, BM25, mining, sweeps ...), one helper for all.

Why: a run whose output goes to a log file (any cluster job) must show that it is alive; a terminal gets a bar.

- stderr is a terminal: a tqdm bar.
- otherwise: one log line (logger ``ssft.progress``, ssft's log-line format) at most every ``SSFT_PROGRESS_INTERVAL``
  seconds (default 30) with the stage, done/total, rate and ETA, and one closing line for a stage that printed any.
- ``SSFT_PROGRESS=0`` switches bars and lines off; a logging level above INFO (``ssft-train --log-level WARNING``)
  does too, so the bars obey the same switch as the lines.
- ``stage(name)`` names what the bars opened inside it belong to (``start (test)``, ``validation``, ``test``): a bar
  deep in the scoring code says which stage it is part of without being told.
- Under ``accelerate launch`` only the main process shows progress (the others do the same work).
"""
from __future__ import annotations

import contextvars
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from tqdm.auto import tqdm

logger = logging.getLogger("ssft.progress")

DEFAULT_INTERVAL = 30.0
_STAGE: contextvars.ContextVar[str | None] = contextvars.ContextVar("ssft_progress_stage", default=None)
T = TypeVar("T")


def enabled() -> bool:
    """Progress is shown: not switched off (``SSFT_PROGRESS=0``), INFO logged, the main process."""
    if os.environ.get("SSFT_PROGRESS", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return logger.isEnabledFor(logging.INFO) and _main_process()


def _main_process() -> bool:
    """Rank 0, or one process (torch is not imported for it: the progress of BM25 needs no torch)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return os.environ.get("RANK", "0") == "0"


def interval() -> float:
    """Seconds between two progress lines of one stage on a non-terminal (``SSFT_PROGRESS_INTERVAL``, default 30)."""
    try:
        value = float(os.environ.get("SSFT_PROGRESS_INTERVAL", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value >= 0 else DEFAULT_INTERVAL


def on_terminal() -> bool:
    return sys.stderr.isatty()


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Bars opened inside belong to stage ``name`` (``start (test)``, ``validation`` ...); nested stages join."""
    outer = _STAGE.get()
    token = _STAGE.set(f"{outer}: {name}" if outer and name not in outer else name)
    try:
        yield
    finally:
        _STAGE.reset(token)


def current_stage() -> str | None:
    return _STAGE.get()


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class Progress:
    """One stage's progress: ``update(n)`` as work is done, ``close()`` at the end (or use it as a context manager).
    ``total`` None: counts without a percentage nor ETA. ``show`` false: silent (a library shows its own bar).
    Cheap when progress is off (updates only add)."""

    def __init__(self, what: str, total: int | None = None, unit: str = "it", show: bool = True):
        where = _STAGE.get()
        self.desc = f"{where}: {what}" if where and what else (where or what)
        self.total, self.unit, self.done = total, unit, 0
        self.started = self.last = time.monotonic()
        self.lines = 0
        self.every = interval()
        self._bar = None
        self._on = show and enabled()
        self._closed = False
        if self._on and on_terminal():
            self._bar = tqdm(total=total, desc=self.desc, unit=unit, leave=False, dynamic_ncols=True, file=sys.stderr)

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self._on:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.lines += 1
            logger.info("%s", self.line(now))

    def line(self, now: float | None = None) -> str:
        """``stage: done/total unit (pct %), rate unit/s, ETA h:mm:ss``."""
        elapsed = max((now if now is not None else time.monotonic()) - self.started, 1e-9)
        rate = self.done / elapsed
        text = f"{self.desc}: {self.done:,}"
        if self.total:
            text += f"/{self.total:,} {self.unit} ({100 * self.done / self.total:.0f}%)"
        else:
            text += f" {self.unit}"
        text += f", {rate:.3g} {self.unit}/s, elapsed {duration(elapsed)}"
        if self.total and rate > 0:
            text += f", ETA {duration(max(self.total - self.done, 0) / rate)}"
        return text

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self._on and self.lines:  # a stage that said it was running says when it is done
            logger.info("%s: done, %s %s in %s", self.desc, f"{self.done:,}", self.unit,
                        duration(time.monotonic() - self.started))

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def track(items: Iterable[T], what: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """``items`` with progress, one step per item (``total`` defaults to ``len(items)`` where it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(what, total, unit) as bar:
        for item in items:
            yield item
            bar.update()


__all__ = ["DEFAULT_INTERVAL", "Progress", "current_stage", "duration", "enabled", "interval", "on_terminal", "stage", "track"]
