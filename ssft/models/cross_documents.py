"""The document side of a dual-pooled cross-encoder (004 §5.3): "the inheritance of the document embedding from the
dual-pooled CE teacher model can be done offline as we feed an empty query along with the document (separated by
the [SEP] token)". The document embedding of d is the document proxy (``ssft.models.dual_pooling``: Eq. 14's [SEP]
state or Eq. 15's weighted document-segment mean) of the pair ("", d), i.e. of ``[CLS] [SEP] d [SEP]``; L2-normalised
unless ``normalize`` is false (the inner product of the raw proxies, 004 App. B, ssft's default for a cross teacher).

``CrossDocumentEncoder`` quacks as a frozen dense model's document tower (``tokenize_documents``, ``encode``,
``encode_documents``, ``embedding_dim``), so ``ssft.models.frozen.FrozenDense`` wraps it unchanged: each document is
encoded once, the whole corpus from the on-disk embedding cache when it was encoded before (keyed by this encoder's
weights and settings), and an asymmetric dense student inherits it (``DenseDualEncoder.inherit_documents``), its
spec naming the teacher's reference (``kind: cross_dual_pooled``) so that loading the student rebuilds it.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.config.choices import DUAL_POOLINGS
from ssft.core.errors import SsftError
from ssft.models.base import load_ranker, load_transformer, saved_model_folder
from ssft.models.dual_pooling import dual_pool, segment_ids
from ssft.models.encoded import Encoded

CROSS_KIND = "cross_dual_pooled"  # the reference kind of a cross-encoder teacher (distillation.teacher_kind)


class CrossDocumentEncoder(nn.Module):
    """Empty-query document proxies of a cross-encoder's transformer (see the module docstring)."""

    cache_document_embeddings = True  # a frozen encoder's corpus vectors go to the on-disk embedding cache
    exportable = False  # a student inheriting these documents has no SentenceTransformer form (DenseDualEncoder)

    def __init__(self, transformer: nn.Module, tokenizer, pooling: str, max_length: int, normalize: bool,
                 reference: dict[str, Any]):
        super().__init__()
        if pooling not in DUAL_POOLINGS:
            raise SsftError(f"distillation.teacher_pooling: a cross-encoder pools {' or '.join(DUAL_POOLINGS)}, got '{pooling}'")
        self.backbone = transformer if isinstance(transformer, Backbone) else Backbone(transformer, "full")
        self.tokenizer = self.document_tokenizer = tokenizer
        self.pooling = pooling
        self.max_length = int(max_length)
        self.normalize = bool(normalize)
        self.score_scale = 20.0 if self.normalize else 1.0
        self.spec = dict(reference)  # what decides its vectors, for the embedding cache's fingerprint
        self.special_ids = set(tokenizer.all_special_ids)
        self.sep_id = tokenizer.sep_token_id

    @property
    def embedding_dim(self) -> int:
        return self.backbone.config.hidden_size

    def tokenize_documents(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """``[CLS] [SEP] d [SEP]``: the pair (empty query, document), the document truncated to ``max_length``."""
        out = self.tokenizer([""] * len(texts), list(texts), padding=True, truncation="only_second",
                             max_length=self.max_length, return_tensors="pt")
        return {"input_ids": out["input_ids"], "attention_mask": out["attention_mask"]}

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, tower: str = "document") -> Encoded:
        if tower != "document":
            raise ValueError("a cross-encoder's empty-query proxies encode documents only")
        types = segment_ids(input_ids, attention_mask, self.sep_id)
        # token type ids only for models that have them (BERT's two segments; RoBERTa-like models have one type)
        hidden = self.backbone(input_ids, attention_mask, types if "token_type_ids" in self.tokenizer.model_input_names
                               else None)
        _, documents = dual_pool(hidden, input_ids, attention_mask, types, self.special_ids, self.sep_id, self.pooling)
        return Encoded(F.normalize(documents, dim=-1) if self.normalize else documents)

    def encode_documents(self, texts: list[str]) -> Encoded:
        device = next(self.parameters()).device
        batch = {k: v.to(device) for k, v in self.tokenize_documents(texts).items()}
        return self.encode_tokens(batch["input_ids"], batch["attention_mask"])


def cross_reference(name: str, pooling: str, max_length: int, normalize: bool) -> dict[str, Any]:
    """A cross-encoder teacher's reference (what an asymmetric student's spec keeps as ``document_encoder``); a saved
    ssft model folder is recorded by its absolute path."""
    folder = saved_model_folder(name)
    return {"name": str(folder.resolve()) if folder is not None else name, "pooling": pooling, "kind": CROSS_KIND,
            "max_length": int(max_length), "normalize": bool(normalize)}


def load_cross_transformer(name: str, pooling: str, trust_remote_code: bool = False):
    """(transformer, tokenizer) of a cross-encoder teacher: a transformers encoder by hub id / folder, or the backbone
    of a saved ssft cross-encoder (one trained with ``head: dual_pooled`` must have been trained with ``pooling``)."""
    folder = saved_model_folder(name)
    if folder is None:
        return load_transformer(name, trust_remote_code)
    ranker = load_ranker(folder, trust_remote_code=trust_remote_code)
    if ranker.architecture != "cross":
        raise SsftError(f"distillation.teacher: {name} is a '{ranker.architecture}' model, teacher_kind {CROSS_KIND} "
                        f"takes a cross-encoder")
    trained = getattr(ranker, "dual_pooling", None)
    if trained is not None and trained != pooling:
        raise SsftError(f"distillation.teacher_pooling: {name} was trained with model.dual_pooling {trained}, got "
                        f"'{pooling}' (did you mean teacher_pooling: {trained}?)")
    return ranker.backbone.base_model, ranker.tokenizer


def load_cross_documents(reference: dict[str, Any], trust_remote_code: bool = False) -> CrossDocumentEncoder:
    """The empty-query document encoder a cross-encoder reference names (``cross_reference``), frozen by the caller."""
    transformer, tokenizer = load_cross_transformer(reference["name"], reference.get("pooling", "cls_sep"),
                                                    trust_remote_code)
    return CrossDocumentEncoder(transformer, tokenizer, reference.get("pooling", "cls_sep"),
                                int(reference.get("max_length", 256)), bool(reference.get("normalize", False)), reference)


__all__ = ["CROSS_KIND", "CrossDocumentEncoder", "cross_reference", "load_cross_documents", "load_cross_transformer"]
