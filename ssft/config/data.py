"""The recipe's ``data`` section: the dataset, its splits, subsampling and negatives. The rules of the section alone
are ``DataConfig.problem()``; what it asks of the model and the loss (in-batch negatives, scored rows) is checked
with the other sections in ``ssft.config.recipe``."""
from __future__ import annotations

from dataclasses import dataclass

from ssft.config.choices import NEGATIVES, TRAIN_FORMS
from ssft.config.model import either
from ssft.config.parse import Checked, Problem
from ssft.config.training import seed_problem

SUBSAMPLES = ("max_train_queries", "max_positives_per_query", "max_validation_queries", "max_test_queries",
              "holdout_queries", "max_documents")


@dataclass
class DataConfig(Checked):
    dataset: str = "nfcorpus"
    train_split: str = "train"
    validation_split: str | None = "dev"
    test_split: str = "test"
    max_train_queries: int | None = None
    max_positives_per_query: int | None = None
    max_validation_queries: int | None = None
    max_test_queries: int | None = None
    holdout_queries: int | None = None  # with validation_split = train_split: these many train queries validate, never train
    # a corpus cut for a quick trial: the documents judged for the run's queries, then others drawn with sample_seed
    # up to this many in all (the judged ones are always kept); null: the whole corpus
    max_documents: int | None = None
    min_relevance: int = 1  # qrels score counted as relevant for training positives
    train: str | None = None  # training rows: a Hugging Face dataset (file, folder, hub id); null: train_split's qrels
    train_format: str = "auto"  # auto | text | ids | scored (teacher scores: margin_mse / listwise_kl)
    train_subset: str | None = None  # data.train from the hub: the dataset's configuration (subset) name
    negatives: str = "bm25"  # bm25 | random
    num_negatives: int = 1  # per training example (001 trains on triplets: 1 negative); 0: in-batch negatives alone
    negatives_depth: int = 100  # BM25 negatives are drawn from this top-k minus the positives
    sample_seed: int = 0  # which queries a max_*_queries subsample keeps
    fold: str | None = None  # the fold these splits are (a K-fold sweep sets it); tables average folds per seed (001 §4.1)

    def problem(self) -> Problem:
        seed = seed_problem(self.sample_seed)
        if seed:
            return "sample_seed", seed
        if self.negatives not in NEGATIVES:
            return "negatives", f"expected {either(list(NEGATIVES))}, got '{self.negatives}'"
        if self.negatives_depth < 1:
            return "negatives_depth", "must be >= 1"
        if self.num_negatives < 0:
            return "num_negatives", "must be >= 0"
        if self.train_format not in TRAIN_FORMS:
            return "train_format", f"expected {either(list(TRAIN_FORMS))}, got '{self.train_format}'"
        if self.train is None and (self.train_format != "auto" or self.train_subset is not None):
            return "train_format / data.train_subset", "only with data.train (a dataset of training rows)"
        held = self.validation_split is not None and self.validation_split == self.train_split
        if held and self.holdout_queries is None:
            return "validation_split", (f"'{self.validation_split}' is also the train split: set data.holdout_queries "
                                        "to validate on that many of its queries, held out of training")
        if self.holdout_queries is not None and not held:
            return "holdout_queries", ("holds queries of the train split out for validation: set "
                                       f"data.validation_split: {self.train_split} (the train split) with it")
        if self.holdout_queries is not None and self.train is not None:
            return "holdout_queries", "holds out queries of data.train_split's qrels, not of data.train's rows"
        if self.max_documents is not None and self.train is not None:
            return "max_documents", ("cuts the corpus around the documents judged for the qrels' queries; data.train's "
                                     "rows name their own: remove one of them")
        small = [key for key in SUBSAMPLES if getattr(self, key) is not None and getattr(self, key) < 1]
        return (small[0], "must be >= 1 or null") if small else None


__all__ = ["SUBSAMPLES", "DataConfig"]
