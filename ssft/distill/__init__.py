"""Distillation into dense students (002, 004): teachers, the training objective, query-only training data.

- ``teacher``: ``DenseTeacher`` (a frozen dense dual encoder) and ``DualPooledCrossEncoderTeacher`` (004 §4.2,
  App. B: a cross-encoder whose [CLS]/[SEP] or segment-mean pooled states are proxy query / document embeddings).
- ``objective``: ``DistillationObjective``, the loss ``RankingTrainer`` computes when a recipe has a
  ``distillation`` section; ``DistillationCollator`` and ``QueryTexts`` (query-only training, 002).
The losses themselves are ``ssft.losses.embedding_match`` (002, 004 Eq. 7-8) and
``ssft.losses.score_distillation`` (004 Eq. 11-13).
"""
