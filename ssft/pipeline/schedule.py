"""Stage 4 of ssft-train: training, by a schedule the adapter chooses (``Adapter.trains_in_phases``): one Trainer run
(``SinglePhase``), or one per phase of 001's hybrid (``HybridPhases``, Algorithm 1); either keeps the best validation
epoch — epoch 0, the starting model, included — and resumes a killed run from its checkpoints."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainingArguments

from ssft.config.recipe import Recipe
from ssft.config.registry import ADAPTERS
from ssft.data.examples import PairDataset
from ssft.pipeline.build import BuiltRun
from ssft.pipeline.inputs import RunInputs
from ssft.training.callbacks.best_epoch import BestEpochCallback, evaluate_start
from ssft.training.checkpoints import discard_incomplete_checkpoints, latest_checkpoint
from ssft.training.phases import train_hybrid
from ssft.training.trainer import RankingTrainer

logger = logging.getLogger("ssft")


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


class SinglePhase:
    """One Trainer run over the whole budget."""

    def describe(self, args: TrainingArguments) -> str:
        if args.max_steps > 0:
            return f"{args.max_steps} steps of {args.per_device_train_batch_size} queries"
        return f"{args.num_train_epochs:g} epoch(s) of batches of {args.per_device_train_batch_size} queries"

    def train(self, setup: TrainingSetup, args: TrainingArguments) -> TrainedRun:
        started = time.time()
        best = BestEpochCallback(setup.recipe.eval.selection_metric)
        trainer = setup.trainer(args, [best], setup.built.source.training_set(setup.recipe.seed))
        with args.main_process_first(local=False, desc="discarding incomplete checkpoints"):
            # a checkpoint cut short by an interruption is never trained into, never resumed from
            for removed in (discard_incomplete_checkpoints(setup.out) if args.should_save else []):
                logger.warning("removed %s: a checkpoint cut short by an interruption", removed)
        checkpoint = latest_checkpoint(setup.out) if setup.resume else None
        if checkpoint is not None:
            logger.info("resuming from %s", checkpoint)
        else:  # epoch 0: the starting model is a candidate of the best-epoch selection
            evaluate_start(trainer)
        output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        resumed_from = str(checkpoint.relative_to(setup.out)) if checkpoint else None
        return TrainedRun(trainer, best, output.training_loss, time.time() - started, None, resumed_from,
                          best.start_selected)


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
        self.setup = setup
        resumed_from = None
        if setup.resume:
            resumed_from = [str(p.relative_to(out)) for p in sorted(out.glob("phase-*/phase.json"))]
            resumed_from += [str(c.relative_to(out)) for f in sorted(out.glob("phase-*")) if (c := latest_checkpoint(f))]
            logger.info("resuming the hybrid run in %s (%s)", out, ", ".join(resumed_from))
        phases = train_hybrid(setup.built.ranker, self.config, self.phase_trainer, metric, resume=True)
        last = phases[-1]
        record = [{"phase": p.name, "modules": list(p.modules), "epochs": p.epochs,
                   "train_loss": p.train_output.training_loss,
                   "best_validation": {"metric": metric, "value": p.best.best_value, "epoch": p.best.best_epoch},
                   "start_selected": p.best.start_selected,
                   "validation_history": p.best.history} for p in phases]
        # the run hands back its starting model when every phase kept the weights it received (epoch 0)
        return TrainedRun(last.trainer, last.best, last.train_output.training_loss, time.time() - started, record,
                          resumed_from, all(p.best.start_selected for p in phases))


def schedule_for(recipe: Recipe) -> SinglePhase | HybridPhases:
    if ADAPTERS.get(recipe.adapter.method).trains_in_phases:
        return HybridPhases(recipe.adapter.config)
    return SinglePhase()
