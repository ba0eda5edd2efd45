"""Teachers for distillation: frozen, in eval mode, computed without gradient on the batch they are given.

``DenseTeacher`` wraps a dense dual encoder: a saved ssft dense model (a run folder or its ``model/``), or a
transformers model by hub id / folder used as a sentence embedder (``pooling``, no projection; L2-normalised
— how sentence-transformers' cosine models such as all-MiniLM-L6-v2 embed — unless the reference says
``normalize: false``: the raw dot product of 002's / 004's dot-product teachers). Its document embeddings may be filled
from its corpus index once (``keep_corpus``, the on-disk embedding cache), so an asymmetric student trains
its query encoder only; query embeddings are always computed on the current batch.

A teacher is named by a *reference* ``{"name", "pooling", "max_length", "query_max_length"}`` that an
asymmetric student keeps in its spec (``document_encoder``) to rebuild the teacher's document side when it is
loaded (``ssft.models.frozen``, which this teacher extends with what distillation asks of it: its own tokens of a
batch and its query embeddings).
"""
from __future__ import annotations

from typing import Any

import torch

from ssft.models.bi import unique_with_index
from ssft.models.frozen import FrozenDense, dense_reference, load_dense_model


def teacher_reference(name: str, pooling: str = "mean", max_length: int = 256, query_max_length: int = 32,
                      normalize: bool = True) -> dict[str, Any]:
    """What ``load_teacher`` takes; a saved-model folder is recorded by its absolute path. ``normalize`` (a teacher
    by name): 20 × cosine (true, as sentence-transformers' cosine models embed) or the raw dot product (false: the
    dot-product teachers 002 and 004 distil from, e.g. 002's msmarco-bert-base-dot-v5; 004 Eq. 1)."""
    return dense_reference(name, pooling, max_length, query_max_length, normalize)


def load_teacher(reference: dict[str, Any], trust_remote_code: bool = False) -> DenseTeacher:
    """The frozen dense teacher a reference names (see the module docstring). ``trust_remote_code``: the user's
    choice (the recipe's model.trust_remote_code, a CLI's --trust-remote-code), never a saved folder's."""
    return DenseTeacher(load_dense_model(reference, trust_remote_code), reference)


class DenseTeacher(FrozenDense):
    """A frozen dense model as teacher. Not an ``nn.Module`` on purpose: it is never a parameter of the student,
    never saved with it, never put in train mode by the Trainer. Its documents (``documents``, ``keep_corpus``) are
    ``FrozenDense``'s."""

    def tokenize(self, queries: list[str], documents: list[str] | None = None) -> dict[str, torch.Tensor]:
        """The teacher's own tokens of the batch's distinct queries (and documents), keys prefixed ``t_``; rows in
        the order of the student's (both take distinct texts in first-seen order)."""
        out = {}
        q = self.model.tokenize_queries(unique_with_index(queries)[0])
        out["t_q_input_ids"], out["t_q_attention_mask"] = q["input_ids"], q["attention_mask"]
        if documents is not None:
            d = self.model.tokenize_documents(unique_with_index(documents)[0])
            out["t_d_input_ids"], out["t_d_attention_mask"] = d["input_ids"], d["attention_mask"]
        return out

    def inheritable_documents(self) -> DenseTeacher:
        """What an asymmetric student inherits (``DenseDualEncoder.inherit_documents``): this teacher's document side."""
        return self

    def queries(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Teacher query embeddings of this batch (eval mode, no gradient)."""
        self.model.eval()
        with torch.no_grad():
            vectors = self.model.encode_tokens(input_ids.to(self.device), attention_mask.to(self.device), "query").vectors
        return vectors.to(input_ids.device)


__all__ = ["DenseTeacher", "load_teacher", "teacher_reference"]
