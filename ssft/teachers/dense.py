"""Teachers for distillation: frozen, in eval mode, computed without gradient on the batch they are given.

``DenseTeacher`` wraps a dense dual encoder: a saved ssft dense model (a run folder or its ``model/``), or a
transformers model by hub id / folder used as a sentence embedder (``pooling``, L2-normalised, no projection
— how sentence-transformers models such as all-MiniLM-L6-v2 embed). Its document embeddings may be filled
from its corpus index once (``keep_corpus``, the on-disk embedding cache), so an asymmetric student trains
its query encoder only; query embeddings are always computed on the current batch.

A teacher is named by a *reference* ``{"name", "pooling", "max_length", "query_max_length"}`` that an
asymmetric student keeps in its spec (``document_encoder``) to rebuild the teacher when it is loaded.
"""
from __future__ import annotations

from typing import Any

import torch

from ssft.core.errors import SsftError
from ssft.models.base import saved_model_folder
from ssft.models.dense import DenseDualEncoder, row_keys


def teacher_reference(name: str, pooling: str = "mean", max_length: int = 256, query_max_length: int = 32) -> dict[str, Any]:
    """What ``load_teacher`` takes; a saved-model folder is recorded by its absolute path."""
    folder = saved_model_folder(name)
    return {"name": str(folder.resolve()) if folder is not None else name, "pooling": pooling,
            "max_length": int(max_length), "query_max_length": int(query_max_length)}


def load_teacher(reference: dict[str, Any], trust_remote_code: bool = False) -> "DenseTeacher":
    """The frozen dense teacher a reference names (see the module docstring). ``trust_remote_code``: the user's
    choice (the recipe's model.trust_remote_code, a CLI's --trust-remote-code), never a saved folder's."""
    from ssft.models.base import load_ranker
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS

    name = reference.get("name") if isinstance(reference, dict) else None
    if not isinstance(name, str) or not name:
        raise SsftError(f"distillation teacher: expected a reference with a 'name', got {reference!r}")
    folder = saved_model_folder(name)
    if folder is not None:
        model = load_ranker(folder, trust_remote_code=trust_remote_code)
        if not isinstance(model, DenseDualEncoder):
            raise SsftError(f"distillation.teacher: {name} is a '{model.architecture}' model; a dense teacher must be "
                            f"architecture 'dense' (a cross-encoder teacher is teacher_kind: cross_dual_pooled)")
    else:
        cfg = ModelConfig(architecture="dense", name=name, pooling=reference.get("pooling", "mean"),
                          max_length=int(reference.get("max_length", 256)),
                          query_max_length=int(reference.get("query_max_length", 32)), trust_remote_code=trust_remote_code)
        model = MODELS.get("dense").build(cfg, "full", {})
    return DenseTeacher(model, reference)


class DenseTeacher:
    """A frozen dense model as teacher. Not an ``nn.Module`` on purpose: it is never a parameter of the student,
    never saved with it, never put in train mode by the Trainer."""

    def __init__(self, model: DenseDualEncoder, reference: dict[str, Any]):
        model.requires_grad_(False)
        model.eval()
        self.model = model
        self.reference = dict(reference)
        self._documents: dict[bytes, torch.Tensor] = {}  # final document embeddings by token ids

    @property
    def score_scale(self) -> float:
        return self.model.score_scale

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device) -> "DenseTeacher":
        self.model.to(device)
        self._documents = {k: v.to(device) for k, v in self._documents.items()}
        return self

    def tokenize(self, queries: list[str], documents: list[str] | None = None) -> dict[str, torch.Tensor]:
        """The teacher's own tokens of the batch's distinct queries (and documents), keys prefixed ``t_``; rows in
        the order of the student's (both take distinct texts in first-seen order)."""
        from ssft.models.bi import unique_with_index

        out = {}
        q = self.model.tokenize_queries(unique_with_index(queries)[0])
        out["t_q_input_ids"], out["t_q_attention_mask"] = q["input_ids"], q["attention_mask"]
        if documents is not None:
            d = self.model.tokenize_documents(unique_with_index(documents)[0])
            out["t_d_input_ids"], out["t_d_attention_mask"] = d["input_ids"], d["attention_mask"]
        return out

    def queries(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Teacher query embeddings of this batch (eval mode, no gradient)."""
        self.model.eval()
        with torch.no_grad():
            return self.model.encode(input_ids.to(self.device), attention_mask.to(self.device), "query").vectors.to(input_ids.device)

    def documents(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Teacher document embeddings of these rows; each distinct document is encoded once and kept."""
        keys = row_keys(input_ids, attention_mask)
        missing = list(dict.fromkeys(k for k in keys if k not in self._documents))
        if missing:
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            rows = torch.tensor([first[k] for k in missing], device=input_ids.device)
            self.model.eval()
            with torch.no_grad():
                vectors = self.model.encode(input_ids[rows].to(self.device), attention_mask[rows].to(self.device), "document").vectors
            for k, v in zip(missing, vectors):
                self._documents[k] = v.detach()
        return torch.stack([self._documents[k] for k in keys]).to(input_ids.device)

    def keep_corpus(self, dataset, batch_size: int = 64) -> int:
        """Keep the document embeddings of the whole corpus, from the teacher's corpus index (read from the
        on-disk embedding cache when this teacher encoded this corpus before). Returns the number kept."""
        from ssft.eval.retrieve import corpus_vectors

        ids, vectors = corpus_vectors(self.model, dataset, batch_size)
        vectors = torch.from_numpy(vectors).to(self.device)
        texts = [dataset.corpus[d].full_text for d in ids]
        for start in range(0, len(texts), 256):
            tokens = self.model.tokenize_documents(texts[start : start + 256])
            for k, v in zip(row_keys(tokens["input_ids"], tokens["attention_mask"]), vectors[start : start + 256]):
                self._documents[k] = v
        return len(ids)


__all__ = ["DenseTeacher", "load_teacher", "teacher_reference"]
