"""The distillation objective ``RankingTrainer`` computes when a recipe has a ``distillation`` section.

Training groups (query, positive, negatives), 004 §4.1 / §5.2: with the student's in-batch score rows (each
item's positive, then every document of the batch; ``ssft.models.dense.in_batch_rows``) and the teacher's rows
over the same documents,

    loss = one_hot_weight            * recipe loss on the student rows (one-hot, e.g. contrastive = Eq. 9)
         + score_weight              * score distillation (Eq. 11 softmax CE | Eq. 12 BCE | Eq. 13 MSE)
         + query_embedding_weight    * query embedding matching (Eq. 7)
         + document_embedding_weight * document embedding matching (Eq. 8; a student with its own documents)

A dual-pooled cross-encoder teacher (CE → DE, 004 §4.2, ``ssft.teachers.cross``) scores each item's own
documents (pairs, not the whole batch): score distillation over the item's group, Eq. 7 / Eq. 8 against the
pair's proxy query / document embeddings.

Query-only training (002; 004's "embedding matching only, inherited document embeddings"): batches of query
texts, loss = query_embedding_weight × embedding matching of the student's and the teacher's query vectors.

Generated queries (004 §4.3, App. E; ``distillation.generated_queries``, made once before training by
``ssft.data.query_generation``): each batch also carries the generated queries Q' of its queries, and

    + generated_queries.weight × query embedding matching on Q' (Eq. 7 on Q'; no other loss sees them)

against the teacher's embedding of each generated query: a dense teacher's query embedding; a cross-encoder
teacher's proxy query embedding of the generated query paired with each document of its source query's group (its
query proxy depends on the document it reads), the student's one vector matched to each.

The teacher is frozen and in eval mode, and its query embeddings are computed without gradient on the
current batch; its document embeddings are the ones it keeps (``DenseTeacher.documents``: encoded once, or
read from its corpus index). ``last_parts`` holds the weighted terms of the last batch.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

from ssft.data.examples import RankerCollator
from ssft.losses.embedding_match import EmbeddingMatchLoss
from ssft.losses.score_distillation import ScoreDistillationLoss
from ssft.models.dense import in_batch_rows
from ssft.training.objectives import Objective


class QueryTexts(Dataset):
    """Query-only training items ``{"query": text}`` (distinct texts, in the given order)."""

    def __init__(self, texts: list[str]):
        self.texts = list(dict.fromkeys(texts))

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> dict:
        return {"query": self.texts[i]}


class DistillationCollator:
    """The student's batch (``RankerCollator``) plus the teacher's own tokens of the same texts (``t_*`` keys).
    Query-only items become the student's and the teacher's query tokens; evaluation pairs are the student's only."""

    def __init__(self, ranker, teacher, generated: dict[str, list[str]] | None = None):
        self.ranker = ranker
        self.teacher = teacher
        self.student_collator = RankerCollator(ranker)
        self.generated = generated or {}  # query text -> its generated queries (004 App. E)

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        if "documents" not in items[0] and "document" not in items[0]:  # query-only
            texts = list(dict.fromkeys(it["query"] for it in items))
            q = self.ranker.tokenize_queries(texts)
            return {"q_input_ids": q["input_ids"], "q_attention_mask": q["attention_mask"],
                    **self.teacher.tokenize(texts), **self._generated(items)}
        batch = self.student_collator(items)
        if "documents" in items[0]:
            group = len(items[0]["documents"])
            queries = [it["query"] for it in items for _ in range(group)]
            batch.update(self.teacher.tokenize(queries, [d for it in items for d in it["documents"]]))
            batch.update(self._generated(items))
        return batch

    def _generated(self, items: list[dict]) -> dict[str, torch.Tensor]:
        """The generated queries of the batch's queries (``g_*``: the student's tokens of each distinct one; ``t_g_*``
        the dense teacher's; ``t_gp_*`` a cross-encoder teacher's (generated query, document) pairs, each generated
        query with every document of its source item, ``g_pair_index`` their generated query's row)."""
        if not self.generated:
            return {}
        texts = list(dict.fromkeys(g for it in items for g in self.generated.get(it["query"], [])))
        if not texts:
            return {}
        student = self.ranker.tokenize_queries(texts)
        out = {"g_input_ids": student["input_ids"], "g_attention_mask": student["attention_mask"]}
        if "documents" not in items[0] or not getattr(self.teacher, "pairs_only", False):
            teacher = self.teacher.tokenize(texts)
            out.update({"t_g_input_ids": teacher["t_q_input_ids"], "t_g_attention_mask": teacher["t_q_attention_mask"]})
            return out
        row = {text: i for i, text in enumerate(texts)}
        pairs = [(g, d) for it in items for g in dict.fromkeys(self.generated.get(it["query"], [])) for d in it["documents"]]
        teacher = self.teacher.tokenize([g for g, _ in pairs], [d for _, d in pairs])
        out.update({f"t_gp_{k[len('t_p_'):]}": v for k, v in teacher.items()})
        out["g_pair_index"] = torch.tensor([row[g] for g, _ in pairs])
        return out


