"""The values a recipe key may take where the code that reads them lives above ``ssft.config`` (the recipe checks
them without importing that code): each owner imports its constant from here."""
from __future__ import annotations

# model.pooling (twin, dense; a dense teacher by name) and model.scorer (twin): ssft.models.twin, ssft.models.dense
POOLINGS = ("mean", "cls")
SCORERS = ("combiner", "cosine", "dot")
# model.head (cross): ssft.models.cross
CROSS_HEADS = ("classifier", "cls_linear", "dual_pooled", "gated_segments")

# distillation (ssft.training.distillation, ssft.teachers)
TEACHER_KINDS = ("dense", "cross_dual_pooled")  # distillation.teacher_kind
DUAL_POOLINGS = ("cls_sep", "segment_mean")  # model.dual_pooling (cross), distillation.teacher_pooling of a cross teacher
SCORE_LOSSES = ("softmax_ce", "bce", "mse")  # distillation.score_loss (ssft.losses.score_distillation)
EMBEDDING_DISTANCES = ("l2", "mse")  # distillation.embedding_distance (ssft.losses.embedding_match)
GENERATION_DECODINGS = ("greedy", "sample")  # distillation.generated_queries.decoding (ssft.data.query_generation)

# data.negatives
NEGATIVES = ("bm25", "random")
TRAIN_FORMS = ("auto", "text", "ids", "scored")  # data.train_format (ssft.data.hf_sources)

__all__ = ["CROSS_HEADS", "DUAL_POOLINGS", "EMBEDDING_DISTANCES", "GENERATION_DECODINGS", "NEGATIVES", "POOLINGS",
           "SCORERS", "SCORE_LOSSES", "TEACHER_KINDS", "TRAIN_FORMS"]
