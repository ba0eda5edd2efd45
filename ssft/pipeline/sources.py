"""What the commands that read a model and write a result share (ssft-rerank, ssft-retrieve, ssft-encode, ssft-mine and
their ``ssft.api`` functions): finding a saved model folder, naming what a command reads (an output must never be, hold
or lie inside it: ``ssft.core.run_folder``), a loaded ranker passed instead of a path, checks of whole numbers."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ssft.core.arguments import whole_number
from ssft.core.errors import SsftError
from ssft.core.run_folder import (
    MANIFEST,
    RESULT_MARKERS,
    OutputFolder,
    Source,
    local_dataset_folder,
    missing_model_message,
)
from ssft.models.base import SPEC_FILE, Ranker, load_ranker, saved_model_folder


def model_dir(path: Path) -> Path:
    """A run folder (with model/) or a model folder itself; an unfinished run is named as one (still training, or
    stopped: run the same ssft-train command again)."""
    folder = saved_model_folder(path)
    if folder is not None:
        return folder
    raise SsftError(missing_model_message(path, SPEC_FILE))


def model_sources(path: Path, folder: Path) -> tuple[Source, ...]:
    """What a command reading the model of ``path`` (a run folder or a model folder, ``folder`` its model) must not
    write into: the run folder around the model (named first: an output holding both is named by the run), and the
    model folder."""
    sources: list[Source] = []
    if folder != path:
        sources.append((path, "the run folder being read"))
    elif folder.name == "model" and any((folder.parent / n).exists() for n in ("recipe.yaml", "metrics.json", MANIFEST)):
        sources.append((folder.parent, "the run folder being read"))
    return (*sources, (folder, "the model folder being read"))


def dataset_sources(name: str, what: str = "the dataset folder being read") -> tuple[Source, ...]:
    """The dataset folder ``--data`` names, when it is one here already (before it is loaded; checked again once
    it is): an output must not be, hold or lie inside it."""
    folder = local_dataset_folder(name)
    return () if folder is None else ((folder, what),)


def result_folder(path: Path, tool: str, outputs: tuple[str, ...], overwrite: bool,
                  sources: tuple[Source, ...] = (), finished: str | tuple[str, ...] = "metrics.json") -> OutputFolder:
    """The ``--output`` folder of ssft-rerank / ssft-retrieve, checked before anything is loaded: new, empty or the
    tool's own (``ssft.core.run_folder``), an earlier finished result (``finished``: metrics.json, or run.trec for a
    ranking without qrels; several names: any of them) only with ``--overwrite``; never one of ``sources`` (what the
    command reads), a folder holding one, or a folder inside one."""
    folder = OutputFolder(path, tool, outputs, RESULT_MARKERS, where="--output", sources=sources,
                          finished=finished, overwrite=overwrite)
    folder.check()
    return folder


def whole_numbers(**values: int) -> None:
    """``depth=...``, ``batch_size=...``: whole numbers >= 1, or a one-line error naming the flag (``--batch-size``)."""
    for name, value in values.items():
        whole_number(value, f"--{name.replace('_', '-')}")


class ModelInput:
    """The ``model`` a command reads: a path (a run folder or a saved model folder; checked at once, loaded when
    ``load`` is called, after the cheaper checks) or a ranker already loaded (``ssft.load``)."""

    def __init__(self, model: str | Path | Ranker):
        self.ranker = model if isinstance(model, Ranker) else None
        self.path = None if self.ranker is not None else Path(model)
        self.folder = None if self.path is None else model_dir(self.path)

    @property
    def sources(self) -> tuple[Source, ...]:
        """What the command must not write into (nothing for a loaded ranker)."""
        return () if self.folder is None else model_sources(self.path, self.folder)

    @property
    def name(self) -> Any:
        """How messages name the model: its path as given, or the ranker's architecture."""
        return self.path if self.path is not None else f"the {self.ranker.architecture} model"

    def load(self, trust_remote_code: bool = False) -> Ranker:
        if self.ranker is not None:
            return self.ranker
        return load_ranker(self.folder, trust_remote_code=trust_remote_code)


__all__ = ["ModelInput", "dataset_sources", "model_dir", "model_sources", "result_folder", "whole_numbers"]
