"""``ssft-export``: a trained run (or a saved model folder) written in the format other libraries load
(``ssft.models.interop.export``), with a model card, atomically, optionally pushed to the Hugging Face hub.

The folder is written beside ``--output`` under a temporary name and renamed into place once complete: an export
that fails or is killed never leaves a half-written folder, and an existing folder is replaced only with
``overwrite`` (a non-empty one is refused otherwise), the previous one kept until the new one is in place.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import HfApi, ModelCard, ModelCardData
from huggingface_hub.repocard_data import EvalResult

from ssft.core.errors import SsftError
from ssft.core.io import replace_folder
from ssft.models.base import load_ranker, saved_model_folder
from ssft.models.interop.export import export_format, export_model

TAGS = ("ssft",)
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


def model_card(spec: dict[str, Any], info: dict[str, Any], recipe: dict[str, Any], metrics: dict[str, Any],
               repo_id: str | None) -> ModelCard:
    """The export's model card (``huggingface_hub.ModelCard``): base model, library, tags (ssft, method, architecture),
    datasets, the run's test metrics as model-index results, how to load it."""
    data = recipe.get("data") if isinstance(recipe.get("data"), dict) else {}
    dataset = data.get("dataset") if isinstance(data.get("dataset"), str) else None
    split = data.get("test_split", "test")
    name = repo_id or f"ssft-{spec['architecture']}-{spec['method']}"
    results = []
    for row, values in metrics.items():
        if not isinstance(values, dict):
            continue
        for measure, value in values.items():
            if isinstance(value, (int, float)):
                # the row (the model, the first stage, an interpolation) is the dataset config: model-index groups
                # results by task, dataset type, config and split
                results.append(EvalResult(task_type="text-ranking", dataset_type=dataset or "unknown",
                                          dataset_name=f"{dataset or 'unknown'} ({row})", dataset_config=row,
                                          dataset_split=split, metric_type=measure, metric_value=float(value),
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
        lines += ["## Results of the run (ssft-train, test split)", "", "| run | " + " | ".join(
            sorted({m for v in metrics.values() if isinstance(v, dict) for m in v})) + " |"]
        measures = sorted({m for v in metrics.values() if isinstance(v, dict) for m in v})
        lines.append("|---|" + "---|" * len(measures))
        for row, values in metrics.items():
            if isinstance(values, dict):
                lines.append(f"| {row} | " + " | ".join(f"{values.get(m, float('nan')):.4f}" for m in measures) + " |")
        lines.append("")
    return ModelCard.from_template(card_data, template_str="---\n{{ card_data }}\n---\n\n" + "\n".join(lines) + "\n")


def check_output(output: Path, overwrite: bool) -> None:
    """Refuse an output that is a file, or a non-empty folder without ``overwrite`` (before anything is written)."""
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise SsftError(f"--output {output}: exists and is not a folder")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise SsftError(f"--output {output}: not empty; pass --overwrite to replace it")


def export_run(run_dir: str | Path, output: str | Path, fmt: str = "auto", overwrite: bool = False,
               push_to_hub: str | None = None, trust_remote_code: bool = False, private: bool = False) -> dict[str, Any]:
    """Export the model of ``run_dir`` (a run folder or a saved model folder) into ``output``; returns the export's
    info ({format, library, loader, notes, output}). Nothing is written when anything is refused."""
    run_dir, output = Path(run_dir), Path(output)
    folder = saved_model_folder(run_dir)
    if folder is None:
        raise SsftError(f"{run_dir}: not a run folder or saved ssft model (no model/ssft_model.json)")
    check_output(output, overwrite)
    ranker = load_ranker(folder, trust_remote_code=trust_remote_code)
    fmt = export_format(ranker, fmt)  # a refused method or a format that is not the architecture's: nothing written
    recipe, metrics = _run_files(run_dir if folder != run_dir else run_dir.parent)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        info = export_model(ranker, tmp, fmt)
        model_card(ranker.spec, info, recipe, metrics, push_to_hub).save(tmp / "README.md")
        replace_folder(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if push_to_hub:
        push(output, push_to_hub, private)
    return {**info, "output": str(output)}


def push(folder: Path, repo_id: str, private: bool = False) -> None:
    """Upload an export folder to the hub repository ``repo_id`` (created if needed), with ``huggingface_hub``."""
    api = HfApi()
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message="ssft-export")
    except Exception as err:  # offline, no token, no permission
        first = str(err).strip().splitlines()[0] if str(err).strip() else "no message"
        raise SsftError(f"--push-to-hub {repo_id}: upload failed ({type(err).__name__}: {first}); the export is in "
                        f"{folder}") from None


__all__ = ["check_output", "export_run", "model_card", "push"]
