"""``ssft-export``: a trained run (or a saved model folder) written in the format other libraries load
(``ssft.models.interop.export``), with a model card, atomically, optionally pushed to the Hugging Face hub.

The folder follows the output-folder rule of ``ssft.core.run_folder``: new, empty or an earlier ssft-export (its
manifest ``.ssft-outputs.json`` lists what the export wrote), that one replaced only with ``overwrite``; never the
run or model being exported, a folder holding one, a folder inside one, the current folder or one above it. It is
locked while the export is written (a second export into it is refused), the export is built beside it under a
temporary name and put in place whole once complete: one that fails or is killed never leaves a half-written
folder, the previous one kept until the new one is in place; a user's own files in the folder stay.
"""
from __future__ import annotations

import glob
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import HfApi, ModelCard

from ssft.core.errors import SsftError
from ssft.core.paths import SPEC_FILE
from ssft.core.run_folder import (
    MANIFEST,
    OutputFolder,
    Source,
    missing_model_message,
    probe_writable,
    refuse_current_folder,
    refuse_overlap,
    resolved,
)
from ssft.models.base import load_ranker, saved_model_folder
from ssft.models.interop.card import model_card as build_card
from ssft.models.interop.export import export_format, export_model
from ssft.models.interop.openvino import write_openvino

logger = logging.getLogger("ssft")
BUILD_MARK = "ssft-build-"  # an export is built beside its folder in ".<name>.ssft-build-<random>"
RUN_FILES = ("recipe.yaml", "metrics.json", "run_info.json", MANIFEST)  # a model/ folder inside one of these is a run's


