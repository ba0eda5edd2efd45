"""A Trainer that only predicts: the scoring function evaluation takes (``prediction_trainer(ranker).score``)."""
from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import torch
from transformers import TrainingArguments

from ssft.data.examples import RankerCollator
from ssft.losses import PairwiseSoftmaxLoss
from ssft.training.trainer import RankingTrainer


def prediction_trainer(ranker, batch_size: int = 64, output_dir: str | Path | None = None,
                       precision: str = "fp32") -> RankingTrainer:
    """A Trainer that only predicts (its ``score(pairs)`` is what ``ssft.eval.rerank.rerank_and_report`` takes):
    ``Trainer.predict`` for cross-encoders, each distinct document encoded once for bi-encoders. It writes
    nothing; its ``output_dir`` (which the Trainer creates) is the caller's output folder, or else a temporary
    folder removed with the trainer. ``precision``: what it scores in (``ssft.core.precision``)."""
    scratch = None if output_dir is not None else tempfile.mkdtemp(prefix="ssft-predict-")
    args = TrainingArguments(
        output_dir=str(output_dir if output_dir is not None else scratch),
        per_device_eval_batch_size=batch_size,
        report_to=[],
        remove_unused_columns=False,
        disable_tqdm=False,  # progress as ssft.core.progress decides (a bar, a line every 30 s, or none)
        dataloader_pin_memory=torch.cuda.is_available(),  # without a GPU torch warns that pinning serves nothing
        save_strategy="no",
    )
    # the loss is never computed: a prediction-only trainer scores
    trainer = RankingTrainer(model=ranker, args=args, data_collator=RankerCollator(ranker), loss=PairwiseSoftmaxLoss(),
                             precision=precision)
    if scratch is not None:
        weakref.finalize(trainer, shutil.rmtree, scratch, True)
    return trainer


__all__ = ["prediction_trainer"]
