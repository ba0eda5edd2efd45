"""A frozen dense model that encodes documents for another one: the document side of an asymmetric student
(002, 004 §4.1), and the base of the dense distillation teacher (``ssft.teachers.dense.DenseTeacher``).

``FrozenDense`` wraps a dense dual encoder in eval mode without gradient: a saved ssft dense model (a run folder or
its ``model/``), or a transformers model by hub id / folder used as a sentence embedder (``pooling``, no projection;
L2-normalised unless the reference says ``normalize: false``, a dot-product model such as 002's teacher). Its final
document embeddings are kept by token ids (each distinct document encoded once), and may be filled once from its
corpus index (``keep_corpus``, read from the on-disk embedding cache when it encoded this corpus before).

It is named by a *reference* ``{"name", "pooling", "max_length", "query_max_length", "normalize"}``
(``dense_reference``) that a student keeps in its spec (``document_encoder``), so that loading the student rebuilds it
(``load_frozen_dense``). It lives with the models, below the teachers, because loading a model rebuilds it.
"""
from __future__ import annotations

from typing import Any

import torch

from ssft.config.model import ModelConfig
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.core.precision import set_precision as set_model_precision
from ssft.models.base import load_ranker, saved_model_folder
from ssft.models.bi import row_keys
from ssft.models.corpus import corpus_vectors
from ssft.models.cross_documents import CROSS_KIND, load_cross_documents


def dense_reference(name: str, pooling: str = "mean", max_length: int = 256, query_max_length: int = 32,
                    normalize: bool = True) -> dict[str, Any]:
    """What ``load_frozen_dense`` takes; a saved-model folder is recorded by its absolute path. ``normalize`` applies
    to a model by name (a saved ssft model carries its own): L2-normalised, 20 × cosine (true), or the raw dot
    product with score scale 1 (false)."""
    folder = saved_model_folder(name)
    return {"name": str(folder.resolve()) if folder is not None else name, "pooling": pooling,
            "max_length": int(max_length), "query_max_length": int(query_max_length), "normalize": bool(normalize)}


def load_dense_model(reference: dict[str, Any], trust_remote_code: bool = False):
    """The dense ranker a reference names (or, for a cross-encoder teacher's reference, its empty-query document
    encoder, ``ssft.models.cross_documents``), frozen by the caller. ``trust_remote_code``: the user's choice (the
    recipe's model.trust_remote_code, a CLI's --trust-remote-code), never a saved folder's."""
    name = reference.get("name") if isinstance(reference, dict) else None
    if not isinstance(name, str) or not name:
        raise SsftError(f"distillation teacher: expected a reference with a 'name', got {reference!r}")
    if reference.get("kind") == CROSS_KIND:  # a dual-pooled cross-encoder's empty-query document proxies (004 §5.3)
        return load_cross_documents(reference, trust_remote_code)
    folder = saved_model_folder(name)
    if folder is not None:
        model = load_ranker(folder, trust_remote_code=trust_remote_code)
        if getattr(model, "architecture", None) != "dense":
            raise SsftError(f"distillation.teacher: {name} is a '{model.architecture}' model; a dense teacher must be "
                            f"architecture 'dense' (a cross-encoder teacher is teacher_kind: cross_dual_pooled)")
        return model
    normalize = bool(reference.get("normalize", True))  # references saved before the key existed: normalised
    dense = MODELS.get("dense")
    options = {"pooling": reference.get("pooling", "mean"), "normalize": normalize,
               "score_scale": dense.Config.score_scale if normalize else 1.0}
    cfg = ModelConfig(architecture="dense", name=name, max_length=int(reference.get("max_length", 256)),
                      query_max_length=int(reference.get("query_max_length", 32)), trust_remote_code=trust_remote_code,
                      options=options)
    return dense.build(cfg, "full", {})


class FrozenDense:
    """A frozen dense model (see the module docstring). Not an ``nn.Module`` on purpose: it is never a parameter of
    the model it serves, never saved with it, never put in train mode by the Trainer."""

    frozen_document_encoder = True  # what DenseDualEncoder.inherit_documents checks

    def __init__(self, model, reference: dict[str, Any]):
        model.requires_grad_(False)
        model.eval()
        self.model = model
        self.reference = dict(reference)
        self._documents: dict[bytes, torch.Tensor] = {}  # final document embeddings by token ids

    @property
    def score_scale(self) -> float:
        return self.model.score_scale

    @property
    def embedding_dim(self) -> int:
        return self.model.embedding_dim

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def set_precision(self, precision: str) -> FrozenDense:
        """Compute in ``precision`` from now on (``ssft.core.precision``; int8: a quantised copy); what it kept is
        dropped."""
        self.model = set_model_precision(self.model, precision)
        self._documents.clear()
        return self

    def to(self, device) -> FrozenDense:
        self.model.to(device)
        self._documents = {k: v.to(device) for k, v in self._documents.items()}
        return self

    def documents(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Document embeddings of these rows; each distinct document is encoded once and kept."""
        keys = row_keys(input_ids, attention_mask)
        missing = list(dict.fromkeys(k for k in keys if k not in self._documents))
        if missing:
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            rows = torch.tensor([first[k] for k in missing], device=input_ids.device)
            self.model.eval()
            with torch.no_grad():
                vectors = self.model.encode_tokens(input_ids[rows].to(self.device), attention_mask[rows].to(self.device),
                                            "document").vectors
            for k, v in zip(missing, vectors):
                self._documents[k] = v.detach()
        return torch.stack([self._documents[k] for k in keys]).to(input_ids.device)

    def keep_corpus(self, dataset, batch_size: int = 64) -> int:
        """Keep the document embeddings of the whole corpus, from the model's corpus index (read from the on-disk
        embedding cache when this model encoded this corpus before). Returns the number kept."""
        ids, vectors = corpus_vectors(self.model, dataset, batch_size)
        vectors = torch.from_numpy(vectors).to(self.device)
        texts = [dataset.corpus[d].full_text for d in ids]
        for start in range(0, len(texts), 256):
            tokens = self.model.tokenize_documents(texts[start : start + 256])
            for k, v in zip(row_keys(tokens["input_ids"], tokens["attention_mask"]), vectors[start : start + 256]):
                self._documents[k] = v
        return len(ids)


def load_frozen_dense(reference: dict[str, Any], trust_remote_code: bool = False) -> FrozenDense:
    """The frozen dense model a reference names (see ``load_dense_model``)."""
    return FrozenDense(load_dense_model(reference, trust_remote_code), reference)


__all__ = ["FrozenDense", "dense_reference", "load_dense_model", "load_frozen_dense"]