def _run_files(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(recipe, metrics) of a run folder; {} for what is not there (a bare saved model folder)."""
    recipe, metrics = {}, {}
    if (run_dir / "recipe.yaml").is_file():
        try:
            recipe = yaml.safe_load((run_dir / "recipe.yaml").read_text(encoding="utf-8")) or {}
        except yaml.YAMLError:
            recipe = {}
    if (run_dir / "metrics.json").is_file():
        try:
            metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise SsftError(f"{run_dir / 'metrics.json'}: invalid JSON: {err.msg}") from None
    return (recipe if isinstance(recipe, dict) else {}), (metrics if isinstance(metrics, dict) else {})


def model_card(spec: dict[str, Any], info: dict[str, Any], recipe: dict[str, Any], metrics: dict[str, Any],
               repo_id: str | None, run_info: dict[str, Any] | None = None, served_precision: str = "fp32") -> ModelCard:
    """The export's model card (``ssft.models.interop.card``); metrics.json entries that are not numbers (a
    hand-edited or damaged file: a string, a list, null, a boolean, nan) are left out, with a warning naming them."""
    card, skipped = build_card(spec, info, recipe, metrics, repo_id, run_info, served_precision)
    if skipped:
        logger.warning("metrics.json: %d value(s) that are not numbers left out of the model card: %s", len(skipped),
                       ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else ""))
    return card


def _run_info(run_dir: Path) -> dict[str, Any]:
    """run_info.json of a run folder ({} when absent or unreadable: the card then says less)."""
    try:
        info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def export_sources(run_dir: Path, folder: Path) -> tuple[Source, ...]:
    """What an export reads and must never write into: the run folder around the model (named first: an output
    holding both is named by the run) and the model folder."""
    sources: list[Source] = []
    if folder != run_dir:
        sources.append((run_dir, "the run folder being exported"))
    elif folder.name == "model" and any((folder.parent / name).exists() for name in RUN_FILES):
        sources.append((folder.parent, "the run folder being exported"))  # its metrics and recipe go into the card
    return (*sources, (folder, "the model folder being exported"))


def output_folder(output: Path, overwrite: bool, sources: tuple[Source, ...] = ()) -> OutputFolder:
    """The export's folder under the output-folder rule (``ssft.core.run_folder``), checked before anything is
    written: new, empty or an earlier ssft-export (replaced only with ``overwrite``); never the run or model being
    exported, a folder holding one (a parent) or a folder inside one; never the current folder or one above it (the
    export is renamed into place). A symbolic link to a folder is followed: the export replaces the folder it
    points to, and the link stays."""
    if output.is_symlink() and output.exists():
        output = resolved(output)
    refuse_overlap(output, sources, "--output")
    refuse_current_folder(output, "--output")
    folder = OutputFolder(output, "ssft-export", (), (), where="--output", sources=sources, finished=MANIFEST,
                          overwrite=overwrite)
    folder.check()
    probe_writable(output.parent, "--output")  # the export is built beside the folder and renamed into it
    return folder


def check_output(output: Path, overwrite: bool) -> None:
    """Refuse an output ssft-export must not write (see ``output_folder``; before anything is written)."""
    output_folder(Path(output), overwrite)


def export_run(run_dir: str | Path, output: str | Path, fmt: str = "auto", overwrite: bool = False,
               push_to_hub: str | None = None, trust_remote_code: bool = False, private: bool = False) -> dict[str, Any]:
    """Export the model of ``run_dir`` (a run folder or a saved model folder) into ``output``; returns the export's
    info ({format, library, loader, notes, output}). Nothing is written when anything is refused.

    The folder is locked (``.ssft.lock``, created with it when new) from before the export is built until it is in
    place, so a second export into the same folder is refused instead of both "succeeding"; the export is built in a
    temporary folder beside it and put in place whole (``OutputFolder.publish``), with its manifest naming what
    ssft-export wrote; what else a user keeps in the folder stays."""
    run_dir, output = Path(run_dir), Path(output)
    folder = saved_model_folder(run_dir)
    if folder is None:
        raise SsftError(missing_model_message(run_dir, SPEC_FILE))
    out = output_folder(output, overwrite, export_sources(run_dir, folder))
    ranker = load_ranker(folder, trust_remote_code=trust_remote_code)
    openvino = fmt == "openvino"  # the architecture's own format, with the OpenVINO IR of its transformer(s) beside it
    fmt = export_format(ranker, "auto" if openvino else fmt)  # a refused method or another architecture's format: nothing written
    run_root = run_dir if folder != run_dir else run_dir.parent
    recipe, metrics = _run_files(run_root)
    out.claim(write_manifest=False)  # the lock; the folder is checked again under it (another export may have ended)
    tmp = None
    try:
        # a build folder of this output left by a killed export: no export of it runs now (we hold its lock)
        for stale in out.path.parent.glob(f".{glob.escape(out.path.name)}.{BUILD_MARK}*"):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.path.name}.{BUILD_MARK}", dir=out.path.parent))
        info = export_model(ranker, tmp, fmt)
        if openvino:
            written = write_openvino(tmp)
            graphs = ", ".join(w for w in written if w.endswith(".xml"))
            info["notes"] = [*info.get("notes", []),
                             f"OpenVINO IR beside it ({graphs}): sentence-transformers loads it with "
                             f"backend=\"openvino\" (float32 weights; the runtime picks its precision)"]
            info["openvino"] = [w for w in written if w.endswith(".xml")]
        served = str(next(ranker.parameters()).dtype).removeprefix("torch.").replace("float32", "fp32").replace(
            "bfloat16", "bf16").replace("float16", "fp16")
        model_card(ranker.spec, info, recipe, metrics, push_to_hub, _run_info(run_root), served).save(tmp / "README.md")
        out.publish(tmp, [p.name for p in tmp.iterdir()])
        if push_to_hub:
            push(out.path, push_to_hub, private)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        out.abandon()
        raise
    out.release()
    return {**info, "output": str(output)}


def push(folder: Path, repo_id: str, private: bool = False) -> None:
    """Upload an export folder to the hub repository ``repo_id`` (created if needed), with ``huggingface_hub``."""
    api = HfApi()
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message="ssft-export",
                          ignore_patterns=[".ssft*", ".*.tmp"])  # the export, not its manifest and lock
    except Exception as err:  # offline, no token, no permission
        first = str(err).strip().splitlines()[0] if str(err).strip() else "no message"
        raise SsftError(f"--push-to-hub {repo_id}: upload failed ({type(err).__name__}: {first}); the export is in "
                        f"{folder}") from None


__all__ = ["check_output", "export_run", "export_sources", "model_card", "output_folder", "push"]
