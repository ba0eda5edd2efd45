from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def reconstruction_positions(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: set[int]) -> torch.Tensor:
    """(batch, tokens) bool: the positions the loss predicts — attended, and not a special token ([CLS], [SEP],
    [PAD], [MASK] ...)."""
    special = torch.tensor(sorted(special_ids), device=input_ids.device, dtype=input_ids.dtype)
    return attention_mask.bool() & ~torch.isin(input_ids, special)


class TokenReconstructionLoss(nn.Module):
    r"""The token reconstruction loss 004 trains its dual-pooled cross-encoder with (§4.2: "the likelihood of
    predicting each token of the original input from the final token embeddings", which "prevents the degeneration
    of the token embeddings during training"): over the set T of the pairs' ordinary tokens (attended, not special),

    .. math:: R_{rec} = -\frac{1}{|T|} \sum_{i \in T} \log \mathrm{softmax}\big(\mathrm{head}(h_i)\big)_{x_i}

    with :math:`h_i` the last-layer state of token i, :math:`x_i` its input id and ``head`` the ranker's
    token-reconstruction head (``ssft.models.token_reconstruction``: BERT's MLM head layout, decoder tied to the input
    embeddings). The input is not masked: each token is predicted from its own final state. The training loss is
    ranking (or score-distillation) loss + ``loss.reconstruction_weight`` × R_rec (``ssft.training.objectives``).

    Inputs:
        hidden: (batch, tokens, hidden) last-layer states (carry the gradient); input_ids, attention_mask: (batch,
        tokens); head: (n, hidden) → (n, vocabulary) logits; special_ids: the tokenizer's special token ids.
    Returns:
        scalar loss (0 when the batch has no ordinary token). Logits are computed for the ordinary tokens only.
    """

    def forward(self, hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                head: Callable[[torch.Tensor], torch.Tensor], special_ids: set[int]) -> torch.Tensor:
        positions = reconstruction_positions(input_ids, attention_mask, special_ids)
        if not bool(positions.any()):
            return hidden.sum() * 0.0
        logits = head(hidden[positions])
        return F.cross_entropy(logits.float(), input_ids[positions])


__all__ = ["TokenReconstructionLoss", "reconstruction_positions"]
