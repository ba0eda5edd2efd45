"""monoBERT cross-encoder (Nogueira & Cho 2019): ``[CLS] q [SEP] d [SEP]`` → a score from the [CLS] state.

``model.head`` picks how:

- ``classifier`` (default for new runs): BERT's pooler + linear, s = w · tanh(P h_[CLS] + p) + b — monoBERT's
  original layout and what transformers' ``*ForSequenceClassification`` holds (BERT's pooler; RoBERTa's and MPNet's
  ``classifier.dense`` / ``out_proj``). The pooler starts from the checkpoint's (BERT's pretrained next-sentence
  pooler, or a sequence-classification checkpoint's trained one, whose classifier is kept too: epoch 0 then scores
  as the checkpoint does); what the checkpoint lacks starts at random.
- ``cls_linear``: a linear layer on the raw [CLS] state (001 §3.1; what ssft runs saved before ``model.head``
  existed hold — their spec has no ``head`` and loads as this).
"""
from __future__ import annotations

import torch
from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.config.choices import CROSS_HEADS
from ssft.core.errors import SsftError
from ssft.models.base import Pretrained, Ranker
from ssft.models.interop.checkpoint import classifier_head


class CrossEncoder(Ranker):
    architecture = "cross"
    model_options = ("head",)
    ranks_untrained = False  # the ranker head starts random (001 §3.1): the untrained model cannot rank

    def __init__(self, backbone: Backbone, tokenizer, spec):
        super().__init__(backbone, tokenizer, spec)
        config = backbone.config
        self.head_kind = spec.get("head", "cls_linear")  # a spec without the key: saved before model.head existed
        if self.head_kind not in CROSS_HEADS:
            raise SsftError(f"model.head: expected one of {', '.join(CROSS_HEADS)}, got '{self.head_kind}'")
        self.dropout = nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        if self.head_kind == "classifier":
            self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
            with torch.no_grad():  # as transformers initialises a pooler the checkpoint lacks
                self.pooler.weight.normal_(0.0, getattr(config, "initializer_range", 0.02))
                self.pooler.bias.zero_()
        else:
            self.pooler = None
        self.head = nn.Linear(config.hidden_size, 1)  # the ranker, randomly initialised (001 §3.1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.backbone(input_ids, attention_mask, token_type_ids)
        return self.score_cls(hidden[:, 0])

    def score_cls(self, cls: torch.Tensor) -> torch.Tensor:
        """The head on [CLS] states (n, hidden) → scores (n,)."""
        if self.pooler is not None:
            cls = torch.tanh(self.pooler(cls))
        return self.head(self.dropout(cls)).squeeze(-1)

    def tokenize(self, queries: list[str], documents: list[str]) -> dict[str, torch.Tensor]:
        """Pairs to model inputs, as ``tokenizer(queries, documents, padding=True, truncation="longest_first",
        max_length=max_length)`` returns them (a long document is cut first), each distinct text tokenised once."""
        return self.token_cache().pairs(queries, documents, self.spec["max_length"])  # = the tokenizer's own call

    # ------------------------------------------------------------ a pretrained checkpoint's head
    def adopt_pretrained(self, pretrained: Pretrained) -> None:
        """A sequence-classification checkpoint's pooler and classifier (``head: classifier``), or a plain encoder's
        pretrained pooler; with ``head: cls_linear`` nothing is taken (and the report lists what is left)."""
        if self.pooler is None:
            return
        head = classifier_head(pretrained) if pretrained.kind == "sequence-classification" else None
        with torch.no_grad():
            if head is not None:
                self.pooler.weight.copy_(head["pooler.weight"])
                self.pooler.bias.copy_(head["pooler.bias"])
                self.head.weight.copy_(head["linear.weight"])
                self.head.bias.copy_(head["linear.bias"])
                self.ranks_untrained = True  # a trained head: the starting model ranks (epoch 0 is scored on test too)
                return
            for key in ("pooler.dense", f"{pretrained.config.get('model_type', 'bert')}.pooler.dense"):
                if pretrained.has(f"{key}.weight") and pretrained.has(f"{key}.bias"):
                    self.pooler.weight.copy_(pretrained.take(f"{key}.weight"))
                    self.pooler.bias.copy_(pretrained.take(f"{key}.bias"))
                    return
