"""What every entry point shares: logging, one-line argument errors, finding a saved model folder.

The CLIs import the rest of ssft inside ``main`` (after argument parsing), so ``--help`` and argument errors answer
without importing torch: function-local imports of ssft's own modules live only in ``ssft/cli/``."""
from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path

from ssft.core.errors import SsftError, user_path
from ssft.core.run_folder import (
    MANIFEST,
    RESULT_MARKERS,
    OutputFolder,
    Source,
    local_dataset_folder,
    missing_model_message,
)


def setup_logging(level: str = "INFO") -> None:
    # raised inside PEFT / transformers, nothing a user can act on
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("httpx", "urllib3", "bm25s", "datasets", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import transformers  # here, not at the top: --help answers without it

    transformers.utils.logging.set_verbosity_warning()
    transformers.utils.logging.disable_progress_bar()


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None):
    """argparse, with usage errors as one-line SsftErrors (like every other error of the CLIs)."""

    def error(message: str):
        raise SsftError(f"{message} (see --help)")

    parser.error = error
    return parser.parse_args(argv)


def model_dir(path: Path) -> Path:
    """A run folder (with model/) or a model folder itself; an unfinished run is named as one (still training, or
    stopped: run the same ssft-train command again)."""
    from ssft.models.base import SPEC_FILE, saved_model_folder

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


def output_path(text: str) -> Path:
    """``--output`` / ``--out`` (argparse ``type=``): ``~`` expanded; an empty value (an unset shell variable) is
    refused rather than read as the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name the folder or file to write")
    return user_path(text)


def at_least_one(ns: argparse.Namespace, *names: str) -> None:
    """``--depth``, ``--batch-size`` ...: whole numbers >= 1, or a one-line error naming the flag."""
    for name in names:
        if getattr(ns, name) < 1:
            raise SsftError(f"--{name.replace('_', '-')} must be >= 1")


def result_folder(path: Path, tool: str, outputs: tuple[str, ...], overwrite: bool,
                  sources: tuple[Source, ...] = ()) -> OutputFolder:
    """The ``--output`` folder of ssft-rerank / ssft-retrieve, checked before anything is loaded: new, empty or the
    tool's own (``ssft.core.run_folder``), an earlier finished result only with ``--overwrite``; never one of
    ``sources`` (what the command reads), a folder holding one, or a folder inside one."""
    folder = OutputFolder(path, tool, outputs, RESULT_MARKERS, where="--output", sources=sources,
                          finished="metrics.json", overwrite=overwrite)
    folder.check()
    return folder


def add_precision_argument(parser: argparse.ArgumentParser) -> None:
    """``--precision`` of every inference CLI (``ssft.core.precision``; checked by ``precision_of`` after parsing, so
    that ``--help`` answers without importing torch)."""
    parser.add_argument("--precision", default=None, metavar="{auto,fp32,bf16,int8}",
                        help="inference precision: auto (bf16 where the CPU or GPU computes it natively, else fp32), fp32, "
                             "bf16 (autocast), int8 (CPU only: dynamically quantised linear layers); default: auto")


def precision_of(ns: argparse.Namespace) -> str:
    """The ``--precision`` asked for (checked), or the default."""
    from ssft.core import precision

    return precision.check(ns.precision or precision.DEFAULT, "--precision")
