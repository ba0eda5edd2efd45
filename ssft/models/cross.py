"""monoBERT cross-encoder (Nogueira & Cho 2019): ``[CLS] q [SEP] d [SEP]`` → linear on [CLS]."""
from __future__ import annotations

import torch
from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.models.base import Ranker


class CrossEncoder(Ranker):
    architecture = "cross"
    ranks_untrained = False  # the ranker head starts random (001 §3.1): the untrained model cannot rank

    def __init__(self, backbone: Backbone, tokenizer, spec):
        super().__init__(backbone, tokenizer, spec)
        config = backbone.config
        self.dropout = nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        self.head = nn.Linear(config.hidden_size, 1)  # the ranker, randomly initialised (001 §3.1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.backbone(input_ids, attention_mask, token_type_ids)
        return self.head(self.dropout(hidden[:, 0])).squeeze(-1)

    def tokenize(self, queries: list[str], documents: list[str]) -> dict[str, torch.Tensor]:
        """Pairs to model inputs, as ``tokenizer(queries, documents, padding=True, truncation="longest_first",
        max_length=max_length)`` returns them (a long document is cut first), each distinct text tokenised once."""
        return self.token_cache().pairs(queries, documents, self.spec["max_length"])  # = the tokenizer's own call
