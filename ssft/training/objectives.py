"""What ``RankingTrainer`` optimises: one interface, three objectives.

An ``Objective`` computes a training batch's loss (and the student's scores, when it has rows to show) from
``(model, ranker, inputs)`` -- ``model`` is what runs the forward (the ranker itself, or its DDP wrapper), ``ranker``
the unwrapped ranker -- and names the collator that builds its batches (``collator(ranker)``):

- ``RankingObjective``: the recipe's ranking loss on the (queries, group) scores of the batch (``ranking_loss``);
  batches from ``RankerCollator(ranker)``.
- ``InLoopDistillationObjective``: 003's tightly coupled teacher (the ``tct`` loss): a frozen bi-encoder teacher
  scores every query of the batch against every document of it, in the loop; batches from
  ``RankerCollator(ranker, teacher)``, which adds the teacher's own tokens.
- ``PrecomputedDistillationObjective``: a distillation loss (``needs_teacher_scores``: ``margin_mse``,
  ``listwise_kl``) on the student's scores of each query's own candidates against the teacher scores the
  training data carries (``data.train`` in the scored form); batches from ``RankerCollator(ranker)``.
- ``ssft.training.distillation.DistillationObjective``: embedding / score distillation from a frozen dense or
  cross-encoder teacher (004, 002); batches from ``DistillationCollator(ranker, teacher)``.
- ``TokenReconstructionObjective``: another objective's loss plus ``loss.reconstruction_weight`` × 004 §4.2's token
  reconstruction loss on the token states of the same forward (a dual-pooled cross-encoder); the other's batches.

``objective_for(loss, teacher, reconstruction_weight)`` is the objective a ranking loss (and an in-loop teacher, and
the reconstruction term) make.
"""
from __future__ import annotations

import torch

from ssft.data.examples import RankerCollator
from ssft.losses.base import RankingLoss
from ssft.losses.token_reconstruction import TokenReconstructionLoss
from ssft.teachers.in_loop import TEACHER_KEYS, batch_items


