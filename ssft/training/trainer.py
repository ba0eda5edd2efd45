"""RankingTrainer: a transformers Trainer whose loss, prediction and evaluation are a ranker's."""
from __future__ import annotations

import logging

import numpy as np
import torch
from torch.utils.data import RandomSampler, SequentialSampler, Subset
from transformers.optimization import get_scheduler
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from ssft.core import precision as precisions
from ssft.core import progress
from ssft.data.beir import Qrels
from ssft.data.examples import PairDataset, TrainingGroups
from ssft.eval.metrics import evaluate_run
from ssft.eval.retrieve import evaluate_retrieval
from ssft.losses.base import RankingLoss
from ssft.models.batching import length_order
from ssft.models.bi import score_pairs_once
from ssft.training.callbacks.log_lines import LogLinesCallback
from ssft.training.checkpoints import CheckpointedTrainer
from ssft.training.objectives import Objective, objective_for
from ssft.training.sampling import TokenLengthGroupedSampler, token_lengths

logger = logging.getLogger(__name__)


def token_order(ranker, pairs: PairDataset) -> list[int]:
    """Indices of ``pairs`` by decreasing exact token count of the rows ``ranker`` builds for them (ties by index):
    batches cut in this order pad each row to about its own length (characters are a poor proxy for tokens)."""
    return length_order(ranker.pair_token_lengths(*pairs.texts()))


