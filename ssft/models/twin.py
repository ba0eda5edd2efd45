"""TwinBERT (Lu et al. 2020) as used in 001: one vector per text, a learned combiner or a similarity.

- pooling ``mean`` (default): mean of the last-layer states of the attended tokens; ``cls``: the [CLS] state.
- scorer ``combiner`` (default, TwinBERT's residual network): v = max(q, d) element-wise, r = W1 v + b1 + v,
  s = w2 · r + b2; ``cosine`` / ``dot``: similarity of the two vectors, nothing learned outside the backbone.
- ``combiner_start`` ``cosine`` (default): the combiner starts as the checkpoint's own cosine, so the model ranks at
  step 0 as the pretrained sentence encoder does: s = t · cos(q, d) + w2 · r + b2 with w2 = 0, b2 = 0 at the start and
  t = 20 a learned scale (the dense model's ``score_scale``); TwinBERT's residual network learns on top of it (w2 gets
  a gradient at the first step, W1 from the second). ``random``: TwinBERT's combiner as published, initialised at
  random, which cannot rank before training.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.config.choices import POOLINGS, SCORERS
from ssft.config.model import ArchitectureConfig
from ssft.config.parse import Problem
from ssft.models.bi import BiEncoder, Encoded

__all__ = ["COMBINER_STARTS", "POOLINGS", "SCORERS", "ResidualCombiner", "TwinBert", "TwinConfig", "mean_pool"]


@dataclass
class TwinConfig(ArchitectureConfig):
    """TwinBERT's model keys (see the module docstring)."""

    pooling: str = "mean"  # mean | cls
    scorer: str = "combiner"  # combiner (TwinBERT's residual network) | cosine | dot
    combiner_start: str = "cosine"  # cosine (ranks as the checkpoint's cosine at step 0) | random (as published)

    def problem(self) -> Problem:
        if self.combiner_start not in COMBINER_STARTS:
            return "combiner_start", f"expected one of {', '.join(COMBINER_STARTS)}, got '{self.combiner_start}'"
        if self.pooling not in POOLINGS:
            return "pooling", f"expected one of {', '.join(POOLINGS)}, got '{self.pooling}'"
        if self.scorer not in SCORERS:
            return "scorer", f"expected one of {', '.join(SCORERS)}, got '{self.scorer}'"
        return None


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the token states where ``attention_mask`` is 1."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


COMBINER_STARTS = ("cosine", "random")
COSINE_START_SCALE = 20.0  # the dense model's score_scale: listwise CE over cosines in [-1, 1] needs a temperature


class ResidualCombiner(nn.Module):
    """TwinBERT's combiner: element-wise max of the two vectors, a residual linear layer, a linear score; with
    ``cosine_start`` a learned multiple of the vectors' cosine beside it and the linear score starting at zero, so
    the combiner starts as the cosine (see the module docstring)."""

    def __init__(self, dim: int, cosine_start: bool = False):
        super().__init__()
        self.residual = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 1)
        self.cosine_scale = nn.Parameter(torch.tensor(COSINE_START_SCALE)) if cosine_start else None
        if cosine_start:
            nn.init.zeros_(self.out.weight)
            nn.init.zeros_(self.out.bias)

    def forward(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        v = torch.maximum(q, d)
        score = self.out(self.residual(v) + v).squeeze(-1)
        if self.cosine_scale is not None:
            score = score + self.cosine_scale * F.cosine_similarity(q, d, dim=-1)
        return score


class TwinBert(BiEncoder):
    architecture = "twin"
    Config = TwinConfig
    legacy_spec = {"combiner_start": "random"}  # a spec without the key: saved before the cosine start existed
    cache_document_embeddings = True  # a frozen model's pooled document vectors go to the on-disk cache (embedding_cache)

    @classmethod
    def ranks_untrained_for(cls, config: TwinConfig) -> bool | None:
        # a combiner started at random cannot rank; one started as the cosine, or a cosine / dot scorer, can
        return config.scorer != "combiner" or config.combiner_start == "cosine"

    def __init__(self, backbone: Backbone, tokenizer, spec):
        super().__init__(backbone, tokenizer, spec)
        self.pooling, self.scorer = self.arch_config.pooling, self.arch_config.scorer
        cosine_start = self.arch_config.combiner_start == "cosine"
        self.combiner = (ResidualCombiner(backbone.config.hidden_size, cosine_start) if self.scorer == "combiner"
                         else None)
        self.ranks_untrained = bool(self.ranks_untrained_for(self.arch_config))

    @classmethod
    def spec_from_pretrained(cls, spec, config: TwinConfig, pretrained) -> None:
        super().spec_from_pretrained(spec, config, pretrained)
        modules = pretrained.modules
        if modules is None or pretrained.kind != "sentence-transformers":
            return
        if modules.dense:
            pretrained.notes.append(f"its {len(modules.dense)} Dense module(s) are not used (TwinBERT has no projection; "
                                    f"architecture dense keeps one)")
        if modules.normalize and config.scorer != "cosine":
            pretrained.notes.append(f"its Normalize module is not used by scorer '{config.scorer}' (cosine is "
                                    f"what normalised vectors score)")

    def export_refusal(self) -> str | None:
        if self.scorer == "combiner":
            return ("scorer 'combiner' (TwinBERT's learned combiner of two vectors) has no sentence-transformers "
                    "equivalent; ssft-rerank / ssft-retrieve serve it from the run folder (scorer cosine / dot export)")
        return None

    def represent(self, hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, tower: str) -> Encoded:
        return Encoded(hidden[:, 0] if self.pooling == "cls" else mean_pool(hidden, attention_mask))

    def score(self, q: Encoded, d: Encoded) -> torch.Tensor:
        if self.scorer == "combiner":
            return self.combiner(q.vectors, d.vectors)
        if self.scorer == "cosine":
            return F.cosine_similarity(q.vectors, d.vectors, dim=-1)
        return (q.vectors * d.vectors).sum(-1)
