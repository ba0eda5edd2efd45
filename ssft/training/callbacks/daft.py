"""DAFT, distribution-aligned fine-tuning (Leonhardt et al., 000 Algorithm 1), as a Trainer callback.

Stage 1 (alignment): the document tower is frozen (``requires_grad`` off; the optimizer already holds its
parameters, AdamW skips parameters without a gradient), only the query tower and the shared projection
train. Before the first step, and after every epoch — or every ``check_every_steps`` steps — the 1-NN KL estimate
(Eq. 9) of KL(document-encoder reps ‖ query-encoder reps) is taken on validation queries (both towers encode the same
queries); stage 1 ends when it falls below ``delta`` — already at the first estimate, since Algorithm 1's
``while not early_stop`` tests before it trains — or has not improved for ``patience`` checks
(000 §5.3.1: δ = 250, patience 3 on MS MARCO; δ depends on the corpus and the representation size);
``max_alignment_checks`` optionally bounds stage 1.

The shared projection (``model.projection_dim``, 000 Eq. 10–11) is what 000 §5.2 / §7.1 find necessary against
collapse: a DAFT run without one warns. A recipe whose ``training.num_train_epochs`` cannot hold one alignment
epoch (``max_alignment_checks`` epochs when that bounds stage 1) plus N_e stage-2 epochs is refused (one line); a
stage 1 that runs so long that fewer than N_e epochs remain warns loudly and records the stage-2 epochs done
(``daft.json``: ``finetune_epochs_done``), since the Trainer's length is fixed up front.
Pooling: 000 §5.2 takes the CLS output (``model.pooling: cls``); ssft's dense default is ``mean``
(sentence-transformers models are trained mean-pooled), so a DAFT recipe at 000's settings sets ``cls``.
Validation by retrieval is skipped during stage 1, so the best checkpoint is chosen among stage-2 epochs.

Stage 2 (fine-tuning): both towers train for ``finetune_epochs`` epochs (N_e), then training stops; the
best validation epoch (nDCG@10 by full retrieval) is kept by ``best_epoch`` as for every model.
Set ``training.num_train_epochs`` to at least the most alignment epochs you allow plus N_e (the Trainer's
length is fixed up front), and prefer a constant learning-rate schedule.

Stage changes and every KL estimate are logged and written to ``<output_dir>/daft.json``.
"""
from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from ssft.config.parse import Checked
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_json
from ssft.eval.divergence import knn_kl_divergence
from ssft.training.callbacks.base import RecipeCallback

logger = logging.getLogger(__name__)

ALIGNMENT, FINE_TUNING = "alignment", "fine-tuning"


def set_tower_trainable(model, tower: str, trainable: bool, only: set[int] | None = None) -> list:
    """Switch ``requires_grad`` of a tower's parameters (``only``: ids of the parameters to touch). Returns
    the parameters switched."""
    params = [p for p in model.tower_parameters(tower) if only is None or id(p) in only]
    for p in params:
        p.requires_grad_(trainable)
    return params


def training_queries(train_dataloader) -> list[str]:
    """Texts of the queries of a ``TrainingGroups`` training set (the fallback without validation queries)."""
    train = getattr(train_dataloader, "dataset", None)
    if train is None or not hasattr(train, "examples"):
        return []
    return [train.dataset.queries[q] for q in dict.fromkeys(ex.qid for ex in train.examples)]


def _trainable_ids(model, tower: str) -> set[int]:
    """Ids of the parameters of ``tower`` that would train now."""
    return {id(p) for p in model.tower_parameters(tower) if p.requires_grad}


def _sample(texts: list[str], limit: int, seed: int) -> list[str]:
    return random.Random(seed).sample(texts, limit) if len(texts) > limit else texts


