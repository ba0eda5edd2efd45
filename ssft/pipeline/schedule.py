"""Stage 4 of ssft-train: training, by a schedule the adapter chooses (``Adapter.trains_in_phases``): one Trainer run
(``SinglePhase``), or one per phase of 001's hybrid (``HybridPhases``, Algorithm 1); either keeps the best validation
epoch — epoch 0, the starting model, included — and resumes a killed run from its checkpoints. What the Trainers are
built from: the run's TrainingArguments (``training_arguments``, decided in stage 1) and a ``TrainingSetup``."""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainingArguments

from ssft.config.recipe import Recipe
from ssft.config.registry import ADAPTERS, LOSSES
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_text
from ssft.core.run_folder import GENERATED_QUERIES
from ssft.data.examples import PairDataset
from ssft.pipeline.build import BuiltRun
from ssft.pipeline.folder import USER_TENSORBOARD_DIR, Plan
from ssft.pipeline.inputs import RunInputs
from ssft.pipeline.precision import training_bf16
from ssft.training.callbacks import build_callbacks, callback_name
from ssft.training.callbacks.best_epoch import BestEpochCallback, evaluate_start
from ssft.training.checkpoints import discard_incomplete_checkpoints, latest_checkpoint, parameters_fingerprint
from ssft.training.phases import train_hybrid
from ssft.training.trainer import RankingTrainer

logger = logging.getLogger("ssft")


def training_arguments(recipe: Recipe, out: Path, record: dict[str, Any] | None,
                       resuming: bool) -> tuple[dict[str, Any], TrainingArguments, str]:
    """(the keywords, the run's TrainingArguments built from them, the note of what training.bf16: auto became):
    ssft's defaults under the recipe's training section, training.bf16 settled (``ssft.pipeline.precision``; a resume:
    ``record``, its checkpoint's marker). Refused in one line: what TrainingArguments refuse, distillation over several
    processes. TensorBoard is pointed at ``out``/logs unless the user chose a folder."""
    # a checkpoint every epoch (only the latest kept) lets a killed run resume; removed once the run finishes
    # unless the recipe asks for checkpoints itself (training.save_strategy). Progress: a bar on a terminal, a line
    # every 30 s otherwise (ssft.core.progress; training.disable_tqdm: true switches it off). No pinned memory without
    # a GPU: torch warns that pin_memory has no accelerator to serve. Training batches by token count
    # (ssft.training.sampling) unless the recipe says training.train_sampling_strategy: random.
    kwargs = {"remove_unused_columns": False, "report_to": ["tensorboard"], "save_strategy": "epoch",
              "save_total_limit": 1, "eval_strategy": "epoch" if recipe.data.validation_split else "no",
              "train_sampling_strategy": "group_by_length",
              "logging_strategy": "steps", "logging_steps": 10, "disable_tqdm": False,
              "seed": recipe.seed, "dataloader_pin_memory": torch.cuda.is_available(), **recipe.training}
    note = training_bf16(kwargs, record, resuming)
    # TensorBoard goes to this run's logs/ (HF reads the variable when a Trainer is built), unless the user set it
    os.environ["TENSORBOARD_LOGGING_DIR"] = USER_TENSORBOARD_DIR or str(out / "logs")
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
    return kwargs, args, note


@dataclass(frozen=True)
class TrainingSetup:
    """What every Trainer of the run is built from."""

    recipe: Recipe
    inputs: RunInputs
    built: BuiltRun
    training_kwargs: dict[str, Any]  # TrainingArguments of the run (a phase overrides its epochs and folder)
    validation_pairs: PairDataset | None
    callbacks: list  # the recipe's own callbacks (daft, collapse_monitor, negative_cache)
    resume: bool
    rebase_learning_rates: bool  # --resume-with-changes
    run_record: dict[str, Any] = field(default_factory=dict)  # what made the run: written into every checkpoint

    @property
    def out(self) -> Path:
        return Path(self.training_kwargs["output_dir"])

    def trainer(self, args: TrainingArguments, callbacks: list, train_set) -> RankingTrainer:
        e, built = self.recipe.eval, self.built
        return RankingTrainer(
            model=built.ranker, args=args, train_dataset=train_set, eval_dataset=self.validation_pairs,
            data_collator=built.objective.collator(built.ranker), objective=built.objective,
            head_learning_rate=self.recipe.model.head_learning_rate, learning_rates_from_args=self.rebase_learning_rates,
            eval_qrels=self.inputs.validation_qrels, eval_metrics=sorted({e.selection_metric, *e.metrics}),
            precision=e.precision, run_record=self.run_record,
            callbacks=callbacks + self.callbacks,
        )


@dataclass(frozen=True)
class TrainedRun:
    trainer: RankingTrainer  # the last one (its score function evaluates the final model)
    best: BestEpochCallback  # of the last phase
    train_loss: float
    train_seconds: float
    phases: list[dict] | None  # a hybrid's phases: modules, epochs, validation history, best epoch
    resumed_from: str | list[str] | None
    start_selected: bool = False  # epoch 0 (the starting model) won the validation: the run hands back its weights
    weights_changed: bool = True  # false: the weights handed back are the starting model's, bit for bit


