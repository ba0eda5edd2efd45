"""Attach a negative cache (``ssft.models.negative_cache``, 000 §4.1) to a dense model for training: filled at
the start, a refresh fraction ρ re-encoded after every step, detached at the end."""
from __future__ import annotations

import logging

from transformers import TrainerCallback

from ssft.core.errors import SsftError
from ssft.config.registry import CALLBACKS

logger = logging.getLogger(__name__)


@CALLBACKS.register("negative_cache")
class NegativeCacheCallback(TrainerCallback):
    def __init__(self, size: int = 4096, num_negatives: int = 16, refresh_fraction: float = 0.1,
                 sample_temperature: float = 1.0, seed: int = 0):
        if size < 1 or num_negatives < 1:
            raise ValueError("size and num_negatives must be >= 1")
        if not 0.0 < refresh_fraction <= 1.0:
            raise ValueError("refresh_fraction must be in (0, 1]")
        self.size = size
        self.num_negatives = num_negatives
        self.refresh_fraction = refresh_fraction
        self.sample_temperature = sample_temperature
        self.seed = seed
        self.corpus_texts: list[str] = []
        self.cache = None

    def setup(self, dataset=None, **_) -> None:
        if dataset is not None:
            self.corpus_texts = [dataset.corpus[d].full_text for d in sorted(dataset.corpus)]

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from ssft.models.negative_cache import NegativeCache

        if model is None or not getattr(model, "in_batch_negatives", False):
            raise SsftError("callbacks.negative_cache: needs model.architecture 'dense'")
        if not self.corpus_texts:
            train = getattr(kwargs.get("train_dataloader"), "dataset", None)
            if train is not None and hasattr(train, "dataset"):
                self.setup(dataset=train.dataset)
        self.cache = NegativeCache.from_corpus(self.corpus_texts, self.size, seed=self.seed, num_negatives=self.num_negatives,
                                               refresh_fraction=self.refresh_fraction, sample_temperature=self.sample_temperature,
                                               batch_size=args.per_device_eval_batch_size)
        self.cache.fill(model)
        model.negative_cache = self.cache

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.cache is not None and model is not None:
            self.cache.refresh(model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if model is not None:
            model.negative_cache = None
        logger.info("negative cache: %d entries re-encoded during training", self.cache.refreshed_rows if self.cache else 0)