class Objective:
    """The interface (see the module docstring)."""

    def collator(self, ranker):
        """The data collator that builds this objective's batches for ``ranker``."""
        raise NotImplementedError

    def compute(self, model, ranker, inputs: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(loss, the student's scores or None) of a training batch."""
        raise NotImplementedError


def ranking_loss(model, ranker, loss_fn: RankingLoss, inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, scores) of a training batch: ``model`` is what runs the forward (the ranker itself, or its DDP
    wrapper), ``ranker`` the unwrapped ranker. Each process of a multi-process run computes the loss of its own
    items; DDP averages the gradients. In-batch negatives (dense) are gathered across processes by the model,
    whose ``loss_weight`` makes that average the global batch's mean when processes hold different item counts."""
    inputs = dict(inputs)
    group = int(inputs.pop("group_size"))
    if ranker.in_batch_negatives:  # dense: in-batch + cached negatives per item
        scores = model(**inputs, group_size=group)
        return loss_fn(scores) * getattr(ranker, "loss_weight", 1.0), scores
    scores = model(**inputs).view(-1, group)
    return loss_fn(scores), scores


class RankingObjective(Objective):
    """The ranking loss on the batch's groups (query + [positive, negatives...])."""

    def __init__(self, loss: RankingLoss):
        if getattr(loss, "needs_teacher", False):  # any callable over scores may be a loss, not only a RankingLoss
            raise ValueError(f"the loss {type(loss).__name__} distils a teacher: pass teacher=FrozenTeacher(...)")
        if getattr(loss, "needs_teacher_scores", False):
            raise ValueError(f"the loss {type(loss).__name__} distils precomputed teacher scores: use "
                             "PrecomputedDistillationObjective")
        self.loss = loss

    def collator(self, ranker):
        return RankerCollator(ranker)

    def compute(self, model, ranker, inputs):
        return ranking_loss(model, ranker, self.loss, inputs)


class InLoopDistillationObjective(Objective):
    """In-loop distillation (003 Eq. 6): the student's and the frozen teacher's (``FrozenTeacher``) scores of every
    distinct query of the batch against every distinct document of it (positives and hard negatives of all queries),
    one row per (query, positive) item, compared by ``loss`` (e.g. ``TightlyCoupledDistillationLoss``). The teacher
    is no part of the model: neither optimised nor saved in checkpoints."""

    def __init__(self, loss: RankingLoss, teacher):
        self.loss = loss
        self.teacher = teacher

    def collator(self, ranker):
        return RankerCollator(ranker, self.teacher)

    def compute(self, model, ranker, inputs):
        inputs = dict(inputs)
        group = int(inputs.pop("group_size"))
        missing = [k for k in TEACHER_KEYS if k not in inputs]
        if missing:
            raise ValueError(f"a distillation batch lacks {missing}: build the collator with RankerCollator(ranker, teacher)")
        teacher_inputs = {k: inputs.pop(k) for k in TEACHER_KEYS}
        student = model(**inputs, all_pairs=True)  # (distinct queries, distinct documents)
        teacher = self.teacher.score_matrix(teacher_inputs)
        if teacher.shape != student.shape:
            raise ValueError(f"teacher scores {tuple(teacher.shape)} do not line up with the student's {tuple(student.shape)}")
        item_q, item_pos, excluded = batch_items(inputs["q_index"], inputs["d_index"], group)
        rows = student[item_q]
        return self.loss(rows, teacher[item_q], item_pos, excluded), rows


class PrecomputedDistillationObjective(Objective):
    """Distillation from teacher scores the batch carries (``teacher_scores``, (batch, group), from ``ScoredGroups``):
    the student scores each query against its own group only (every architecture, any adapter: the ranker's plain
    pair scores), and ``loss`` (``margin_mse``, ``listwise_kl``) compares the two (batch, group) matrices."""

    def __init__(self, loss: RankingLoss):
        self.loss = loss

    def collator(self, ranker):
        return RankerCollator(ranker)

    def compute(self, model, ranker, inputs):
        inputs = dict(inputs)
        group = int(inputs.pop("group_size"))
        if "teacher_scores" not in inputs:
            raise ValueError("a batch without teacher_scores: the distillation losses train on data.train in the scored form")
        teacher = inputs.pop("teacher_scores")
        student = model(**inputs).view(-1, group)
        return self.loss(student, teacher.to(student.device)), student


class TokenReconstructionObjective(Objective):
    """``inner``'s loss + ``weight`` × the token reconstruction loss (004 §4.2, ``TokenReconstructionLoss``) on the
    last-layer token states of the forward that scored the batch (no second pass): how 004 trains its dual-pooled
    cross-encoder, with a ranking loss on labelled data (``RankingObjective``) or score distillation from another
    cross-encoder's scores (``PrecomputedDistillationObjective``, ``data.train`` in the scored form). The ranker
    must carry a reconstruction head (``Ranker.reconstruction_heads``: a cross-encoder with ``head: dual_pooled``).
    ``last_parts`` holds the unweighted terms of the last batch."""

    def __init__(self, inner: Objective, weight: float):
        if weight <= 0:
            raise ValueError(f"the reconstruction weight must be > 0, got {weight}")
        self.inner = inner
        self.weight = float(weight)
        self.loss = TokenReconstructionLoss()
        self.last_parts: dict[str, float] = {}

    def collator(self, ranker):
        return self.inner.collator(ranker)

    def compute(self, model, ranker, inputs):
        def term(hidden, input_ids, attention_mask):  # inside the forward: DDP sees the reconstruction head used there
            return self.loss(hidden, input_ids, attention_mask, ranker.reconstruction_logits, ranker.special_ids)

        with ranker.keeping_token_states(term) as kept:
            loss, scores = self.inner.compute(model, ranker, inputs)
        reconstruction = kept.value
        self.last_parts = {"ranking": float(loss.detach()), "reconstruction": float(reconstruction.detach())}
        return loss + self.weight * reconstruction, scores


def objective_for(loss: RankingLoss, teacher=None, reconstruction_weight: float = 0.0) -> Objective:
    """The objective of a ranking loss: in-loop distillation with a ``teacher``, distillation from the data's
    teacher scores for a loss that ``needs_teacher_scores``, the plain ranking loss otherwise; with a
    ``reconstruction_weight`` > 0, plus 004 §4.2's token reconstruction term (``TokenReconstructionObjective``)."""
    if teacher is not None:
        objective: Objective = InLoopDistillationObjective(loss, teacher)
    elif getattr(loss, "needs_teacher_scores", False):
        objective = PrecomputedDistillationObjective(loss)
    else:
        objective = RankingObjective(loss)
    return TokenReconstructionObjective(objective, reconstruction_weight) if reconstruction_weight else objective


__all__ = ["InLoopDistillationObjective", "Objective", "PrecomputedDistillationObjective", "RankingObjective",
           "TokenReconstructionObjective", "objective_for", "ranking_loss"]