def warmup_steps_for(args, num_training_steps: int) -> tuple[int, int]:
    """(the warm-up steps a run of ``num_training_steps`` gets, the steps ``training.warmup_steps`` asks for: a whole
    number of steps, or below 1 a fraction of the run). The warm-up never takes more than half the run: the first step
    of a linear warm-up has learning rate 0, so a run no longer than its warm-up would hand back its start (a 1-step
    run warms up over 0 steps and trains at the full rate)."""
    asked = args.get_warmup_steps(num_training_steps)
    return min(asked, num_training_steps // 2), asked


class RankingTrainer(CheckpointedTrainer):
    """Trainer for rankers.

    - ``compute_loss``: the ``objective`` (``ssft.training.objectives``) gives the batch's loss; without one, the
      objective of ``loss`` (the ranking loss; with a ``teacher``, a frozen ``FrozenTeacher`` for a loss with
      ``needs_teacher`` such as ``tct``, in-loop distillation). Without a ``data_collator``, the objective's.
    - ``prediction_step``: returns relevance scores (``trainer.predict(pairs)`` reranks any pairs).
    - ``score``: what evaluation and test reranking call; bi-encoders encode each distinct document once.
    - ``evaluate``: reranks the validation first stage (dense: retrieves from the corpus) and returns ir_measures
      metrics as ``eval_<name>``.
    - ``precision`` (``eval.precision``, ``ssft.core.precision``): what ``score`` and ``evaluate`` compute in; the
      training steps are untouched (their precision is ``training.bf16``'s).
    - the optimizer gives the ranker head its own learning rate (001 Table 8).
    - the warm-up never takes more than half the run (``warmup_steps_for``): a run shorter than its warm-up still trains.
    - checkpoints, exact resume, the non-finite stop and ``learning_rates_from_args``: ``CheckpointedTrainer``.
    - logs and progress: ssft's log lines (``LogLinesCallback``; ``training.disable_tqdm`` switches the progress off).
    """

    def __init__(self, *args, loss: RankingLoss | None = None, objective: Objective | None = None, teacher=None,
                 head_learning_rate: float | None = None, eval_qrels: Qrels | None = None,
                 eval_metrics: list[str] | None = None, precision: str = "fp32", **kwargs):
        if objective is None:
            if loss is None:
                raise ValueError("RankingTrainer needs a loss or an objective")
            objective = objective_for(loss, teacher)
        elif teacher is not None:
            raise ValueError("pass either a teacher (in-loop score distillation, e.g. tct) or an objective, not both")
        if kwargs.get("data_collator") is None and len(args) < 3:  # Trainer(model, args, data_collator, ...)
            kwargs["data_collator"] = objective.collator(kwargs.get("model", args[0] if args else None))
        super().__init__(*args, **kwargs)
        # the Trainer's metrics as ssft's log lines and its progress as every long stage's (``LogLinesCallback``), not
        # transformers' dicts of strings printed between them
        for printer in (PrinterCallback, ProgressCallback):
            self.remove_callback(printer)
        self.add_callback(LogLinesCallback(bars=not self.args.disable_tqdm))
        self.objective = objective
        self.head_learning_rate = head_learning_rate
        self.eval_qrels = eval_qrels
        self.eval_metrics = eval_metrics or ["nDCG@10"]
        self.precision = precisions.check(precision, "eval.precision")
        self._scoring_model = None  # while score() runs: the model it scores with (an int8 copy, at int8)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, scores = self.objective.compute(model, self._ranker(), inputs)
        if model.training and not torch.isfinite(loss.detach()).all():
            self._stop_non_finite("loss", float(loss.detach().float().reshape(-1)[0]))
        return (loss, scores) if return_outputs else loss

    # ------------------------------------------------------------ batching
    def _get_train_sampler(self, train_dataset=None):
        # training.train_sampling_strategy: group_by_length batches items of similar token count together (less
        # padding; ssft.training.sampling). Training groups (TrainingGroups.item_texts) give each epoch's texts
        # (query, positive and the negatives drawn for the epoch), counted in the ranker's tokens when the epoch
        # starts (after the Trainer's set_epoch). Other datasets are shuffled.
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy == "group_by_length":
            if not isinstance(dataset, TrainingGroups):  # e.g. 002's query texts: no groups to count, shuffled
                return RandomSampler(dataset)
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            return TokenLengthGroupedSampler(lambda: token_lengths(self.model, dataset.item_texts()),
                                             self.args.train_batch_size * self.args.gradient_accumulation_steps,
                                             size=len(dataset), seed=seed)
        return super()._get_train_sampler(train_dataset)

    def _get_eval_sampler(self, eval_dataset):
        # predictions must come back in the order given (score's token order, written back to the pairs' order):
        # never the length-grouped (shuffled) order the Trainer would use under group_by_length
        return SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

    # ------------------------------------------------------------ optimizer: the head's own learning rate
    def create_optimizer(self, model=None):
        if self.optimizer is not None or self.head_learning_rate is None:
            return super().create_optimizer(model)
        opt_model = self.model if model is None else model
        decay = set(self.get_decay_parameter_names(opt_model))
        head_ids = {id(p) for p in opt_model.head_parameters()}
        groups: dict[tuple[bool, bool], list] = {}
        for name, p in opt_model.named_parameters():
            if p.requires_grad:
                groups.setdefault((id(p) in head_ids, name in decay), []).append(p)
        param_groups = [{"params": params, "lr": self.head_learning_rate if is_head else self.args.learning_rate,
                         "weight_decay": self.args.weight_decay if decays else 0.0}
                        for (is_head, decays), params in groups.items()]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
        optimizer_kwargs.pop("lr", None)
        self.optimizer = optimizer_cls(param_groups, lr=self.args.learning_rate, **optimizer_kwargs)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        # transformers' own, with the warm-up capped by the run's length: under a linear warm-up the first step's
        # learning rate is 0, so a run no longer than its warm-up would never move the weights
        if self.lr_scheduler is None:
            warmup, asked = warmup_steps_for(self.args, num_training_steps)
            if warmup < asked:
                logger.warning("warm-up: %d step(s) asked (training.warmup_steps %g) but the run has %d; warming up "
                               "over %d so that training moves the weights", asked, self.args.warmup_steps,
                               num_training_steps, warmup)
            self.lr_scheduler = get_scheduler(self.args.lr_scheduler_type, optimizer=optimizer or self.optimizer,
                                              num_warmup_steps=warmup, num_training_steps=num_training_steps,
                                              scheduler_specific_kwargs=self.args.lr_scheduler_kwargs)
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def base_learning_rate(self, group: dict) -> float:
        if self.head_learning_rate is not None:
            head_ids = {id(p) for p in self._ranker().head_parameters()}
            if head_ids and all(id(p) in head_ids for p in group["params"]):
                return self.head_learning_rate
        return self.args.learning_rate

    # ------------------------------------------------------------ scoring and evaluation
    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        inputs.pop("group_size", None)
        if self._scoring_model is not None:
            model = self._scoring_model
        # the ranker's own forward, not the instance attribute: under training.bf16 accelerate replaces the prepared
        # model's forward with an autocast(bf16) wrapper, which would override eval.precision (fp32 scored in bf16,
        # bf16 activations fed to int8 layers); the backbone autocasts itself when the precision is bf16
        forward = type(model).forward.__get__(model)
        with torch.inference_mode():
            scores = forward(**inputs).float()
        return None, scores, None

    def score(self, pairs: PairDataset):
        """Scores of ``pairs`` in their order. Cross-encoders: ``Trainer.predict`` over the pairs in batches by
        exact token count (``token_order``: longest first, so a batch pads to about its own length). Bi-encoders (one process):
        ``score_pairs_once``, which encodes each distinct document once however many queries retrieved it
        (with several processes ``Trainer.predict`` shards the pairs instead)."""
        with precisions.inference(self._ranker(), self.precision) as model:
            if model.bi_encoder and self.args.world_size == 1 and len(pairs):
                return score_pairs_once(model, pairs, self.args.per_device_eval_batch_size)
            self._scoring_model = model if model is not self._ranker() else None
            order = token_order(self._ranker(), pairs)
            try:
                predictions = self.predict(Subset(pairs, order)).predictions
            finally:
                self._scoring_model = None
        # back in the pairs' order
        scores = np.empty_like(predictions)
        scores[order] = predictions
        return scores

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        pairs = eval_dataset if eval_dataset is not None else self.eval_dataset
        if not isinstance(pairs, PairDataset) or self.eval_qrels is None:
            raise ValueError("RankingTrainer.evaluate needs a PairDataset and eval_qrels")
        with progress.stage("validation"):
            if self._ranker().full_retrieval:  # dense: retrieve from the whole corpus (000 §5.3.1)
                with precisions.inference(self._ranker(), self.precision) as model:
                    aggregate = evaluate_retrieval(model, pairs.dataset, self.eval_qrels, self.eval_metrics,
                                                   batch_size=self.args.per_device_eval_batch_size)
            else:
                aggregate, _ = evaluate_run(self.eval_qrels, pairs.to_run(self.score(pairs)), self.eval_metrics)
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in aggregate.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


__all__ = ["RankingTrainer"]
