"""Attach a negative cache (``ssft.models.negative_cache``, 000 §4.1) to a dense model for training: filled at
the start, a refresh fraction ρ re-encoded after every step, detached at the end."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ssft.config.parse import Checked
from ssft.core.errors import SsftError
from ssft.models.base import Ranker
from ssft.models.negative_cache import NegativeCache
from ssft.training.callbacks.base import RecipeCallback

logger = logging.getLogger(__name__)


@dataclass
class NegativeCacheOptions(Checked):
    size: int = 4096  # cached documents
    num_negatives: int = 16  # drawn from the cache per item
    refresh_fraction: float = 0.1  # rho: the share of the cache re-encoded after every step
    sample_temperature: float = 1.0
    seed: int = 0

    def problem(self) -> str | None:
        if self.size < 1 or self.num_negatives < 1:
            return "size and num_negatives must be >= 1"
        if not 0.0 < self.refresh_fraction <= 1.0:
            return "refresh_fraction must be in (0, 1]"
        return None


class NegativeCacheCallback(RecipeCallback):
    name = "negative_cache"
    Config = NegativeCacheOptions
    adds_negatives = True  # scores cached documents no in-loop teacher grades
    combines_with_distillation = False  # the distillation teacher scores only the batch's documents

    def __init__(self, size: int = 4096, num_negatives: int = 16, refresh_fraction: float = 0.1,
                 sample_temperature: float = 1.0, seed: int = 0):
        NegativeCacheOptions(size, num_negatives, refresh_fraction, sample_temperature, seed).raise_problem()
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
        if not isinstance(model, Ranker) or not model.in_batch_negatives:
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
