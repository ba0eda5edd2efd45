"""RankingTrainer: a transformers Trainer whose loss, prediction and evaluation are a ranker's."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import Trainer

from ssft.data.beir import Qrels
from ssft.data.examples import PairDataset
from ssft.eval.metrics import evaluate_run
from ssft.losses.base import RankingLoss


class RankingTrainer(Trainer):
    """Trainer for rankers.

    - ``compute_loss``: the batch holds ``group_size`` = 1 + negatives documents per query; scores are
      reshaped to (queries, group) and passed to the ranking loss.
    - ``prediction_step``: returns relevance scores (``trainer.predict(pairs)`` reranks any pairs).
    - ``score``: what evaluation and test reranking call; bi-encoders encode each distinct document once.
    - ``evaluate``: reranks the validation first stage and returns ir_measures metrics as ``eval_<name>``.
    - the optimizer gives the ranker head its own learning rate (001 Table 8).
    """

    def __init__(self, *args, loss: RankingLoss, head_learning_rate: float | None = None,
                 eval_qrels: Qrels | None = None, eval_metrics: list[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss = loss
        self.head_learning_rate = head_learning_rate
        self.eval_qrels = eval_qrels
        self.eval_metrics = eval_metrics or ["nDCG@10"]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        group = int(inputs.pop("group_size"))
        if getattr(self._ranker(), "in_batch_negatives", False):  # dense: in-batch + cached negatives per item
            scores = model(**inputs, group_size=group)
        else:
            scores = model(**inputs).view(-1, group)
        loss = self.loss(scores)
        return (loss, scores) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        inputs.pop("group_size", None)
        with torch.inference_mode():
            scores = model(**inputs).float()
        return None, scores, None

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
        param_groups = [
            {
                "params": params,
                "lr": self.head_learning_rate if is_head else self.args.learning_rate,
                "weight_decay": self.args.weight_decay if decays else 0.0,
            }
            for (is_head, decays), params in groups.items()
        ]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
        optimizer_kwargs.pop("lr", None)
        self.optimizer = optimizer_cls(param_groups, lr=self.args.learning_rate, **optimizer_kwargs)
        return self.optimizer

    def _ranker(self):
        return self.accelerator.unwrap_model(self.model) if hasattr(self, "accelerator") else self.model

    def score(self, pairs: PairDataset):
        """Scores of ``pairs`` in their order. Cross-encoders: ``Trainer.predict``. Bi-encoders (one process):
        ``score_pairs_once``, which encodes each distinct document once however many queries retrieved it
        (with several processes ``Trainer.predict`` shards the pairs instead)."""
        from ssft.models.bi import BiEncoder, score_pairs_once

        model = self.accelerator.unwrap_model(self.model) if hasattr(self, "accelerator") else self.model
        if isinstance(model, BiEncoder) and self.args.world_size == 1 and len(pairs):
            return score_pairs_once(model, pairs, self.args.per_device_eval_batch_size)
        return self.predict(pairs).predictions

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        pairs = eval_dataset if eval_dataset is not None else self.eval_dataset
        if not isinstance(pairs, PairDataset) or self.eval_qrels is None:
            raise ValueError("RankingTrainer.evaluate needs a PairDataset and eval_qrels")
        if getattr(self._ranker(), "full_retrieval", False):  # dense: retrieve from the whole corpus (000 §5.3.1)
            from ssft.eval.retrieve import evaluate_retrieval

            aggregate = evaluate_retrieval(self._ranker(), pairs.dataset, self.eval_qrels, self.eval_metrics,
                                           batch_size=self.args.per_device_eval_batch_size)
        else:
            run = pairs.to_run(self.score(pairs))
            aggregate, _ = evaluate_run(self.eval_qrels, run, self.eval_metrics)
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in aggregate.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _save(self, output_dir: str | None = None, state_dict=None):
        # checkpoints hold the ranker in ssft's own folder format (PEFT adapter + ranker head) under ranker/;
        # the Trainer writes its optimizer / scheduler state beside it
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save:
            self.model.save(Path(output_dir) / "ranker")