class SinglePhase:
    """One Trainer run over the whole budget."""

    def describe(self, args: TrainingArguments) -> str:
        if args.max_steps > 0:
            return f"{args.max_steps} steps of {args.per_device_train_batch_size} queries"
        return f"{args.num_train_epochs:g} epoch(s) of batches of {args.per_device_train_batch_size} queries"

    def train(self, setup: TrainingSetup, args: TrainingArguments) -> TrainedRun:
        started = time.time()
        start_weights = parameters_fingerprint(setup.built.ranker)
        best = BestEpochCallback(setup.recipe.eval.selection_metric)
        trainer = setup.trainer(args, [best], setup.built.source.training_set(setup.recipe.seed))
        with args.main_process_first(local=False, desc="discarding incomplete checkpoints"):
            # a checkpoint cut short by an interruption is never trained into, never resumed from
            for removed in (discard_incomplete_checkpoints(setup.out) if args.should_save else []):
                logger.warning("removed %s: a checkpoint cut short by an interruption", removed)
        checkpoint = latest_checkpoint(setup.out) if setup.resume else None
        if checkpoint is not None:
            logger.info("resuming from %s", checkpoint)
        elif setup.recipe.eval.start:  # epoch 0: the starting model is a candidate of the best-epoch selection
            evaluate_start(trainer)
        elif trainer.eval_dataset is not None:
            logger.info("validation: the starting model is not scored (eval.start: false); the best epoch is chosen "
                        "among the trained epochs only")
        output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        resumed_from = str(checkpoint.relative_to(setup.out)) if checkpoint else None
        return TrainedRun(trainer, best, output.training_loss, time.time() - started, None, resumed_from,
                          best.start_selected, weights_changed(setup.built.ranker, start_weights))


class HybridPhases:
    """001's hybrid: a prefix and LoRA trained one after the other (Algorithm 1) or together (§5.2), each phase a
    fresh Trainer run in its own folder (``phase-<name>/``) that keeps its best validation epoch."""

    def __init__(self, config):
        self.config = config
        self.setup: TrainingSetup | None = None

    def describe(self, args: TrainingArguments) -> str:
        h = self.config
        first, second = h.methods
        if h.mode == "sequential":
            text = f"sequential hybrid: {first} for {h.first_epochs} epoch(s), then {second} for {h.second_epochs}"
        else:
            text = f"concurrent hybrid: {first} and {second} together for {h.first_epochs + h.second_epochs} epoch(s)"
        return text + f", batches of {args.per_device_train_batch_size} queries"

    def phase_trainer(self, phase: str, epochs: int, callbacks: list) -> RankingTrainer:
        """The Trainer of one phase: its own folder, epochs and negatives (``train_hybrid`` calls it)."""
        setup = self.setup
        logger.info("hybrid phase '%s': %d epoch(s)", phase, epochs)
        args = TrainingArguments(**{**setup.training_kwargs, "num_train_epochs": epochs,
                                    "output_dir": str(setup.out / f"phase-{phase}")})
        return setup.trainer(args, callbacks, setup.built.source.training_set(f"{setup.recipe.seed}:{phase}"))

    def train(self, setup: TrainingSetup, args: TrainingArguments) -> TrainedRun:
        started, out, metric = time.time(), setup.out, setup.recipe.eval.selection_metric
        start_weights = parameters_fingerprint(setup.built.ranker)
        self.setup = setup
        resumed_from = None
        if setup.resume:
            resumed_from = [str(p.relative_to(out)) for p in sorted(out.glob("phase-*/phase.json"))]
            resumed_from += [str(c.relative_to(out)) for f in sorted(out.glob("phase-*")) if (c := latest_checkpoint(f))]
            logger.info("resuming the hybrid run in %s (%s)", out, ", ".join(resumed_from))
        phases = train_hybrid(setup.built.ranker, self.config, self.phase_trainer, metric, resume=True,
                              score_start=setup.recipe.eval.start)
        last = phases[-1]
        record = [{"phase": p.name, "modules": list(p.modules), "epochs": p.epochs,
                   "train_loss": p.train_output.training_loss,
                   "best_validation": {"metric": metric, "value": p.best.best_value, "epoch": p.best.best_epoch},
                   "start_selected": p.best.start_selected,
                   "validation_history": p.best.history, "train_loss_history": p.best.losses}
                  for p in phases]
        # the run hands back its starting model when every phase kept the weights it received (epoch 0)
        return TrainedRun(last.trainer, last.best, last.train_output.training_loss, time.time() - started, record,
                          resumed_from, all(p.best.start_selected for p in phases),
                          weights_changed(setup.built.ranker, start_weights))


def weights_changed(ranker, start_weights: str) -> bool:
    """Whether the weights training hands back differ from the starting model's (``start_weights``, its
    ``parameters_fingerprint``); says so in one line when they do not."""
    changed = parameters_fingerprint(ranker) != start_weights
    if not changed:
        logger.warning("the trained weights are the starting model's, unchanged: this run did not fine-tune it")
    return changed


def schedule_for(recipe: Recipe) -> SinglePhase | HybridPhases:
    if ADAPTERS.get(recipe.adapter.method).trains_in_phases:
        return HybridPhases(recipe.adapter.config)
    return SinglePhase()


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
