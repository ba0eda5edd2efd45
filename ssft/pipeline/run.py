"""What ``ssft-train RECIPE`` does, as stages joined by small frozen records:

1. ``prepare``  (pipeline/folder.py)   may the run write into its output folder; TrainingArguments; the precisions
                                       ``auto`` resolves to (a resume keeps its checkpoint's)
2. ``load_inputs`` (pipeline/inputs.py) dataset, splits, first stages, teachers
3. ``build``    (pipeline/build.py)    ranker, training source, objective
   — a resume checks the fingerprints of the models and data against its checkpoint's (``run_fingerprints``) —
   — everything that can fail on bad input has failed by now; from here on the output folder is written —
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

import dataclasses
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import TrainingArguments

from ssft.config.recipe import Recipe
from ssft.config.registry import LOSSES
from ssft.core import precision
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_text
from ssft.core.run_folder import GENERATED_QUERIES, OutputFolder
from ssft.data.examples import PairDataset
from ssft.firststage.runs import save_indexes
from ssft.pipeline.build import BuiltRun, GroupSource, build
from ssft.pipeline.check import check_model_files
from ssft.pipeline.folder import RESUMABLE_CHANGES, USER_TENSORBOARD_DIR, run_folder_state, train_output_folder
from ssft.pipeline.inputs import RunInputs, load_inputs
from ssft.pipeline.report import START, evaluate, evaluate_start, freeze, print_summary, run_info, write_finished_run
from ssft.pipeline.schedule import TrainingSetup, schedule_for
from ssft.training.callbacks import build_callbacks, callback_name
from ssft.training.checkpoints import check_fingerprints, checkpoint_record, content_fingerprint, weights_fingerprint

logger = logging.getLogger("ssft")

__all__ = ["RESUMABLE_CHANGES", "run_recipe"]


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
        run = resolved_recipe(recipe, plan)  # eval.precision resolved: what every stage below computes in
        inputs = load_inputs(run)
        built = build(run, inputs)
        fingerprints = run_fingerprints(run, inputs)
        if plan.state == "resume":  # changed weights or data cannot resume exactly: refused before anything is written
            check_fingerprints(plan.folder.path, plan.record, fingerprints)
        schedule = schedule_for(run)
        notes = describe(run, inputs, built, schedule.describe(plan.args),
                         "\n".join(n for n in (plan.precision_note, plan.eval_precision_note) if n))
        open_output_folder(recipe, plan)
        main = plan.args.should_save
        start, start_info = evaluate_start(run, inputs, built, plan.folder.path, main, plan.state == "resume",
                                           start_file_precision(plan.record), plan.args.per_device_eval_batch_size)
        record = {"eval_precision": plan.eval_precision,  # what a resume with eval.precision: auto keeps
                  "start_precision": plan.eval_precision if start is not None else None,  # of run.start.<split>.trec
                  "fingerprints": fingerprints}
        trained = schedule.train(training_setup(run, plan, inputs, built, record), plan.args)
        built.ranker.eval()
        if main:
            built.ranker.save(plan.folder.path / "model")  # PEFT format, before any merge
        freeze(built.ranker)
        results, evaluation = evaluate(run, inputs, built, trained, plan.folder.path, write=main)
        if start is not None:
            results[START] = start
        if main:
            # one precision per table: every row the model scored (not the first stage's) was scored in this one
            scoring = {"precision": plan.eval_precision, "backend": "torch",
                       "rows": [name for name in results if name != inputs.test_name]}
            extra = {"start": start_info, "precision": plan.eval_precision, "scoring": scoring,
                     "training_precision": training_precision(plan.args),
                     "resumed_with_changes": plan.resume_changes,
                     "processes": plan.args.world_size if plan.args.world_size > 1 else None}
            info = run_info(run, inputs, built, trained, evaluation, notes, plan.started, extra)
            write_finished_run(plan.folder.path, recipe, results, info, plan.default_checkpoints)
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


def training_precision(args: TrainingArguments) -> str:
    """What the training steps computed in: the recipe's bf16 / fp16 or the accelerate config's mixed precision
    (fp16 autocasts on GPUs only)."""
    mixed = args.mixed_precision
    return "bf16" if mixed == "bf16" else "fp16" if mixed == "fp16" and args.device.type == "cuda" else "fp32"


def resolve_auto_bf16(native: bool, recorded: str | None, resuming: bool, defaulted: bool) -> tuple[bool, str]:
    """training.bf16: auto → (bf16 or not, the run's note). A new run takes bf16 where the device computes it
    natively (a CUDA GPU with bf16, a CPU with avx512_bf16 / amx_bf16), never emulated. A resumed run keeps the
    precision its checkpoint was trained in, so that it resumes exactly (also on another machine); a checkpoint
    from before checkpoints recorded it, of a recipe without training.bf16, trained in float32 (then the default)."""
    if resuming and recorded is None and defaulted:
        recorded = "no"
    if resuming and recorded is not None:
        bf16 = recorded == "bf16"
        kept = f"training.bf16: auto, kept from the checkpoint this run resumes{'' if bf16 == native else ', unlike this device'}"
        return bf16, f"training precision: {'bf16 mixed precision' if bf16 else 'float32'} ({kept})"
    return native, ("training precision: bf16 mixed precision (training.bf16: auto, native on this device)" if native
                    else "training precision: float32 (training.bf16: auto, no native bf16 on this device)")


def resolve_eval_precision(asked: str, native: str, recorded: str | None, resuming: bool) -> tuple[str, str]:
    """eval.precision → (the precision every inference of the run computes in, the run's note). ``native``: what
    ``asked`` resolves to on this device. A named precision is the recipe's; ``auto`` takes ``native`` in a new run and
    in a resumed run the precision its checkpoint recorded, so that its validation history goes on in one precision
    (also on another machine); a checkpoint from before the record: ``native``, said so."""
    if asked != "auto":
        return native, ""
    if resuming and recorded in precision.RESOLVED:
        kept = f"kept from the checkpoint this run resumes{'' if recorded == native else ', unlike this device'}"
        return recorded, f"inference precision: {recorded} (eval.precision: auto, {kept})"
    if resuming:
        return native, (f"inference precision: {native} (eval.precision: auto, resolved on this device: the checkpoint "
                        "this run resumes predates the record of its inference precision)")
    why = "native" if native == "bf16" else "no native bf16"
    return native, f"inference precision: {native} (eval.precision: auto, {why} on this device)"


def resolved_recipe(recipe: Recipe, plan: Plan) -> Recipe:
    """A copy of ``recipe`` whose eval.precision is the one the run computes in (``plan.eval_precision``): validation,
    the start, the test split and the teachers all read it there."""
    if recipe.eval.precision == plan.eval_precision:
        return recipe
    return dataclasses.replace(recipe, eval=dataclasses.replace(recipe.eval, precision=plan.eval_precision))


def start_file_precision(record: dict[str, Any] | None) -> str | None:
    """The precision the start's run file of a resumed run was scored in: as its checkpoint records it; before the
    record, float32 (the start was scored in float32 then, whatever eval.precision said)."""
    if record is None:
        return None
    return record.get("start_precision") if "eval_precision" in record else "fp32"


def run_fingerprints(recipe: Recipe, inputs: RunInputs) -> dict[str, dict[str, str]]:
    """What a run is made from, as a checkpoint records it (key -> {"sha256", "what": how an error names it}): the
    files of every model it loads weights from (model, document tower, teachers, query generator) and the data it
    trains, validates and tests on (corpus, queries, each split's qrels or data.train's rows, the first-stage
    candidates and BM25 negatives), by content, as read (``ssft.training.checkpoints``)."""
    d, e, distill = recipe.data, recipe.eval, recipe.distillation
    found: dict[str, dict[str, str]] = {}
    models = {"model.name": recipe.model.name, "model.document_name": recipe.model.document_name,
              "loss.teacher": inputs.in_loop_teacher,
              "distillation.teacher": distill.teacher if distill is not None else None,
              "distillation.generated_queries.model": (distill.generated_queries.model if distill is not None
                                                       and distill.generated_queries is not None else None)}
    for key, name in models.items():
        if name:
            found[key] = {"sha256": weights_fingerprint(name), "what": f"the files of {key} ({name})"}
    dataset = inputs.dataset
    where = f"data.dataset ({dataset.path})"
    data: dict[str, tuple[str, Any]] = {
        "corpus": (f"the corpus of {where}", dataset.corpus.items()),
        "queries": (f"the queries of {where}", dataset.queries.items()),
        "data.train_split": (f"the qrels of data.train_split '{d.train_split}' in {where}", inputs.train_qrels.items()),
        "data.validation_split": (f"the qrels of data.validation_split '{d.validation_split}' in {where}",
                                  (inputs.validation_qrels or {}).items()),
        "data.test_split": (f"the qrels of data.test_split '{d.test_split}' in {where}", inputs.test_qrels.items()),
        "eval.first_stage": (f"the candidates of eval.first_stage ({e.first_stage}) for the test queries",
                             inputs.test_first.items()),
        "eval.validation_first_stage": ("the validation candidates (eval.validation_first_stage: "
                                        f"{e.validation_first_stage or 'bm25'})", (inputs.validation_first or {}).items()),
        "data.negatives": (f"the BM25 negatives of the training queries in {where}", (inputs.negatives_run or {}).items()),
    }
    if inputs.train_source is not None:
        data["data.train"] = (f"the rows of data.train ({d.train})", inputs.train_source.examples)
    for key, (what, items) in data.items():
        found[key] = {"sha256": content_fingerprint(items), "what": what}
    return found


def prepare(recipe: Recipe, folder: OutputFolder, overwrite: bool, resume_with_changes: bool) -> Plan:
    """Stage 1: the folder's state, the run's TrainingArguments and inference precision; nothing is written."""
    started = time.time()
    state, changes = run_folder_state(recipe, folder, overwrite, resume_with_changes)
    record = checkpoint_record(folder.path) if state == "resume" else None
    recipe.check_model()  # a missing model, or lengths beyond its position embeddings, fail now, not after the data
    check_model_files(recipe)  # what the model folders' config, tokenizer and safetensors header say, before the data
    # a checkpoint every epoch (only the latest kept) lets a killed run resume; removed once the run finishes
    # unless the recipe asks for checkpoints itself (training.save_strategy)
    kwargs = {"remove_unused_columns": False, "report_to": ["tensorboard"], "save_strategy": "epoch",
              "save_total_limit": 1, "eval_strategy": "epoch" if recipe.data.validation_split else "no",
              "logging_strategy": "steps", "logging_steps": 10, "disable_tqdm": not sys.stderr.isatty(),
              "seed": recipe.seed, "dataloader_pin_memory": torch.cuda.is_available(), **recipe.training}
    defaulted = "bf16" not in kwargs and not kwargs.get("fp16") and os.environ.get("ACCELERATE_MIXED_PRECISION",
                                                                                     "no") == "no"
    if defaulted:
        # the default when neither the recipe nor the accelerate config names a precision: BENCHMARKS.md
        # § training_precision finds bf16 training no worse than float32 (cross, dense, ColBERT) and 1.35-1.48x faster
        kwargs["bf16"] = "auto"
    precision_note = ""  # a note of describe(), logged once the inputs are known good: a bad input stays one line
    if kwargs.get("bf16") == "auto":
        kwargs["bf16"], precision_note = resolve_auto_bf16(
            precision.bf16_native("cuda" if torch.cuda.is_available() else "cpu"),
            record.get("mixed_precision") if record is not None else None, state == "resume", defaulted)
    if (kwargs.get("bf16") or kwargs.get("bf16_full_eval")) and not torch.cuda.is_available():
        # transformers accepts bf16 without a GPU only with use_cpu (which accelerate then autocasts on the CPU);
        # without a GPU there is nothing else to train on, so training.bf16 alone is enough
        kwargs.setdefault("use_cpu", True)
        if kwargs.get("bf16") and not precision.cpu_bf16_native():
            logger.warning("training.bf16 on a CPU without native bf16 (no amx_bf16 / avx512_bf16 flag): torch emulates "
                           "it, which is usually slower than float32")
    # TensorBoard goes to this run's logs/ (HF reads the variable when a Trainer is built), unless the user set it
    os.environ["TENSORBOARD_LOGGING_DIR"] = USER_TENSORBOARD_DIR or str(folder.path / "logs")
    try:
        args = TrainingArguments(**kwargs)
    except (ValueError, TypeError) as err:
        raise SsftError(f"{recipe.source}: training: {str(err).splitlines()[0]}") from None
    in_loop = LOSSES.get(recipe.loss.name).needs_teacher
    if args.world_size > 1 and (in_loop or recipe.distillation is not None):
        # the teacher scores and embedding targets are per process: nothing gathers them across processes yet
        raise SsftError(f"{recipe.source}: {'loss.teacher' if in_loop else 'distillation'}: distillation trains "
                        f"in one process (no accelerate launch --num_processes {args.world_size})")
    if args.fp16 and args.device.type == "cpu":
        logger.warning("training.fp16 on a CPU: accelerate autocasts fp16 on GPUs only, this run trains in float32 "
                       "(for mixed precision on a CPU use training.bf16)")
    # int8 on a GPU: refused now; auto: resolved once for the whole run (a resume keeps its checkpoint's)
    native = precision.resolve(recipe.eval.precision, args.device, f"{recipe.source}: eval.precision")
    eval_precision, eval_note = resolve_eval_precision(recipe.eval.precision, native,
                                                       record.get("eval_precision") if record is not None else None,
                                                       state == "resume")
    return Plan(folder, state, changes, kwargs, args, "save_strategy" not in recipe.training, started, precision_note,
                eval_precision, eval_note, record)


def describe(recipe: Recipe, inputs: RunInputs, built: BuiltRun, schedule: str, precision_note: str = "") -> list[str]:
    """What the run trains on, validates and tests with: logged now, printed again at the end, kept in run_info."""
    d, e, distill = recipe.data, recipe.eval, recipe.distillation
    if not isinstance(built.source, GroupSource):
        notes = [f"training: query-only distillation from {distill.teacher} on {len(built.source.texts)} queries of "
                 f"{d.dataset}/{'+'.join(distill.query_splits)} (test queries excluded), " + schedule]
    elif inputs.train_source is not None:
        negatives = "in-batch negatives only" if d.num_negatives == 0 else f"{d.num_negatives} negative(s) each"
        source = inputs.train_source
        subsampled = ""
        if d.max_train_queries is not None or d.max_positives_per_query is not None:
            subsampled = (f" ({len({source.query_key(ex) for ex in source.examples})} queries"
                          + (f" drawn, at most {d.max_train_queries}" if d.max_train_queries is not None else "")
                          + (f"; at most {d.max_positives_per_query} positive(s) per query"
                             if d.max_positives_per_query is not None else "") + ")")
        notes = [f"training: {len(built.source.examples)} rows of {d.train} ({source.form} form){subsampled}, "
                 f"{negatives}, " + schedule]
    else:
        notes = [f"training: {len(inputs.train_qrels)} queries of {d.dataset}/{d.train_split} "
                 f"({'all' if d.max_train_queries is None else 'subsampled'}), {len(built.source.examples)} (query, "
                 f"positive) examples, " + (f"{d.num_negatives} {d.negatives} negative(s) each, " if d.num_negatives
                                            else "in-batch negatives only, ") + schedule]
        if distill is not None:
            notes.append(f"distillation from {distill.teacher}: weights one-hot {distill.one_hot_weight:g}, score "
                         f"({distill.score_loss}) {distill.score_weight:g}, query embedding "
                         f"{distill.query_embedding_weight:g}, document embedding {distill.document_embedding_weight:g}"
                         + ("; documents inherited from the teacher" if distill.inherit_documents else ""))
        if built.in_loop_teacher is not None:
            notes.append(f"distillation (003 Eq. 6): frozen {built.in_loop_teacher.ranker.architecture} teacher "
                         f"{inputs.in_loop_teacher} scores every query x document of each batch; gamma "
                         f"{inputs.loss.gamma:g}, teacher temperature {inputs.loss.temperature:g}")
    if built.generated is not None:
        notes.append(f"generated queries (004 App. E): {sum(len(g) for g in built.generated.values())} from "
                     f"{len(built.generated)} training queries by {distill.generated_queries.model}, in the query "
                     f"embedding matching only (weight {distill.generated_queries.weight:g})")
    if recipe.loss.reconstruction_weight:
        notes.append(f"token reconstruction loss (004 §4.2), weight {recipe.loss.reconstruction_weight:g}, beside "
                     f"{recipe.loss.name}")
    if inputs.validation_qrels:
        notes.append(f"validation: {len(inputs.validation_qrels)} queries of {d.validation_split}, "
                     f"top-{inputs.validation_depth} of the first stage, best epoch by {e.selection_metric}")
    subsampled = d.max_test_queries and d.max_test_queries < len(inputs.dataset.qrels(d.test_split))
    notes.append(f"test: {len(inputs.test_qrels)} queries of {d.test_split}{' (subsampled)' if subsampled else ''}, "
                 + (f"full retrieval of the top-{e.depth} of the corpus ({inputs.test_name} reported beside it)"
                    if built.ranker.full_retrieval else f"top-{e.depth} of {inputs.test_name}"))
    notes += [note for note in precision_note.splitlines() if note]  # what training.bf16 / eval.precision: auto became
    for note in notes:
        logger.info(note)
    return notes


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


def training_setup(recipe: Recipe, plan: Plan, inputs: RunInputs, built: BuiltRun,
                   run_record: dict[str, Any] | None = None) -> TrainingSetup:
    """What the Trainers are built from. A dense teacher's document embeddings are filled from its (cached) corpus
    index first; the recipe's callbacks get what a Trainer event does not carry (dataset, qrels). ``run_record``: what
    made the run (resolved precisions, input fingerprints), written into every checkpoint."""
    distill, e = recipe.distillation, recipe.eval
    if (distill is not None and distill.keep_teacher_corpus and not distill.query_only and distill.teacher_kind == "dense"
            and (distill.inherit_documents or distill.score_weight or distill.document_embedding_weight)):
        kept = inputs.distillation_teacher.keep_corpus(inputs.dataset, e.batch_size)
        logger.info("teacher: kept the document embeddings of %d documents", kept)
    elif distill is not None and distill.keep_teacher_corpus and distill.inherit_documents:  # a cross-encoder teacher
        kept = built.ranker.document_teacher.keep_corpus(inputs.dataset, e.batch_size)
        logger.info("teacher: kept the empty-query document embeddings of %d documents (004 §5.3)", kept)
    if built.generated is not None and plan.args.should_save:  # the generated queries, kept with the run (004 App. E)
        atomic_write_text(plan.folder.path / GENERATED_QUERIES, "".join(
            json.dumps({"query": q, "generated": g}, ensure_ascii=False) + "\n" for q, g in built.generated.items()))
    callbacks = build_callbacks([c for c in recipe.callbacks if callback_name(c) != "best_epoch"],
                                dataset=inputs.dataset, validation_qrels=inputs.validation_qrels,
                                train_qrels=inputs.train_qrels,
                                train_queries=(inputs.train_source.query_texts(inputs.dataset)
                                               if inputs.train_source is not None else None))
    pairs = (PairDataset(inputs.validation_first, inputs.validation_depth, inputs.dataset)
             if inputs.validation_qrels else None)
    return TrainingSetup(recipe, inputs, built, plan.training_kwargs, pairs, callbacks, plan.state == "resume",
                         bool(plan.resume_changes), dict(run_record or {}))
