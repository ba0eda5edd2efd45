"""Gated segments: a cross-encoder that starts as its checkpoint used as a dense model (``model.head: gated_segments``).

The pair is laid out as two single-text inputs one after the other, ``[CLS] q [SEP] [CLS] d [SEP]``, each with its own
positions (0, 1, … restart at the document's [CLS]) and token type 0, as a bi-encoder encodes each text alone. Every
self-attention layer l weights a key of the *other* segment by a gate w_{l,h} = max(g_{l,h}, 0) per head h:

    a_ij = w_ij exp(s_ij) / sum_k w_ik exp(s_ik),   w_ij = 1 within i's segment, w_{l,h} across,

so w = 1 is a cross-encoder's full attention and w = 0 keeps each segment to itself. The gates start at 0: every
token then sees only its own text, the two segments' last-layer states are exactly the dense model's states of the
query and of the document, and the score, ``score_scale`` × the cosine of the two segments' mean states (special
tokens included, as sentence-transformers' mean pooling), is the checkpoint's own dense score. Training moves the
gates (their gradient at 0 is the change cross-segment attention would bring) and opens them where attending to the
other text helps.

The gating runs as a transformers attention function (``AttentionInterface``, registered under ``ATTENTION``) that
reads the pair's segment ids and the gates from the forward's keyword arguments; without them it is plain eager
attention. It needs an encoder whose layers call that interface with absolute position embeddings (BERT-style).
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

ATTENTION = "ssft_gated_segments"  # the attention implementation's registered name
PADDING_SEGMENT = 2  # the segment id of padding tokens
GATED_MODEL_TYPES = ("bert",)  # encoders whose layers call transformers' attention interface with absolute positions


def gated_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                    segments: torch.Tensor | None = None, gates: torch.Tensor | None = None,
                    **kwargs) -> tuple[torch.Tensor, None]:
    """Softmax attention whose cross-segment weights are multiplied by the layer's gates (module docstring).
    ``segments``: (batch, tokens) segment ids; ``gates``: (layers, heads) raw gates g (w = max(g, 0))."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    # float32 scores: the weights are renormalised by hand, a bf16 sum would lose the small cross-segment terms
    scores = torch.matmul(query, key.transpose(2, 3)).float() * scaling
    if attention_mask is not None:
        scores = scores + attention_mask.float()
    weights = torch.exp(scores - scores.amax(-1, keepdim=True).detach())
    if segments is not None and gates is not None:
        # padding rows attend as in a plain forward (nothing of theirs reaches a real token), so no row sums to 0
        same = (segments.unsqueeze(2) == segments.unsqueeze(1)) | (segments == PADDING_SEGMENT).unsqueeze(2)
        gate = gates[module.layer_idx].float().clamp(min=0.0).view(1, -1, 1, 1)
        same = same.unsqueeze(1).float()
        weights = weights * (same + gate * (1.0 - same))
    weights = weights / weights.sum(-1, keepdim=True)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights.to(value.dtype), value)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, gated_attention)
AttentionMaskInterface.register(ATTENTION, eager_mask)  # an additive float mask, as eager attention takes


def segment_layout(input_ids: torch.Tensor, attention_mask: torch.Tensor, cls_id: int,
                   token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(segment ids, position ids) of ``[CLS] q [SEP] [CLS] d [SEP]`` rows: 0 for the query's tokens and 1 for the
    document's (``PADDING_SEGMENT`` for padding), and positions that restart where the document starts. The segments
    are ``token_type_ids`` where given (``TokenCache.two_segments``), else read off the second [CLS] of each row."""
    attended = attention_mask.bool()
    if token_type_ids is None:
        starts = (input_ids == cls_id) & attended
        segments = (starts.long().cumsum(1) - 1).clamp(min=0, max=1)
    else:
        segments = token_type_ids.long().clamp(min=0, max=1)
        before = torch.cat([torch.full_like(segments[:, :1], -1), segments[:, :-1]], dim=1)
        starts = (segments != before) & attended
    index = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    start_of_segment = torch.where(starts, index, torch.zeros_like(index)).cummax(1).values
    positions = torch.where(attended, index - start_of_segment, torch.zeros_like(index))
    segments = torch.where(attended, segments, torch.full_like(segments, PADDING_SEGMENT))
    return segments, positions


def segment_means(hidden: torch.Tensor, segments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean last-layer state of each pair's query segment and of its document segment (special tokens included)."""

    def mean(segment: int) -> torch.Tensor:
        weights = (segments == segment).to(hidden.dtype).unsqueeze(-1)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)

    return mean(0), mean(1)


__all__ = ["ATTENTION", "GATED_MODEL_TYPES", "gated_attention", "segment_layout", "segment_means"]
