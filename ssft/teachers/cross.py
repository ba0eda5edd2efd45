"""A dual-pooled cross-encoder teacher for CE → DE distillation (004 §4.2, App. B).

A cross-encoder reads ``[CLS] query [SEP] document [SEP]`` jointly; dual pooling takes two vectors from its
last-layer states as *proxy* query and document embeddings, and its score is their inner product:

- ``cls_sep`` (App. B Eq. 14): the [CLS] state is the query proxy, the state of the [SEP] that closes the query
  segment the document proxy;
- ``segment_mean`` (Eq. 15): a weighted mean over each segment's own tokens (special tokens left out), every
  token weighted 1/sqrt(segment length) as the paper's weighting scheme says.

By default the proxies are L2-normalised, as the dense student's vectors are, and the teacher's score is
``score_scale`` (20) × their cosine; ``normalize=False`` (``distillation.teacher_normalize: false``) keeps them raw
and scores by their inner product, score scale 1 — 004 App. B's s^t(q, d) = <emb_q, emb_d>. The teacher is any
transformers encoder (hub id / folder) or the backbone of a saved ssft cross-encoder; 004 first converts a
[CLS]-pooled cross-encoder into a dual-pooled one (score distillation plus a token reconstruction loss, §4.2) — that
conversion is not part of ssft: a cross-encoder that was not trained with dual pooling gives proxies without the
meaning the paper relies on.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ssft.config.choices import DUAL_POOLINGS
from ssft.core import precision as precisions
from ssft.core.errors import SsftError
from ssft.models.base import load_ranker, load_transformer, saved_model_folder


def dual_pool(hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor,
              special_ids: set[int], sep_id: int, pooling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(query proxies, document proxies), each (pairs, hidden), unnormalised (see the module docstring)."""
    if pooling == "cls_sep":
        is_sep = (input_ids == sep_id) & attention_mask.bool()
        if not bool(is_sep.any(1).all()):
            raise ValueError("cls_sep pooling: a pair without a [SEP] token")
        first_sep = is_sep.float().argmax(dim=1)
        return hidden[:, 0], hidden[torch.arange(hidden.shape[0], device=hidden.device), first_sep]
    if pooling != "segment_mean":
        raise SsftError(f"distillation.teacher_pooling: a cross-encoder teacher pools {' or '.join(DUAL_POOLINGS)}, "
                        f"got '{pooling}'")
    ordinary = attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(sorted(special_ids), device=input_ids.device))

    def weighted_mean(segment: torch.Tensor) -> torch.Tensor:
        weights = segment.float()
        n = weights.sum(1, keepdim=True).clamp(min=1.0)
        return (hidden * (weights / n.sqrt()).unsqueeze(-1)).sum(1)

    return weighted_mean(ordinary & (token_type_ids == 0)), weighted_mean(ordinary & (token_type_ids == 1))


class DualPooledCrossEncoderTeacher:
    """Frozen cross-encoder teacher: eval mode, no gradient, pairs of the current batch. Not an ``nn.Module``."""

    def __init__(self, transformer, tokenizer, pooling: str, reference: dict[str, Any], max_length: int = 256,
                 score_scale: float | None = None, normalize: bool = True):
        if pooling not in DUAL_POOLINGS:
            raise SsftError(f"distillation.teacher_pooling: a cross-encoder teacher pools {' or '.join(DUAL_POOLINGS)}, "
                            f"got '{pooling}'")
        transformer.requires_grad_(False)
        transformer.eval()
        self.model = transformer
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.reference = dict(reference)
        self.max_length = int(max_length)
        self.normalize = bool(normalize)
        self.score_scale = float(score_scale if score_scale is not None else (20.0 if self.normalize else 1.0))
        self.special_ids = set(tokenizer.all_special_ids)
        self.sep_id = tokenizer.sep_token_id
        self.precision = "fp32"  # ssft.core.precision; set_precision

    @property
    def embedding_dim(self) -> int:
        return self.model.config.hidden_size

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def set_precision(self, precision: str) -> "DualPooledCrossEncoderTeacher":
        """Compute in ``precision`` from now on (``ssft.core.precision``; int8: a quantised copy of the encoder)."""
        self.precision = precisions.resolve(precision, self.device, "eval.precision")
        if self.precision == "int8":
            self.model = precisions.quantize_int8(self.model)
        return self

    def to(self, device) -> "DualPooledCrossEncoderTeacher":
        self.model.to(device)
        return self

    def tokenize(self, queries: list[str], documents: list[str] | None = None) -> dict[str, torch.Tensor]:
        """Every (query, document) pair of the batch, in the student's pair order (``t_p_*`` keys)."""
        if documents is None:
            raise SsftError("distillation.query_only: a cross-encoder teacher needs (query, document) pairs")
        out = self.tokenizer(queries, documents, padding=True, truncation="only_second", max_length=self.max_length,
                             return_tensors="pt", return_token_type_ids=True)
        return {"t_p_input_ids": out["input_ids"], "t_p_attention_mask": out["attention_mask"],
                "t_p_token_type_ids": out["token_type_ids"]}

    def pairs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              token_type_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Proxy query and document embeddings of the pairs, L2-normalised unless ``normalize`` is off (eval mode, no
        gradient)."""
        self.model.eval()
        device = input_ids.device
        ids, mask, types = (t.to(self.device) for t in (input_ids, attention_mask, token_type_ids))
        with torch.no_grad():
            with precisions.autocast(self.precision, self.device):
                hidden = self.model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
            hidden = hidden.float()
            q, d = dual_pool(hidden, ids, mask, types, self.special_ids, self.sep_id, self.pooling)
        if self.normalize:
            q, d = F.normalize(q, dim=-1), F.normalize(d, dim=-1)
        return q.to(device), d.to(device)


def load_cross_teacher(name: str, pooling: str, max_length: int, trust_remote_code: bool = False,
                       normalize: bool = True) -> DualPooledCrossEncoderTeacher:
    """A transformers encoder by hub id / folder, or the backbone of a saved ssft cross-encoder folder.
    ``trust_remote_code``: the user's choice (the recipe's model.trust_remote_code), never a saved folder's."""
    folder = saved_model_folder(name)
    reference = {"name": str(folder.resolve()) if folder else name, "pooling": pooling, "kind": "cross_dual_pooled",
                 "normalize": bool(normalize)}
    if folder is not None:
        ranker = load_ranker(folder, trust_remote_code=trust_remote_code)
        if ranker.architecture != "cross":
            raise SsftError(f"distillation.teacher: {name} is a '{ranker.architecture}' model, teacher_kind cross_dual_pooled "
                            f"takes a cross-encoder")
        return DualPooledCrossEncoderTeacher(ranker.backbone.base_model, ranker.tokenizer, pooling, reference, max_length,
                                             normalize=normalize)
    transformer, tokenizer = load_transformer(name, trust_remote_code)
    return DualPooledCrossEncoderTeacher(transformer, tokenizer, pooling, reference, max_length, normalize=normalize)


__all__ = ["DUAL_POOLINGS", "DualPooledCrossEncoderTeacher", "dual_pool", "load_cross_teacher"]
