"""Dual pooling (004 §4.2, App. B): two vectors from a cross-encoder's last-layer token states, the *proxy* query and
document embeddings of the pair ``[CLS] query [SEP] document [SEP]``; their inner product is the pair's score,
004's s^t(q, d) = <emb_q(q,d), emb_d(q,d)>.

- ``cls_sep`` (App. B Eq. 14): the [CLS] state is the query proxy, the state of the [SEP] that closes the query
  segment the document proxy;
- ``segment_mean`` (Eq. 15): a weighted mean over each segment's own tokens (special tokens left out), every
  token weighted 1/sqrt(segment length) as the paper's weighting scheme says.

Used by the dual-pooled cross-encoder ranker (``ssft.models.cross``, ``model.head: dual_pooled``), by the frozen
cross-encoder teacher (``ssft.teachers.cross``) and by the empty-query document encoder an asymmetric student
inherits from it (``ssft.models.cross_documents``).
"""
from __future__ import annotations

import torch

from ssft.config.choices import DUAL_POOLINGS
from ssft.core.errors import SsftError


def segment_ids(input_ids: torch.Tensor, attention_mask: torch.Tensor, sep_id: int) -> torch.Tensor:
    """0 up to and including the first [SEP], 1 after it (attended tokens only): BERT's token type ids of a pair,
    for models whose tokenizer gives none (RoBERTa-like ``<s> q </s></s> d </s>``)."""
    is_sep = (input_ids == sep_id) & attention_mask.bool()
    after_first = (is_sep.long().cumsum(1) - is_sep.long()) > 0
    return (after_first & attention_mask.bool()).long()


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
        raise SsftError(f"dual pooling: expected {' or '.join(DUAL_POOLINGS)}, got '{pooling}'")
    ordinary = attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(sorted(special_ids), device=input_ids.device))

    def weighted_mean(segment: torch.Tensor) -> torch.Tensor:
        weights = segment.to(hidden.dtype)
        n = weights.sum(1, keepdim=True).clamp(min=1.0)
        return (hidden * (weights / n.sqrt()).unsqueeze(-1)).sum(1)

    return weighted_mean(ordinary & (token_type_ids == 0)), weighted_mean(ordinary & (token_type_ids == 1))


__all__ = ["DUAL_POOLINGS", "dual_pool", "segment_ids"]
