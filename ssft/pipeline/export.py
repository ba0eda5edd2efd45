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

import json
import logging
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import HfApi, ModelCard, ModelCardData
from huggingface_hub.repocard_data import EvalResult

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
from ssft.models.interop.export import export_format, export_model

logger = logging.getLogger("ssft")
TAGS = ("ssft",)
RUN_FILES = ("recipe.yaml", "metrics.json", "run_info.json", MANIFEST)  # a model/ folder inside one of these is a run's
USAGE = {
    "CrossEncoder": ("from sentence_transformers import CrossEncoder\n"
                     "model = CrossEncoder(\"{path}\")  # identity activation: scores are ssft's logits\n"
                     "scores = model.predict([(\"a query\", \"a document\")])"),
    "SentenceTransformer": ("from sentence_transformers import SentenceTransformer\n"
                            "model = SentenceTransformer(\"{path}\")\n"
                            "q = model.encode_query([\"a query\"])\nd = model.encode_document([\"a document\"])\n"
                            "scores = model.similarity(q, d)"),
    "MultiVectorEncoder": ("from sentence_transformers import MultiVectorEncoder\n"
                           "model = MultiVectorEncoder(\"{path}\")\n"
                           "q = model.encode_query([\"a query\"])\nd = model.encode_document([\"a document\"])\n"
                           "scores = model.similarity(q, d)  # MaxSim"),
}


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


def _numeric_metrics(metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The run's metrics that are numbers ({row: {measure: value}}); anything else in a hand-edited or damaged
    metrics.json (a string, a list, null, a boolean, nan) is left out of the card, with a warning naming it."""
    kept: dict[str, dict[str, float]] = {}
    skipped = []
    for row, values in metrics.items():
        if not isinstance(values, dict):
            skipped.append(str(row))
            continue
        for measure, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                kept.setdefault(str(row), {})[str(measure)] = float(value)
            else:
                skipped.append(f"{row}.{measure}")
    if skipped:
        logger.warning("metrics.json: %d value(s) that are not numbers left out of the model card: %s", len(skipped),
                       ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else ""))
    return kept


def model_card(spec: dict[str, Any], info: dict[str, Any], recipe: dict[str, Any], metrics: dict[str, Any],
               repo_id: str | None) -> ModelCard:
    """The export's model card (``huggingface_hub.ModelCard``): base model, library, tags (ssft, method, architecture),
    datasets, the run's test metrics (the numeric ones) as model-index results, how to load it."""
    data = recipe.get("data") if isinstance(recipe.get("data"), dict) else {}
    dataset = data.get("dataset") if isinstance(data.get("dataset"), str) else None
    split = data.get("test_split", "test")
    split = split if isinstance(split, str) else "test"
    name = repo_id or f"ssft-{spec['architecture']}-{spec['method']}"
    metrics = _numeric_metrics(metrics)
    results = []
    for row, values in metrics.items():
        for measure, value in values.items():
            # the row (the model, the first stage, an interpolation) is the dataset config: model-index groups
            # results by task, dataset type, config and split
            results.append(EvalResult(task_type="text-ranking", dataset_type=dataset or "unknown",
                                      dataset_name=f"{dataset or 'unknown'} ({row})", dataset_config=row,
                                      dataset_split=split, metric_type=measure, metric_value=value,
                                      metric_name=f"{measure} ({row})"))
    base = spec.get("base_model")
    card_data = ModelCardData(
        library_name=info["library"], base_model=base if base and not Path(base).exists() else None,
        tags=[*TAGS, spec["method"], spec["architecture"], info["format"]],
        datasets=[dataset] if dataset and not Path(dataset).exists() else None, model_name=name,
        eval_results=results or None, pipeline_tag="text-ranking")
    usage = USAGE[info["loader"]].format(path=repo_id or "PATH")
    lines = [f"# {name}", "",
             f"A {spec['architecture']} ranker trained with ssft (semi-Siamese fine-tuning; method `{spec['method']}`) from "
             f"`{base}`, exported by `ssft-export` as a {info['format']} model for sentence-transformers' "
             f"`{info['loader']}`.", "", "## Load it", "", "```python", usage, "```", ""]
    if info.get("notes"):
        lines += ["## What the export keeps", ""] + [f"- {n}" for n in info["notes"]] + [""]
    if metrics:
        measures = sorted({m for values in metrics.values() for m in values})
        lines += ["## Results of the run (ssft-train, test split)", "", "| run | " + " | ".join(measures) + " |",
                  "|---|" + "---|" * len(measures)]
        for row, values in metrics.items():
            lines.append(f"| {row} | " + " | ".join(f"{values[m]:.4f}" if m in values else "–" for m in measures) + " |")
        lines.append("")
    return ModelCard.from_template(card_data, template_str="---\n{{ card_data }}\n---\n\n" + "\n".join(lines) + "\n")


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
    fmt = export_format(ranker, fmt)  # a refused method or a format that is not the architecture's: nothing written
    recipe, metrics = _run_files(run_dir if folder != run_dir else run_dir.parent)
    out.claim(write_manifest=False)  # the lock; the folder is checked again under it (another export may have ended)
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.path.name}.", dir=out.path.parent))
        info = export_model(ranker, tmp, fmt)
        model_card(ranker.spec, info, recipe, metrics, push_to_hub).save(tmp / "README.md")
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
