"""The token-reconstruction head of a dual-pooled cross-encoder (004 §4.2: "a reconstruction loss during the CE
training, which measures the likelihood of predicting each token of the original input from the final token
embeddings"; the loss itself is ``ssft.losses.token_reconstruction``).

The paper does not say which head predicts the tokens; ssft uses BERT's masked-LM head layout, because it is the
head a pretrained encoder already has for exactly this prediction: a transform g(h) = LayerNorm(act(W h + b)),
then logits = E g(h) + c with E the backbone's *input* word-embedding matrix (tied, as BERT ties its decoder: no
vocabulary-sized matrix of its own, and a LoRA backbone's frozen embeddings stay frozen). A checkpoint that holds
an MLM head (``cls.predictions.*``: BERT's pre-training checkpoints, ``*ForMaskedLM``) gives its transform and bias
(``adopt``); otherwise they start as transformers initialises them (the report lists them as random).
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.activations import get_activation

# the checkpoint names of BERT's MLM head (BertForPreTraining / BertForMaskedLM) -> this module's
MLM_HEAD_KEYS = {"cls.predictions.transform.dense.weight": "transform.weight",
                 "cls.predictions.transform.dense.bias": "transform.bias",
                 "cls.predictions.transform.LayerNorm.weight": "norm.weight",
                 "cls.predictions.transform.LayerNorm.bias": "norm.bias",
                 "cls.predictions.bias": "bias"}


class TokenReconstructionHead(nn.Module):
    """logits = E · LayerNorm(act(W h + b)) + c over the vocabulary, E the backbone's input embeddings (passed at call
    time, never a parameter of this module, so it is saved once, with the backbone)."""

    def __init__(self, config):
        super().__init__()
        hidden = config.hidden_size
        self.transform = nn.Linear(hidden, hidden)
        activation = getattr(config, "hidden_act", "gelu")
        self.activation = get_activation(activation) if isinstance(activation, str) else activation
        self.norm = nn.LayerNorm(hidden, eps=getattr(config, "layer_norm_eps", 1e-12))
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        with torch.no_grad():  # as transformers initialises BERT's MLM transform
            self.transform.weight.normal_(0.0, getattr(config, "initializer_range", 0.02))
            self.transform.bias.zero_()

    def forward(self, states: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
        """(n, hidden) token states, (vocab, hidden) input embeddings → (n, vocab) logits."""
        return self.norm(self.activation(self.transform(states))) @ embeddings.T + self.bias

    def adopt(self, pretrained) -> bool:
        """Take a checkpoint's MLM head (``Pretrained.take``; its decoder is the tied input embeddings, taken too so
        that it is not reported unused); True when it had the whole head, in this model's sizes."""
        own = dict(self.named_parameters())
        found = {key: pretrained.extra.get(key) for key in MLM_HEAD_KEYS}
        if any(w is None or tuple(w.shape) != tuple(own[MLM_HEAD_KEYS[k]].shape) for k, w in found.items()):
            return False
        with torch.no_grad():
            for key, name in MLM_HEAD_KEYS.items():
                own[name].copy_(pretrained.take(key))
        for tied in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"):
            pretrained.take(tied)
        return True


__all__ = ["MLM_HEAD_KEYS", "TokenReconstructionHead"]
