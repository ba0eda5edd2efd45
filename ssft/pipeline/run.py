"""What ``ssft-train RECIPE`` does, as stages joined by small frozen records:

1. ``prepare``  (pipeline/folder.py)   may the run write into its output folder; TrainingArguments
                (pipeline/schedule.py); the precisions ``auto`` resolves to, a resume keeping its checkpoint's
                (pipeline/precision.py)
2. ``load_inputs`` (pipeline/inputs.py) dataset, splits, first stages, teachers
3. ``build``    (pipeline/build.py)    ranker, training source, objective
   — a resume checks the fingerprints of the models and data against its checkpoint's (``run_fingerprints``) —
   — everything that can fail on bad input has failed by now (the run described: pipeline/describe.py); from
     here on the output folder is written —
   the starting model scored on the test split (metrics.json's ``start``) where it can rank (pipeline/report.py)
4. ``train``    (pipeline/schedule.py) one Trainer run, or one per hybrid phase; the best validation epoch kept,
                epoch 0 (the starting model) included
5. ``evaluate`` (pipeline/report.py)   the test split reranked or retrieved
6. ``write``    (pipeline/report.py)   run_info.json, the model card, metrics.json last

Every inference of a run (validation, the start, the test split, teachers) computes in one precision: ``eval.precision``
resolved once, in ``prepare``; the stages after it get a copy of the recipe holding the resolved value (the recipe
written to the folder keeps the user's ``auto``).
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import torch

from ssft.adapters.backbone import Backbone
from ssft.config.recipe import Recipe
from ssft.config.registry import ADAPTERS
from ssft.core.run_folder import OutputFolder
from ssft.firststage.runs import save_indexes
from ssft.models.embedding_cache import weights_fingerprint
from ssft.pipeline.build import build
from ssft.pipeline.check import check_model_files
from ssft.pipeline.describe import describe
from ssft.pipeline.folder import (
    RESUMABLE_CHANGES,
    USER_TENSORBOARD_DIR,
    Plan,
    open_output_folder,
    run_folder_state,
    train_output_folder,
)
from ssft.pipeline.inputs import load_inputs, run_fingerprints
from ssft.pipeline.precision import (
    checkpoint_precisions,
    eval_backend,
    eval_precision,
    resolved_recipe,
    start_file_precision,
    training_precision,
)
from ssft.pipeline.report import (
    START,
    evaluate,
    evaluate_start,
    freeze,
    print_summary,
    run_info,
    scoring_label,
    test_job_size,
    write_finished_run,
)
from ssft.pipeline.schedule import TrainedRun, schedule_for, training_arguments, training_setup
from ssft.training.callbacks.best_epoch import BestEpochCallback
from ssft.training.checkpoints import check_fingerprints, checkpoint_record

logger = logging.getLogger("ssft")

__all__ = ["RESUMABLE_CHANGES", "Plan", "prepare", "run_recipe", "training_precision"]


def run_recipe(recipe: Recipe, overwrite: bool = False, resume_with_changes: bool = False) -> dict[str, Any]:
    """Everything a recipe describes. Returns metrics.json's content.

    The output folder decides what happens: empty or absent, train; checkpoints of this same recipe but no
    metrics.json (a run that was killed), resume from the latest complete checkpoint (``resume_with_changes``: also
    when only ``RESUMABLE_CHANGES`` differ); a finished run, refused (``overwrite`` trains again from scratch,
    removing only what ssft-train wrote); a folder with anything else in it, refused. The folder is locked while
    the run writes into it. Under ``accelerate launch`` every process runs this; only the main one writes."""
    folder = train_output_folder(Path(recipe.training["output_dir"]))
    try:
        plan = prepare(recipe, folder, overwrite, resume_with_changes)
        run = resolved_recipe(recipe, plan.eval_precision)  # eval.precision resolved: what every stage computes in
        inputs = load_inputs(run)
        built = build(run, inputs)
        fingerprints = run_fingerprints(run, inputs)
        if plan.state == "resume":  # changed weights or data cannot resume exactly: refused before anything is written
            check_fingerprints(plan.folder.path, plan.record, fingerprints)
        backend = eval_backend(run, built.ranker, plan.args.device, test_job_size(run, inputs, built.ranker))
        schedule = schedule_for(run)
        backend_note = (f"start and test scored on {backend} (eval.backend: {run.eval.backend}; validation on torch)"
                        if run.eval.backend != "torch" else "")
        notes = describe(run, inputs, built, schedule.describe(plan.args),
                         "\n".join(n for n in (plan.precision_note, plan.eval_precision_note, backend_note) if n))
        open_output_folder(recipe, plan)
        main = plan.args.should_save
        start, start_info = evaluate_start(run, inputs, built, plan.folder.path, main, plan.state == "resume",
                                           start_file_precision(plan.record), plan.args.per_device_eval_batch_size,
                                           backend)
        record = {**checkpoint_precisions(plan.eval_precision, scoring_label(run, backend) if start is not None else None),
                  "fingerprints": fingerprints}
        trained = schedule.train(training_setup(run, plan, inputs, built, record), plan.args)
        finished, finished_validation = finish_and_validate(run, built.ranker, trained)
        built.ranker.eval()
        if main:
            built.ranker.save(plan.folder.path / "model")  # PEFT format, before any merge
        freeze(built.ranker)
        results, evaluation = evaluate(run, inputs, built, trained, plan.folder.path, write=main, backend=backend)
        if start is not None:
            results[START] = start
        if main:
            # one precision per table: every row the model scored (not the first stage's) was scored in this one
            scoring = {"precision": plan.eval_precision, "backend": backend,
                       "rows": [name for name in results if name != inputs.test_name]}
            extra = {"start": start_info, "precision": plan.eval_precision, "scoring": scoring,
                     "training_precision": training_precision(plan.args),
                     "resumed_with_changes": plan.resume_changes,
                     "processes": plan.args.world_size if plan.args.world_size > 1 else None,
                     "finished": finished, "finished_validation": finished_validation}
            info = run_info(run, inputs, built, trained, evaluation, notes, plan.started, extra)
            write_finished_run(plan.folder.path, recipe, results, info, plan.default_checkpoints)
            plan.folder.record_files()  # what this run wrote, told apart from files a user adds to model/ later
            save_indexes(inputs.bm25_indexes)  # the BM25 indexes built for this run, cached once it has succeeded
            print_summary(recipe, results, info, plan.folder.path, plan.started)
        return results
    finally:
        folder.release()
        # prepare() points TensorBoard at this run's logs/; a later process started from this one (a subprocess
        # ssft-train) must not inherit that folder as if the user had chosen it
        if USER_TENSORBOARD_DIR is None:
            os.environ.pop("TENSORBOARD_LOGGING_DIR", None)
        else:
            os.environ["TENSORBOARD_LOGGING_DIR"] = USER_TENSORBOARD_DIR


def finish_training(recipe: Recipe, ranker) -> list[str]:
    """The adapter's last step on the weights training hands back (``Adapter.finish``), on every backbone the
    recipe's method built, and the same fraction of the update (``Adapter.update_scale``) on the ranker's parameters
    that start at zero (``Ranker.zero_start_parameters``); the lines it logs (also in run_info.json)."""
    adapter = ADAPTERS.get(recipe.adapter.method)
    lines = []
    for module in ranker.modules():
        if isinstance(module, Backbone) and module.method == recipe.adapter.method:
            line = adapter.finish(module, recipe.adapter.config)
            if line:
                lines.append(line)
    scale = adapter.update_scale(recipe.adapter.config)
    own = ranker.zero_start_parameters() if scale != 1.0 else []
    if own:
        with torch.no_grad():
            for parameter in own:
                parameter.mul_(scale)
        lines.append(f"the ranker's {sum(p.numel() for p in own)} parameters that start at zero scaled by {scale:g} "
                     f"with the update")
    for line in lines:
        logger.info("%s", line)
    return lines


def finish_and_validate(recipe: Recipe, ranker, trained: TrainedRun) -> tuple[list[str], dict[str, float] | None]:
    """The adapter's last step (``finish_training``), then the weights the run hands back scored on validation as
    its epochs were, where that step changed them after the best epoch was chosen: the run reports what it hands
    back, not only the epoch it chose. Returns (the step's lines, the validation metrics or None: no last step, no
    validation set, or weights the step left as they were)."""
    finishes = ADAPTERS.get(recipe.adapter.method).finish_plan(recipe.adapter.config) is not None
    before = weights_fingerprint(ranker) if finishes else None
    finished = finish_training(recipe, ranker)
    trainer = trained.trainer
    if not finished or trainer.eval_dataset is None:
        return finished, None
    if weights_fingerprint(ranker) == before:
        # e.g. the scaled update of a run that hands back its start (a zero update stays zero): the weights are the
        # chosen epoch's, whose validation is known; scoring them again would only repeat it
        logger.info("the adapter's last step left the chosen epoch's weights as they were: not validated again")
        return finished, None
    return finished, _validate(trainer, recipe.eval.selection_metric, trained.best.best_value)


def _validate(trainer, metric: str, best_before: float) -> dict[str, float]:
    """The trainer's validation of its model's weights as they are now, outside the choice of the best epoch."""
    trainer.pop_callback(BestEpochCallback)  # the choice is made: this evaluation is not a candidate epoch
    was_training = trainer.model.training
    trainer.model.eval()
    try:
        metrics = trainer.evaluate()
    finally:
        trainer.model.train(was_training)
    measures = {k.removeprefix("eval_"): float(v) for k, v in metrics.items() if k.startswith("eval_")}
    if metric in measures:
        logger.info("validation of the weights handed back: %s %.4f (the best epoch before the last step: %.4f)",
                    metric, measures[metric], best_before)
    return measures


def prepare(recipe: Recipe, folder: OutputFolder, overwrite: bool, resume_with_changes: bool) -> Plan:
    """Stage 1: the folder's state, the run's TrainingArguments and inference precision; nothing is written."""
    started = time.time()
    state, changes = run_folder_state(recipe, folder, overwrite, resume_with_changes)
    record = checkpoint_record(folder.path) if state == "resume" else None
    recipe.check_model()  # a missing model, or lengths beyond its position embeddings, fail now, not after the data
    check_model_files(recipe)  # what the model folders' config, tokenizer and safetensors header say, before the data
    kwargs, args, precision_note = training_arguments(recipe, folder.path, record, state == "resume")
    # int8 on a GPU: refused now; auto: resolved once for the whole run (a resume keeps its checkpoint's)
    resolved, eval_note = eval_precision(recipe, args.device, record, state == "resume")
    return Plan(folder, state, changes, kwargs, args, "save_strategy" not in recipe.training, started, precision_note,
                resolved, eval_note, record)
