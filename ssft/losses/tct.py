from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ssft.config.parse import Checked
from ssft.core.errors import SsftError
from ssft.losses.base import RankingLoss


@dataclass
class TctOptions(Checked):
    gamma: float = 0.1  # weight of the hard-label term (003 §3.1)
    temperature: float = 0.25  # applied to the teacher's scores (003 §3.1)
    teacher: str | None = None  # a saved ssft model (run folder or its model/) or a hub name built as a ColBERT; required
    init_from_teacher: bool = False  # the student starts from the teacher's backbone weights (003 §4)

    def problem(self) -> str | None:
        if not 0.0 <= self.gamma <= 1.0:
            return "gamma must be in [0, 1]"
        if self.temperature <= 0:
            return "temperature must be > 0"
        return None

    def check(self, where: str) -> None:
        if not isinstance(self.teacher, str) or not self.teacher.strip():  # a recipe must name it
            raise SsftError(f"{where}.teacher: the tct loss needs a teacher: a saved ssft ColBERT (run folder or its "
                            f"model/ folder) or a hub name built as a ColBERT, got {self.teacher!r}")
        super().check(where)


class TightlyCoupledDistillationLoss(RankingLoss):
    r"""TCT-ColBERT distillation (Lin, Yang & Lin, 003 §3.1, Eq. 5–6): hard labels plus the soft labels of a
    frozen teacher scored on the same batch.

    For item i of the batch (query :math:`q_i` with its positive :math:`d_i^+`) and the set :math:`D_B` of every
    document of the batch (positives and hard negatives of all queries):

    .. math::

        P(d|q) = \frac{\exp \phi_{student}(q, d)}{\sum_{d' \in D_B} \exp \phi_{student}(q, d')}, \qquad
        \hat P(d|q) = \frac{\exp(\phi_{teacher}(q, d)/\tau)}{\sum_{d' \in D_B} \exp(\phi_{teacher}(q, d')/\tau)}

        L = \frac{1}{|B|}\sum_{i \in B} \Big[-\gamma \log P(d_i^+ | q_i)
            + (1 - \gamma)\, \mathrm{KL}\big(\hat P(\cdot|q_i) \,\|\, P(\cdot|q_i)\big)\Big]

    The paper sums over the batch; this averages (the same gradient direction, a learning rate |B| times smaller). The
    student's scores enter Eq. 5 untempered, as in the paper: 003's student scores by the raw dot product of
    average-pooled states (Eq. 2), unbounded like the teacher's MaxSim — a dense student with ``model.normalize:
    false`` and ``score_scale: 1`` (recipes/tct_nfcorpus.yaml); a normalised student's ``score_scale`` acts as its
    temperature, and its bounded scores cannot follow the teacher's distribution. In the cross-entropy term, the
    item's query's *other* positives in the batch are left out of the denominator (as the contrastive loss does); the
    KL term keeps every document of the batch (the teacher grades them all).

    Options:
        gamma: :math:`\gamma`, weight of the hard-label term (default 0.1, 003 §3.1).
        temperature: :math:`\tau` applied to the teacher's scores (default 0.25, 003 §3.1).
        teacher: the frozen teacher — a saved ssft model folder or run folder (its ``model/``), or a hub name /
            local transformers folder built as a ColBERT (``ssft.teachers.in_loop``). Required.
        init_from_teacher: the student starts from the teacher's trained backbone weights (003 §4: "at the second
            stage, we initialize the student model using the trained weights of the teacher model"); the teacher's
            ColBERT projection is not copied (003 §3.1 removes it). Default false.
    Inputs:
        student: (items, documents) student scores of every item's query against every document of the batch.
        teacher: (items, documents) teacher scores of the same pairs (no gradient).
        positive: (items,) column of each item's positive.
        excluded: optional (items, documents) bool, True where a column is another positive of the item's query
            (dropped from the cross-entropy's denominator only).
    Returns:
        scalar loss.
    """

    name = "tct"
    Config = TctOptions
    needs_teacher = True  # RankingTrainer scores the batch with the teacher and calls forward(student, teacher, ...)

    def __init__(self, gamma: float = 0.1, temperature: float = 0.25, teacher: str | None = None,
                 init_from_teacher: bool = False):
        super().__init__()
        TctOptions(gamma, temperature, teacher, init_from_teacher).raise_problem()
        self.gamma = float(gamma)
        self.temperature = float(temperature)
        self.teacher = teacher
        self.init_from_teacher = bool(init_from_teacher)

    def forward(self, student: torch.Tensor, teacher: torch.Tensor, positive: torch.Tensor,
                excluded: torch.Tensor | None = None) -> torch.Tensor:
        if student.dim() != 2 or student.shape != teacher.shape or student.size(1) < 2:
            raise ValueError(f"expected student and teacher scores of the same shape (items, >= 2 documents), "
                             f"got {tuple(student.shape)} and {tuple(teacher.shape)}")
        if positive.shape != (student.size(0),):
            raise ValueError(f"expected one positive column per item, got shape {tuple(positive.shape)}")
        teacher = teacher.detach().to(student.dtype)
        logits = student
        if excluded is not None:
            own = F.one_hot(positive, student.size(1)).bool()
            logits = student.masked_fill(excluded & ~own, float("-inf"))
        hard = F.cross_entropy(logits, positive)
        # KL(P_hat || P) = sum P_hat (log P_hat - log P), averaged over the items
        soft = F.kl_div(F.log_softmax(student, dim=1), F.log_softmax(teacher / self.temperature, dim=1),
                        reduction="batchmean", log_target=True)
        return self.gamma * hard + (1.0 - self.gamma) * soft
