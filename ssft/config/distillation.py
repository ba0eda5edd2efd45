"""The recipe's optional ``distillation`` section: a teacher and the distillation objective
(``ssft.training.distillation``; dense students), and its ``generated_queries`` (004 App. E). The rules of the section
alone are its dataclasses' ``problem()``; what it asks of the model, the loss, the adapter, the data and the callbacks
is checked with the other sections in ``ssft.config.recipe``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ssft.config.choices import (
    DUAL_POOLINGS,
    EMBEDDING_DISTANCES,
    GENERATION_DECODINGS,
    POOLINGS,
    SCORE_LOSSES,
    TEACHER_KINDS,
)
from ssft.config.model import either
from ssft.config.parse import Checked, Problem, parse_dataclass
from ssft.config.training import seed_problem
from ssft.core.errors import closest

LOSS_WEIGHTS = ("one_hot_weight", "score_weight", "query_embedding_weight", "document_embedding_weight")


@dataclass
class GeneratedQueriesConfig(Checked):
    """004 §4.3 / App. E: queries generated from the training queries by a seq2seq model, x' = Dec(Enc(x) + eps), once
    before training (``ssft.data.query_generation``); they enter the query embedding matching loss only (Eq. 7 on Q')."""

    model: str = ""  # hub id / folder of a transformers encoder-decoder (004: BART-base)
    per_query: int = 2  # generated queries per training query (App. E: two)
    sigma: float = 0.1  # std of the isotropic Gaussian noise on the encoder states (§5: 0.1 or 0.2)
    mask_probability: float = 0.1  # each query token replaced by the mask token with this probability (§5: 10 %)
    max_length: int = 32  # new tokens decoded at most
    decoding: str = "greedy"  # greedy | sample
    weight: float = 1.0  # of Eq. 7 on the generated queries
    seed: int = 0  # the masks, the noise (and sampling) are drawn from this seed

    def problem(self) -> Problem:
        if not self.model:
            return "model", "name the seq2seq generator (a hub id or folder, e.g. facebook/bart-base)"
        if self.per_query < 1:
            return "per_query", f"must be >= 1, got {self.per_query}"
        if self.sigma < 0:
            return "sigma", f"must be >= 0, got {self.sigma:g}"
        if not 0.0 <= self.mask_probability < 1.0:
            return "mask_probability", f"must be in [0, 1), got {self.mask_probability:g}"
        if self.max_length < 1:
            return "max_length", f"must be >= 1, got {self.max_length}"
        if self.decoding not in GENERATION_DECODINGS:
            return "decoding", (f"expected {either(list(GENERATION_DECODINGS))}, got '{self.decoding}'"
                                f"{closest(self.decoding, GENERATION_DECODINGS)}")
        if self.weight <= 0:
            return "weight", f"must be > 0 (remove generated_queries to train without them), got {self.weight:g}"
        problem = seed_problem(self.seed)
        return ("seed", problem) if problem else None


@dataclass
class DistillationConfig(Checked):
    """A teacher and the distillation objective (``ssft.training.distillation``); absent = no distillation."""

    teacher: str = ""  # hub id / folder of a transformers model (a sentence embedder), or a saved ssft model
    teacher_kind: str = "dense"  # dense | cross_dual_pooled (CE -> DE, 004 §4.2)
    teacher_pooling: str = "mean"  # dense teacher by name: mean | cls; cross_dual_pooled: cls_sep | segment_mean
    # true: 20 x cosine; false: the raw dot product (002's msmarco-*-dot; 004 App. B's CE proxies); null = as the teacher
    # scores: a dense teacher by name 20 x cosine (sentence-transformers' cosine models), a cross-encoder the inner
    # product of its proxies (004 App. B)
    teacher_normalize: bool | None = None
    inherit_documents: bool = False  # asymmetric student: the teacher encodes the documents, only queries train
    query_only: bool = False  # train on query texts alone (002): needs inherit_documents
    query_splits: list[str] = field(default_factory=lambda: ["train"])  # query_only: the queries of these qrels splits
    one_hot_weight: float = 1.0  # the recipe's loss on the student's scores (004 Eq. 9)
    score_weight: float = 1.0  # score distillation (004 Eq. 11-13)
    score_loss: str = "softmax_ce"  # softmax_ce (Eq. 11) | bce (Eq. 12) | mse (Eq. 13)
    temperature: float = 1.0  # softmax_ce
    query_embedding_weight: float = 1.0  # query embedding matching (004 Eq. 7; 002)
    document_embedding_weight: float = 0.0  # document embedding matching (004 Eq. 8; a student with its own documents)
    embedding_distance: str = "l2"  # l2 (Eq. 7-8, 002 §2.2) | mse (002 §3.3)
    keep_teacher_corpus: bool = True  # fill the teacher's document embeddings from its (cached) corpus index first
    generated_queries: GeneratedQueriesConfig | None = None  # 004 §4.3 / App. E: extra queries for Eq. 7 only

    def problem(self) -> Problem:
        if not self.teacher:
            return "teacher", "name the teacher (a hub id or folder of a sentence embedder, or a saved ssft dense model)"
        return self._teacher_problem() or self._objective_problem() or self._documents_problem()

    def _teacher_problem(self) -> Problem:
        if self.teacher_kind not in TEACHER_KINDS:
            return "teacher_kind", f"expected {either(list(TEACHER_KINDS))}, got '{self.teacher_kind}'"
        poolings = POOLINGS if self.teacher_kind == "dense" else DUAL_POOLINGS
        if self.teacher_pooling not in poolings:
            return "teacher_pooling", (f"a {self.teacher_kind} teacher pools {' or '.join(poolings)}, "
                                       f"got '{self.teacher_pooling}'")
        if self.teacher_kind == "cross_dual_pooled" and self.query_only:
            # its query proxy is computed with a document (Eq. 14 / 15 pool the pair): a query alone has none to match
            return "query_only", ("a cross-encoder teacher's query embedding depends on the document it is paired "
                                  "with; train on (query, document) groups (query_only: false)")
        return None

    def _objective_problem(self) -> Problem:
        if self.score_loss not in SCORE_LOSSES:
            return "score_loss", f"expected one of {', '.join(SCORE_LOSSES)}, got '{self.score_loss}'"
        if self.embedding_distance not in EMBEDDING_DISTANCES:
            return "embedding_distance", (f"expected one of {', '.join(EMBEDDING_DISTANCES)}, "
                                          f"got '{self.embedding_distance}'")
        if self.temperature <= 0:
            return "temperature", "must be > 0"
        negative = [key for key in LOSS_WEIGHTS if getattr(self, key) < 0]
        return (negative[0], "must be >= 0") if negative else None

    def _documents_problem(self) -> Problem:
        if self.query_only:
            if not self.inherit_documents:
                return "query_only", ("a student trained on queries alone serves against the teacher's documents; "
                                      "set distillation.inherit_documents: true")
            if not self.query_embedding_weight:
                return "query_only", "the only loss is query embedding matching; query_embedding_weight must be > 0"
            if not self.query_splits:
                return "query_splits", "name at least one split whose queries train the student"
        elif not any(getattr(self, key) for key in LOSS_WEIGHTS):
            return "every loss weight is 0"
        if self.inherit_documents and self.document_embedding_weight:
            return "document_embedding_weight", ("an inherited document encoder is the teacher's own (Eq. 8 is 0); "
                                                 "set it to 0")
        return None


def parse_distillation(value: Any, where: str) -> DistillationConfig | None:
    """The ``distillation`` section (None when absent), its ``generated_queries`` parsed too."""
    if value is None:
        return None
    config = parse_dataclass(DistillationConfig, value, where)
    if config.generated_queries is not None:
        config.generated_queries = parse_dataclass(GeneratedQueriesConfig, config.generated_queries,
                                                   f"{where}.generated_queries")
    return config


__all__ = ["LOSS_WEIGHTS", "DistillationConfig", "GeneratedQueriesConfig", "parse_distillation"]
