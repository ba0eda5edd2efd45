"""The last encoder layer computed for the first token only, in a serving graph that returns nothing else.

A ranker that reads only the first token's final state (a cross-encoder's [CLS] head, ``Ranker.serves_first_token_only``)
needs from the last layer the keys and values of every token but the query, the attention output, its layer norm and
the feed-forward block of one row. The full layer computes all four for every token: for a 6-layer MiniLM that is
about a seventh of the model's matmul work spent on rows nobody reads. ``first_token_last_layer`` swaps the last
layer of a (copied) BERT-style encoder for ``FirstTokenLayer``, which computes the same [CLS] state from the same
weights: the graph's output shrinks to (batch, 1, hidden), equal to the full layer's first row up to float rounding.

Only encoders whose layers have BERT's structure (``attention.self`` with ``query`` / ``key`` / ``value``,
``attention.output`` and ``feed_forward_chunk``: BERT, MiniLM, RoBERTa, ELECTRA...) are changed; any other keeps
its full last layer (``first_token_last_layer`` returns False).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def _bert_like(layer: nn.Module) -> bool:
    attention = getattr(layer, "attention", None)
    attn = getattr(attention, "self", None)
    return (all(isinstance(getattr(attn, name, None), nn.Linear) for name in ("query", "key", "value"))
            and isinstance(getattr(attn, "attention_head_size", None), int)
            and getattr(attention, "output", None) is not None and callable(getattr(layer, "feed_forward_chunk", None))
            and not getattr(layer, "is_decoder", False))


class FirstTokenLayer(nn.Module):
    """``layer`` (a BERT-style encoder layer) with the query, attention output and feed-forward block of the first
    token only; keys and values of every token. Returns (batch, 1, hidden)."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, *args, **kwargs):
        attn = self.layer.attention.self
        batch, length, _ = hidden_states.shape
        size = attn.attention_head_size
        first = hidden_states[:, :1]
        query = attn.query(first).view(batch, 1, -1, size).transpose(1, 2)
        key = attn.key(hidden_states).view(batch, length, -1, size).transpose(1, 2)
        value = attn.value(hidden_states).view(batch, length, -1, size).transpose(1, 2)
        mask = attention_mask
        if mask is not None and mask.dim() == 4:  # (batch, heads, queries or 1, keys): the first query's row
            mask = mask[:, :, :1, :]
        context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=size ** -0.5)
        context = context.transpose(1, 2).reshape(batch, 1, -1)
        attention_output = self.layer.attention.output(context, first)
        return self.layer.feed_forward_chunk(attention_output)


def first_token_last_layer(model: nn.Module) -> bool:
    """Swap the last layer of ``model``'s encoder (a copy that only serves) for ``FirstTokenLayer``, in place;
    False (nothing changed) where the encoder is not BERT-style."""
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers) or not _bert_like(layers[-1]):
        return False
    layers[-1] = FirstTokenLayer(layers[-1])
    return True