class DistillationObjective(Objective):
    """See the module docstring. ``config``: the recipe's ``DistillationConfig``; ``one_hot_loss``: the recipe's
    ranking loss (on the student's score rows). An ``ssft.training.objectives.Objective``: its batches come from
    ``DistillationCollator``; it runs the unwrapped ranker (distillation trains in one process) and gives no scores."""

    def __init__(self, teacher, config, one_hot_loss=None, generated: dict[str, list[str]] | None = None):
        self.teacher = teacher
        self.config = config
        self.generated = generated  # query text -> generated queries (004 App. E), or None
        self.one_hot_loss = one_hot_loss
        self.score_loss = ScoreDistillationLoss(config.score_loss, config.temperature)
        self.embedding_loss = EmbeddingMatchLoss(config.embedding_distance)
        self.last_parts: dict[str, float] = {}

    def collator(self, ranker) -> DistillationCollator:
        return DistillationCollator(ranker, self.teacher, self.generated)

    def compute(self, model, ranker, inputs: dict[str, Any]) -> tuple[torch.Tensor, None]:
        return self(ranker, inputs), None

    def __call__(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        device = inputs["q_input_ids"].device
        if self.teacher.device != device:
            self.teacher.to(device)
        if "group_size" not in inputs:
            return self._query_only(model, inputs)
        return self._groups(model, inputs)

    def _finish(self, parts: dict[str, torch.Tensor], model=None, inputs: dict[str, Any] | None = None) -> torch.Tensor:
        if inputs is not None and "g_input_ids" in inputs:
            parts["generated_query_embedding"] = self._generated_queries(model, inputs)
        self.last_parts = {k: float(v.detach()) for k, v in parts.items()}
        return torch.stack(list(parts.values())).sum()

    def _query_only(self, model, inputs) -> torch.Tensor:
        student = model.encode_tokens(inputs["q_input_ids"], inputs["q_attention_mask"], "query").vectors
        teacher = self.teacher.queries(inputs["t_q_input_ids"], inputs["t_q_attention_mask"])
        return self._finish({"query_embedding": self.config.query_embedding_weight
                             * self.embedding_loss(student, teacher)}, model, inputs)

    def _generated_queries(self, model, inputs) -> torch.Tensor:
        """generated_queries.weight × Eq. 7 on the batch's generated queries Q' (see the module docstring)."""
        student = model.encode_tokens(inputs["g_input_ids"], inputs["g_attention_mask"], "query").vectors
        if "t_gp_input_ids" in inputs:  # a cross-encoder teacher: the proxy query embedding of each (q', d) pair
            teacher, _ = self.teacher.pairs(inputs["t_gp_input_ids"], inputs["t_gp_attention_mask"],
                                            inputs["t_gp_token_type_ids"])
            student = student[inputs["g_pair_index"]]
        else:
            teacher = self.teacher.queries(inputs["t_g_input_ids"], inputs["t_g_attention_mask"])
        return self.config.generated_queries.weight * self.embedding_loss(student, teacher)

    def _groups(self, model, inputs) -> torch.Tensor:
        cfg = self.config
        group = int(inputs["group_size"])
        q_index, d_index = inputs["q_index"], inputs["d_index"]
        s_q = model.encode_tokens(inputs["q_input_ids"], inputs["q_attention_mask"], "query").vectors
        s_d = model.encode_tokens(inputs["d_input_ids"], inputs["d_attention_mask"], "document").vectors
        student_rows = in_batch_rows(s_q, s_d, q_index, d_index, group, model.score_scale)
        parts: dict[str, torch.Tensor] = {}
        if cfg.one_hot_weight:
            parts["one_hot"] = cfg.one_hot_weight * self.one_hot_loss(student_rows)
        if "t_p_input_ids" in inputs:  # a dual-pooled cross-encoder teacher: proxies per (query, document) pair
            return self._cross_teacher(model, inputs, s_q[q_index], s_d[d_index], group, parts)
        needs_teacher_documents = cfg.score_weight or cfg.document_embedding_weight
        t_q = self.teacher.queries(inputs["t_q_input_ids"], inputs["t_q_attention_mask"]) if (
            cfg.score_weight or cfg.query_embedding_weight) else None
        t_d = (self.teacher.documents(inputs["t_d_input_ids"], inputs["t_d_attention_mask"]) if needs_teacher_documents
               else None)
        if cfg.score_weight:
            teacher_rows = in_batch_rows(t_q, t_d, q_index, d_index, group, self.teacher.score_scale)
            parts["score"] = cfg.score_weight * self.score_loss(student_rows, teacher_rows)
        return self._finish(self._embedding_matching(parts, s_q, t_q, s_d, t_d), model, inputs)

    def _cross_teacher(self, model, inputs, pair_q, pair_d, group: int, parts: dict) -> torch.Tensor:
        """CE → DE (004 §4.2): the student's and the teacher's scores of each item's own documents (Eq. 11-13 over
        the group), and Eq. 7 / Eq. 8 against the pair's proxy query / document embeddings."""
        cfg = self.config
        t_q, t_d = self.teacher.pairs(inputs["t_p_input_ids"], inputs["t_p_attention_mask"], inputs["t_p_token_type_ids"])
        if cfg.score_weight:
            student = model.score_scale * (pair_q * pair_d).sum(-1).view(-1, group)
            teacher = self.teacher.score_scale * (t_q * t_d).sum(-1).view(-1, group)
            parts["score"] = cfg.score_weight * self.score_loss(student, teacher)
        return self._finish(self._embedding_matching(parts, pair_q, t_q, pair_d, t_d), model, inputs)

    def _embedding_matching(self, parts: dict, s_q, t_q, s_d, t_d) -> dict:
        """Eq. 7 (query) and Eq. 8 (document) embedding matching, each where its weight is non-zero."""
        cfg = self.config
        if cfg.query_embedding_weight:
            parts["query_embedding"] = cfg.query_embedding_weight * self.embedding_loss(s_q, t_q)
        if cfg.document_embedding_weight:
            parts["document_embedding"] = cfg.document_embedding_weight * self.embedding_loss(s_d, t_d)
        return parts


__all__ = ["DistillationCollator", "DistillationObjective", "QueryTexts"]
