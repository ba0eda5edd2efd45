"""Stage 1 of ssft-train: may this run write into its output folder, and as what (new, resume, overwrite)?
Nothing is written here; ``ssft.core.run_folder`` holds the rule every CLI follows. The stage's answer is a ``Plan``;
``open_output_folder`` is where writing starts, once everything that can fail on bad input has failed."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainingArguments

from ssft.config.recipe import Recipe
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_text
from ssft.core.run_folder import TRAIN_MARKERS, TRAIN_OUTPUTS, OutputFolder, Source, local_dataset_folder
from ssft.training.checkpoints import complete_checkpoints

logger = logging.getLogger("ssft")

# the user's own TensorBoard folder, if any, read before ssft sets the variable for its run
USER_TENSORBOARD_DIR = os.environ.get("TENSORBOARD_LOGGING_DIR")


# recipe keys a resume may change with --resume-with-changes: optimiser settings (after a NaN stop, a lower learning
# rate or a gradient clip continues from the last good checkpoint); anything else changes what the checkpoints mean
# eval.backend too: it runs only the start's and the test split's scoring (validation stays on torch), and a resume
# scores the start again when its run file was scored on another backend, so no table mixes two
RESUMABLE_CHANGES = ("training.learning_rate", "model.head_learning_rate", "training.max_grad_norm", "eval.backend")


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    """The dotted keys where two recipe dicts differ, in order."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in list(old) + [k for k in new if k not in old]:
            found += _differences(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
        return found
    return [] if old == new else [where or "<recipe>"]


def train_output_folder(out: Path) -> OutputFolder:
    """ssft-train's output folder; logs/ is ssft's only when ssft chose it as the TensorBoard folder."""
    outputs = tuple(o for o in TRAIN_OUTPUTS if o != "logs" or not USER_TENSORBOARD_DIR)
    return OutputFolder(out, "ssft-train", outputs, TRAIN_MARKERS, where="training.output_dir")


def train_sources(recipe: Recipe) -> tuple[Source, ...]:
    """What a run reads from local paths (the dataset folder, model and teacher folders, data.train and first-stage
    files): its output folder must not be, hold or lie inside any of them (--overwrite would clear what it reads)."""
    found: list[Source] = []
    dataset = local_dataset_folder(recipe.data.dataset)
    if dataset is not None:
        found.append((dataset, "the dataset folder the run trains on"))
    named = [(recipe.model.name, "the model folder (model.name)"),
             (getattr(recipe.model.config, "document_name", None), "the document model folder (model.document_name)"),
             (recipe.data.train, "data.train"), (recipe.eval.first_stage, "the first-stage run file (eval.first_stage)"),
             (recipe.eval.validation_first_stage, "the validation first-stage run file"),
             (recipe.loss.options.get("teacher"), "the teacher (loss.teacher)"),
             (recipe.distillation.teacher if recipe.distillation is not None else None,
              "the teacher (distillation.teacher)")]
    for value, what in named:
        if isinstance(value, str) and value and Path(value).expanduser().exists():
            found.append((Path(value).expanduser(), what))
    return tuple(found)


def run_folder_state(recipe: Recipe, folder: OutputFolder, overwrite: bool,
                     resume_with_changes: bool = False) -> tuple[str, list[str]]:
    """('new' | 'resume' | 'overwrite', the recipe keys a resume changes). Refused: a folder ssft-train must not
    write into (``OutputFolder.check``), a finished run (metrics.json) and checkpoints of another recipe, unless
    ``overwrite``; a resume that changes anything but ``RESUMABLE_CHANGES`` (those only with
    ``resume_with_changes``)."""
    out = folder.path
    folder.add_sources(*train_sources(recipe))
    # under accelerate launch only process 0 writes (and locks); the others must not mistake its lock for another run's
    folder.check(check_lock=os.environ.get("RANK", "0") == "0")
    if overwrite:
        folder.refuse_unrecorded()  # a file a user put inside model/ (or logs/ ...) would go with it
        return "overwrite", []
    if (out / "metrics.json").is_file():
        raise SsftError(f"{out} holds a finished run (metrics.json); pass --overwrite to train it again, "
                        f"or set training.output_dir to another folder")
    folders = [out] + sorted(out.glob("phase-*"))
    if not any(complete_checkpoints(f) for f in folders) and not list(out.glob("phase-*/phase.json")):
        return "new", []
    saved_file = out / "recipe.yaml"
    try:
        saved = yaml.safe_load(saved_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        saved = None
    if not isinstance(saved, dict):
        raise SsftError(f"{out} holds checkpoints but no readable recipe.yaml to check them against; "
                        f"pass --overwrite to discard them")
    current = yaml.safe_load(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    for d in (saved, current):
        d.get("training", {}).pop("output_dir", None)
    differs = _differences(saved, current)
    fixed = [key for key in differs if key not in RESUMABLE_CHANGES]
    if fixed:
        raise SsftError(f"{out} holds checkpoints of a different recipe ({fixed[0]} differs); pass --overwrite to "
                        f"discard them, or set training.output_dir to another folder")
    if differs and not resume_with_changes:
        raise SsftError(f"{out} holds checkpoints trained with another {differs[0]}; pass --resume-with-changes to "
                        f"continue from them with the new value, or --overwrite to start over")
    return "resume", differs


@dataclass(frozen=True)
class Plan:
    """Stage 1's answer: what the output folder allows, and the run's TrainingArguments."""

    folder: OutputFolder
    state: str  # new | resume | overwrite
    resume_changes: list[str]  # the recipe keys --resume-with-changes changes
    training_kwargs: dict[str, Any]
    args: TrainingArguments
    default_checkpoints: bool  # ssft's own checkpoints (no training.save_strategy): removed once the run finishes
    started: float
    precision_note: str  # what training.bf16: auto resolved to ("" when the recipe or accelerate named a precision)
    eval_precision: str = "fp32"  # eval.precision resolved: every inference of the run (a resume: its checkpoint's)
    eval_precision_note: str = ""  # what eval.precision: auto resolved to ("" when the recipe names a precision)
    record: dict[str, Any] | None = None  # a resume: the marker of the checkpoint it resumes (what made it)


def open_output_folder(recipe: Recipe, plan: Plan) -> None:
    """Where writing starts: the main process claims the folder (lock, manifest), removes an earlier run's outputs
    (--overwrite), removes metrics.json (written last) and writes the resolved recipe; the others wait."""
    folder, args = plan.folder, plan.args
    with args.main_process_first(local=False, desc="preparing the output folder"):
        if not args.should_save:
            return
        folder.claim()
        if plan.state == "overwrite":
            removed = folder.clear()
            if removed:
                logger.info("--overwrite: removed the earlier run's outputs from %s: %s", folder.path, ", ".join(removed))
        folder.mark_unfinished()  # a crash midway never leaves a folder that looks complete
        if plan.resume_changes:
            logger.warning("--resume-with-changes: continuing from the checkpoints with a new %s",
                           ", ".join(plan.resume_changes))
        atomic_write_text(folder.path / "recipe.yaml", yaml.safe_dump(recipe.to_dict(), sort_keys=False))