def alignment_kl(model, texts: list[str], batch_size: int = 64) -> float:
    """000 Eq. 9 with k = 1: X = document-encoder representations, X' = query-encoder representations of
    the same query texts (each tower tokenising with its own tokenizer, the query length limit for both)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            q_parts, d_parts = [], []
            for start in range(0, len(texts), batch_size):
                chunk = texts[start : start + batch_size]
                q_parts.append(model.encode_queries(chunk).vectors.float().cpu())
                d_tok = model.document_tokenizer(chunk, padding=True, truncation=True,
                                                 max_length=model.spec["query_max_length"], return_tensors="pt")
                d_batch = model._to_device({"input_ids": d_tok["input_ids"], "attention_mask": d_tok["attention_mask"]})
                d_parts.append(model.encode_tokens(d_batch["input_ids"], d_batch["attention_mask"],
                                                   "document").vectors.float().cpu())
    finally:
        model.train(was_training)
    return knn_kl_divergence(torch.cat(d_parts).numpy(), torch.cat(q_parts).numpy(), k=1)


@dataclass
class DaftOptions(Checked):
    delta: float = 250.0  # stage 1 ends when the KL estimate falls below it ...
    patience: int = 3  # ... or has not improved for this many checks
    finetune_epochs: int = 10  # N_e: stage 2's epochs
    check_every_steps: int | None = None  # null: check after every epoch
    max_queries: int = 1000  # validation queries the KL is estimated on
    seed: int = 0
    max_alignment_checks: int | None = None  # a bound on stage 1 (null: delta and patience only)

    def problem(self) -> str | None:
        if self.patience < 1 or self.finetune_epochs < 1 or self.max_queries < 3:
            return "patience and finetune_epochs must be >= 1, max_queries >= 3"
        if self.check_every_steps is not None and self.check_every_steps < 1:
            return "check_every_steps must be >= 1 or null (check after every epoch)"
        if self.max_alignment_checks is not None and self.max_alignment_checks < 1:
            return "max_alignment_checks must be >= 1 or null"
        return None


class DaftCallback(RecipeCallback):
    name = "daft"
    Config = DaftOptions
    needs_document_tower = True  # aligns a separate query tower to a frozen document tower
    combines_with_distillation = False

    def __init__(self, delta: float = 250.0, patience: int = 3, finetune_epochs: int = 10,
                 check_every_steps: int | None = None, max_queries: int = 1000, seed: int = 0,
                 max_alignment_checks: int | None = None):
        DaftOptions(delta, patience, finetune_epochs, check_every_steps, max_queries, seed, max_alignment_checks).raise_problem()
        self.max_alignment_checks = max_alignment_checks  # a bound on stage 1 (null: delta and patience only)
        self.delta = float(delta)
        self.patience = patience
        self.finetune_epochs = finetune_epochs
        self.check_every_steps = check_every_steps
        self.max_queries = max_queries
        self.seed = seed
        self.stage = ALIGNMENT
        self.history: list[dict] = []  # every KL estimate
        self.stage_changes: list[dict] = []
        self.best_kl: float | None = None
        self.checks_without_improvement = 0
        self.finetune_start_epoch: float | None = None
        self.finetune_epochs_done: float | None = None
        self._frozen: set[int] = set()
        self._texts: list[str] | None = None
        self._output_dir: str | None = None
        self._resumed: dict | None = None  # stage state read from a checkpoint, applied at on_train_begin

    STATE_FILE = "daft_state.json"

    @classmethod
    def training_problem(cls, config: DaftOptions, training: dict) -> str | None:
        """Algorithm 1 needs stage 1 (at least one alignment epoch; ``max_alignment_checks`` of them when checks are
        per epoch and bounded) plus N_e stage-2 epochs inside the Trainer's fixed length."""
        if training.get("max_steps", -1) not in (None, -1) and int(training["max_steps"]) > 0:
            return None  # a step budget: the stage lengths are not in epochs
        epochs = float(training.get("num_train_epochs", 3.0))  # TrainingArguments' default
        alignment = config.max_alignment_checks if (config.max_alignment_checks and not config.check_every_steps) else 1
        if epochs < alignment + config.finetune_epochs:
            return (f"training.num_train_epochs {epochs:g} cannot fit stage 1 ({alignment} alignment epoch(s) at least) "
                    f"plus finetune_epochs {config.finetune_epochs} (N_e, Algorithm 1); set training.num_train_epochs "
                    f">= {alignment + config.finetune_epochs}")
        return None

    # ------------------------------------------------------------ checkpoints (RankingTrainer calls these)
    def save_checkpoint_state(self, folder: Path) -> None:
        """The stage and the stopping state, so a resumed run continues the same stage at the same point."""
        state = {"stage": self.stage, "history": self.history, "stage_changes": self.stage_changes, "best_kl": self.best_kl,
                 "checks_without_improvement": self.checks_without_improvement, "finetune_start_epoch": self.finetune_start_epoch}
        (Path(folder) / self.STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    def load_checkpoint_state(self, folder: Path) -> None:
        path = Path(folder) / self.STATE_FILE
        if path.is_file():
            self._resumed = json.loads(path.read_text())

    def setup(self, dataset=None, validation_qrels=None, **_) -> None:
        """Given by ``ssft.pipeline.run`` before training: the validation queries the alignment is measured on."""
        if dataset is not None and validation_qrels:
            texts = [dataset.queries[q] for q in sorted(validation_qrels) if q in dataset.queries]
            if len(texts) >= 3:  # the 1-NN estimate needs a few points; else on_train_begin uses training queries
                self._texts = _sample(texts, self.max_queries, self.seed)

    # ------------------------------------------------------------ events
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None or not hasattr(model, "tower_parameters") or getattr(model, "document_backbone", None) is None:
            raise SsftError("callbacks.daft: needs a dense model with a separate document tower (model.document_name)")
        if getattr(args, "world_size", 1) > 1:  # DDP fixes the parameters it synchronises when it wraps the model
            raise SsftError("callbacks.daft: unfreezes the document tower during training, which DDP cannot follow; "
                            "train DAFT in one process (no accelerate launch --num_processes)")
        self._output_dir = args.output_dir if getattr(args, "should_save", True) else None  # only the main process writes
        if self._resumed is not None:  # a checkpoint's stage state: no new stage change, no initial estimate
            resumed, self._resumed = self._resumed, None
            self.stage, self.history, self.stage_changes = resumed["stage"], resumed["history"], resumed["stage_changes"]
            self.best_kl, self.checks_without_improvement = resumed["best_kl"], resumed["checks_without_improvement"]
            self.finetune_start_epoch = resumed["finetune_start_epoch"]
            if self.stage == ALIGNMENT:
                switched = set_tower_trainable(model, "document", False, only=_trainable_ids(model, "document"))
                self._frozen = {id(p) for p in switched}
            if not self._texts:
                self._texts = _sample(training_queries(kwargs.get("train_dataloader")), self.max_queries, self.seed)
            logger.info("DAFT: resumed in stage '%s' after %d alignment estimate(s)", self.stage, len(self.history))
            return
        if getattr(model, "projection", None) is None:
            logger.warning("DAFT without a shared projection (model.projection_dim: null): 000 finds the shared "
                           "projection necessary to prevent the representations from collapsing (§5.2, ablation §7.1)")
        self.stage = ALIGNMENT
        # freeze only what would train, so stage 2 restores exactly that
        switched = set_tower_trainable(model, "document", False, only=_trainable_ids(model, "document"))
        self._frozen = {id(p) for p in switched}
        self._change(state, ALIGNMENT, f"document tower frozen ({sum(p.numel() for p in switched):,} parameters); "
                                      f"training the query tower until KL < {self.delta:g} or {self.patience} checks "
                                      f"without improvement")
        if args.max_steps <= 0 and args.num_train_epochs <= self.finetune_epochs:
            logger.warning("DAFT: training.num_train_epochs (%g) leaves no room for alignment before %d fine-tuning epochs",
                           args.num_train_epochs, self.finetune_epochs)
        if not self._texts:
            logger.warning("DAFT: no validation queries given; estimating the alignment on training queries")
            self._texts = _sample(training_queries(kwargs.get("train_dataloader")), self.max_queries, self.seed)
        if len(self._texts) < 3:
            raise SsftError("callbacks.daft: fewer than 3 queries to estimate the alignment on")
        self._check(state, model, initial=True)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.stage == ALIGNMENT:
            control.should_evaluate = False  # retrieval validation only scores stage-2 models
            if self.check_every_steps and state.global_step % self.check_every_steps == 0:
                self._check(state, model)

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        if self.stage == ALIGNMENT:
            control.should_evaluate = False
            if not self.check_every_steps:
                self._check(state, model)
            return
        started = self.finetune_start_epoch
        if started is not None and (state.epoch or 0) - started >= self.finetune_epochs - 1e-6:
            logger.info("DAFT: %d fine-tuning epoch(s) done, stopping", self.finetune_epochs)
            control.should_training_stop = True

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self.stage == ALIGNMENT:
            logger.warning("DAFT: training ended during the alignment stage (raise training.num_train_epochs)")
            if model is not None:  # leave the model as it was given
                set_tower_trainable(model, "document", True, only=self._frozen)
        elif self.finetune_start_epoch is not None:
            self.finetune_epochs_done = round((state.epoch or 0.0) - self.finetune_start_epoch, 4)
            if self.finetune_epochs_done < self.finetune_epochs - 1e-6:
                logger.warning("!!! DAFT: stage 1 took so long that stage 2 ran %.2f of its %d epochs (N_e): the run "
                               "ended before Algorithm 1 did; raise training.num_train_epochs !!!",
                               self.finetune_epochs_done, self.finetune_epochs)
        self._write()

    # ------------------------------------------------------------ logic
    def _check(self, state, model, initial: bool = False) -> None:
        kl = alignment_kl(model, self._texts)
        entry = {"step": state.global_step, "epoch": state.epoch or 0.0, "kl": kl}
        self.history.append(entry)
        logger.info("DAFT alignment: KL(doc ‖ query) = %.2f on %d validation queries (step %d)", kl, len(self._texts),
                    state.global_step)
        if initial:
            self.best_kl = kl
            if kl < self.delta:  # Algorithm 1: `while not early_stop(...)` tests before the first alignment step
                self._start_fine_tuning(state, model, f"initial KL {kl:.2f} < delta {self.delta:g}: already aligned, "
                                                      "no alignment step")
            return
        if kl < self.best_kl - 1e-9:
            self.best_kl, self.checks_without_improvement = kl, 0
        else:
            self.checks_without_improvement += 1
        if kl < self.delta:
            self._start_fine_tuning(state, model, f"KL {kl:.2f} < delta {self.delta:g}")
        elif self.checks_without_improvement >= self.patience:
            self._start_fine_tuning(state, model, f"KL has not improved for {self.patience} checks (best {self.best_kl:.2f})")
        elif self.max_alignment_checks is not None and len(self.history) - 1 >= self.max_alignment_checks:
            self._start_fine_tuning(state, model, f"{self.max_alignment_checks} alignment checks reached (KL {kl:.2f}, "
                                                  f"delta {self.delta:g})")

    def _start_fine_tuning(self, state, model, reason: str) -> None:
        set_tower_trainable(model, "document", True, only=self._frozen)
        self.stage = FINE_TUNING
        self.finetune_start_epoch = state.epoch or 0.0
        self._change(state, FINE_TUNING, f"{reason}; document tower unfrozen, both towers train for "
                                         f"{self.finetune_epochs} epoch(s)")

    def _change(self, state, stage: str, why: str) -> None:
        self.stage_changes.append({"stage": stage, "step": state.global_step, "epoch": state.epoch or 0.0, "reason": why})
        logger.info("DAFT stage '%s' at step %d: %s", stage, state.global_step, why)
        self._write()

    def _write(self) -> None:
        if self._output_dir is None:
            return
        Path(self._output_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(self._output_dir) / "daft.json", {
            "delta": self.delta, "patience": self.patience, "finetune_epochs": self.finetune_epochs,
            "stage": self.stage, "stage_changes": self.stage_changes, "kl_history": self.history,
            "finetune_epochs_done": self.finetune_epochs_done})


__all__ = ["DaftCallback", "alignment_kl", "set_tower_trainable", "training_queries"]
