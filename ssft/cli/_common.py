"""What every entry point shares: logging, one-line argument errors, finding a saved model folder.

The CLIs import the rest of ssft inside ``main`` (after argument parsing), so ``--help`` and argument errors answer
without importing torch: function-local imports of ssft's own modules live only in ``ssft/cli/``."""
from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

from ssft.core.errors import SsftError, user_path
from ssft.core.run_folder import Source, local_dataset_folder


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default shown in --help (none for flags without a value, nor where the help names it already)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text or action.option_strings == []:
            return text
        return super()._get_help_string(action)


def make_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The parser of every console script: defaults shown in --help, ``--version`` (ssft's)."""
    from ssft import __version__

    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s (ssft) {__version__}",
                        help="print ssft's version and exit")
    return parser


MODEL_HELP = ("the model: a run folder of ssft-train, a saved ssft model folder (a run's model/), or a checkpoint ssft "
              "imports by folder or hub id (a sentence-transformers model, a cross-encoder, a PyLate / ColBERT model, "
              "e.g. sentence-transformers/all-MiniLM-L6-v2; offline: from the local Hugging Face cache)")


def add_model_argument(parser: argparse.ArgumentParser, optional: bool = False, extra: str = "") -> None:
    """The positional ``model`` of every command that reads a model, with one help text (``MODEL_HELP``); resolved
    by ``model_argument`` after parsing. ``optional``: it may be left out (``ssft-mine --bm25``)."""
    parser.add_argument("model", metavar="model", nargs="?" if optional else None, default=None,
                        help=MODEL_HELP + extra)


def model_argument(ns: argparse.Namespace, output: Path | None = None, **overrides):
    """The positional model resolved as ``ssft.load`` resolves it (``ssft.api.model_input``): a saved ssft model's
    path, or a checkpoint imported as a ranker; a name not found is one line (with a close name, where there is
    one). ``output``: the command's ``--output``, refused inside an imported checkpoint's folder."""
    from ssft.api import model_input

    return model_input(ns.model, ns.trust_remote_code, output=output, output_flag="--output", **overrides)


def add_metrics_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics", default="P@20,nDCG@5,nDCG@10,nDCG@20,RR@10,R@100",
                        help="comma-separated ir_measures names")


def add_batch_size_argument(parser: argparse.ArgumentParser, default: int = 64) -> None:
    parser.add_argument("--batch-size", type=int, default=default, help="texts or pairs scored per forward pass")


def add_checkpoint_arguments(parser: argparse.ArgumentParser, pooling_help: str = "pooling of a checkpoint given by "
                             "folder or hub id (default: mean)") -> None:
    """How a checkpoint given by folder or hub id is imported: its pooling and token lengths."""
    parser.add_argument("--pooling", default=None, choices=("mean", "cls"), help=pooling_help)
    parser.add_argument("--max-length", type=int, default=None,
                        help="document tokens of a checkpoint (default: its sentence-transformers max_seq_length, "
                             "else 256)")
    parser.add_argument("--query-max-length", type=int, default=None,
                        help="query tokens of a checkpoint (default: as its documents)")


def add_trust_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="run Python code the saved model ships (a model saved with trust_remote_code); only for "
                             "models you trust")


def setup_logging(level: str = "INFO") -> None:
    # raised inside PEFT / transformers, nothing a user can act on
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    # libraries that log routine work at INFO; faiss.loader: six lines on which CPU instruction set faiss was loaded
    # with (AVX2 / AVX512 found or not), which read as trouble and need no action
    for noisy in ("httpx", "urllib3", "bm25s", "datasets", "filelock", "faiss.loader"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import transformers  # here, not at the top: --help answers without it

    transformers.utils.logging.set_verbosity_warning()
    transformers.utils.logging.disable_progress_bar()


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None, intermixed: bool = False):
    """argparse, with usage errors as one-line SsftErrors (like every other error of the CLIs). ``intermixed``:
    positionals and options in any order (``ssft-train r.yaml --overwrite a=b``)."""

    def error(message: str):
        raise SsftError(f"{message} (see --help)")

    parser.error = error
    if not intermixed:
        return parser.parse_args(argv)
    ns, extras = parser.parse_known_intermixed_args(argv)
    if extras:  # the unknown flags named alone (a key=value after one is not the culprit)
        error(f"unrecognized arguments: {' '.join([e for e in extras if e.startswith('-')] or extras)}")
    return ns


def renamed_flag(ns: argparse.Namespace, prog: str, old: str, new: str) -> None:
    """A flag renamed in this release: the old spelling (dest ``deprecated_<new>``) still works for one release, with
    one deprecation line on stderr; both at once are refused."""
    old_dest, new_dest = f"deprecated_{new.lstrip('-').replace('-', '_')}", new.lstrip("-").replace("-", "_")
    value = getattr(ns, old_dest)
    delattr(ns, old_dest)
    if value is None:
        return
    if getattr(ns, new_dest) is not None:
        raise SsftError(f"{old} is the old spelling of {new}: give {new} only")
    print(f"{prog}: deprecated: {old} is now {new}; {old} will be removed in the next release", file=sys.stderr)
    setattr(ns, new_dest, value)


def model_dir(path: Path) -> Path:
    """A run folder (with model/) or a model folder itself (``ssft.pipeline.sources.model_dir``)."""
    from ssft.pipeline.sources import model_dir as find

    return find(path)


def model_sources(path: Path, folder: Path) -> tuple[Source, ...]:
    """What a command reading the model of ``path`` must not write into (``ssft.pipeline.sources``)."""
    from ssft.pipeline.sources import model_sources as sources

    return sources(path, folder)


def dataset_sources(name: str, what: str = "the dataset folder being read") -> tuple[Source, ...]:
    """The dataset folder ``--data`` names, when it is one here already (``ssft.pipeline.sources``)."""
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


def add_precision_argument(parser: argparse.ArgumentParser) -> None:
    """``--precision`` of every inference CLI (``ssft.core.precision``; checked by ``precision_of`` after parsing, so
    that ``--help`` answers without importing torch)."""
    parser.add_argument("--precision", default=None, metavar="{auto,fp32,bf16,int8}",
                        help="inference precision: auto (bf16 where the CPU or GPU computes it natively, else fp32), fp32, "
                             "bf16 (bf16 weights: the transformer computes with bfloat16 copies of its weights), "
                             "int8 (OpenVINO's static int8 calibrated on texts of the corpus served; needs "
                             "'ssft[openvino]'); default: auto")


def add_backend_argument(parser: argparse.ArgumentParser) -> None:
    """``--backend`` of the serving CLIs (``ssft.models.interop.openvino``; checked where it is used)."""
    parser.add_argument("--backend", default=None, metavar="{auto,torch,openvino}",
                        help="runtime of the transformer: torch, openvino (OpenVINO's CPU runtime; pip install "
                             "'ssft[openvino]') or auto (openvino where it is installed, the model converts and the job "
                             "is big enough to repay the conversion, else torch); default: auto")


def backend_value(ns: argparse.Namespace) -> str:
    """The ``--backend`` asked for, or the default: auto (``ssft.models.interop.openvino.serve``)."""
    return ns.backend or "auto"


def precision_value(ns: argparse.Namespace) -> str:
    """The ``--precision`` asked for, or the default (checked where it is used, so --help needs no torch)."""
    return ns.precision or "auto"


def precision_of(ns: argparse.Namespace) -> str:
    """The ``--precision`` asked for (checked), or the default."""
    from ssft.core import precision

    return precision.check(ns.precision or precision.DEFAULT, "--precision")
