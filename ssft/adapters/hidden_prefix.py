"""001's own prefix tuning (§3.2.1, Eq. 2–3), named ``hidden_prefix`` to keep it apart from PEFT's
key/value prefix (``prefix``).

A trainable source P' (``length`` x ``source_dim``) is shared by all layers; layer l has its own MLP_l and
P_l = MLP_l(P'). Before layer l's self-attention, the hidden states at the ``length`` prefix positions are
replaced by P_l (Eq. 2: h_i = P[i, :] if i in P_idx); every real token attends to them. The backbone is frozen.

Reading of the paper's sizes. §3.2.1: "the source dimension as 768. MLP consists of two linear layers
between which a ReLU layer exists. The first linear layer down-projects the source vector ... into the space
of 256 dimensions and the second linear layer up-projects the vectors back into the space of 768
dimensions." Table 8 lists "Source dimension 256". We read the text literally (it names both layers):

    MLP_l = Linear(source_dim -> mlp_dim) -> ReLU -> Linear(mlp_dim -> hidden)
    source_dim = hidden size by default (768 for BERT-base), mlp_dim = 256 (Table 8's "256")

Setting ``source_dim: 256`` gives the other reading (a 256-dim source). Trainable parameters:

    length * source_dim + layers * (source_dim * mlp_dim + mlp_dim + mlp_dim * hidden + hidden)

The paper's "0.1M" for prefix-tuning (Tables 3–4) is the generated prefix itself, layers * length * hidden
(12 * 10 * 768 = 92K): the MLPs are a training-time reparameterisation and the prefix can be precomputed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from ssft.adapters.backbone import TOWERS, Backbone, encoder_layers, need_tower
from ssft.adapters.base import Adapter
from ssft.config.parse import Checked, Problem
from ssft.core.errors import SsftError

PREFIX_SHARING = ("average", "concat", "none")  # ss_hidden_prefix: how the towers' prefixes share generators


@dataclass
class HiddenPrefixOptions(Checked):
    length: int = 10  # 001 Table 8: prefix length 10
    source_dim: int | None = None  # None: the model's hidden size (001 §3.2.1: 768 for BERT-base)
    mlp_dim: int = 256  # the MLP's inner width (001 §3.2.1 / Table 8: 256)

    def problem(self) -> Problem:
        if self.length < 1:
            return "length", "must be >= 1"
        if self.source_dim is not None and self.source_dim < 1:
            return "source_dim", "must be >= 1 or null"
        if self.mlp_dim < 1:
            return "mlp_dim", "must be >= 1"
        return None


def prefix_mlp(source_dim: int, mlp_dim: int, hidden_size: int) -> nn.Sequential:
    """MLP_θ of Eq. 2: down-projection, ReLU, up-projection to the hidden size."""
    return nn.Sequential(nn.Linear(source_dim, mlp_dim), nn.ReLU(), nn.Linear(mlp_dim, hidden_size))


class HiddenPrefix(nn.Module):
    """Source P' and one MLP per layer; ``forward()`` returns P_θ for every layer, (layers, length, hidden).

    ``forward(tower)`` takes a tower name for the semi-Siamese subclass; the Siamese prefix (Eq. 3) gives
    query and document the same prefix, whatever the tower."""

    kind = "siamese"

    def __init__(self, num_layers: int, hidden_size: int, length: int = 10, source_dim: int | None = None, mlp_dim: int = 256):
        super().__init__()
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.length = length
        self.source_dim = source_dim or hidden_size
        self.mlp_dim = mlp_dim
        self.source = nn.Parameter(torch.randn(length, self.source_dim))  # N(0, 1), as an nn.Embedding (Li & Liang)
        self.mlps = nn.ModuleList(prefix_mlp(self.source_dim, mlp_dim, hidden_size) for _ in range(num_layers))

    def config_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "num_layers": self.num_layers, "hidden_size": self.hidden_size, "length": self.length,
                "source_dim": self.source_dim, "mlp_dim": self.mlp_dim}

    @staticmethod
    def expected_parameters(num_layers: int, hidden_size: int, length: int, source_dim: int, mlp_dim: int) -> int:
        return length * source_dim + num_layers * (source_dim * mlp_dim + mlp_dim + mlp_dim * hidden_size + hidden_size)

    def forward(self, tower: str | None = None) -> torch.Tensor:
        return torch.stack([mlp(self.source) for mlp in self.mlps])


class SemiSiameseHiddenPrefix(HiddenPrefix):
    """Common and tower-specific per-layer MLPs over one shared source (001 Eq. 4–9)."""

    def __init__(self, num_layers: int, hidden_size: int, length: int = 10, source_dim: int | None = None, mlp_dim: int = 256,
                 sharing: str = "average", common_length: int = 5):
        super().__init__(num_layers, hidden_size, length, source_dim, mlp_dim)
        if sharing not in PREFIX_SHARING:
            raise SsftError(f"adapter.sharing: expected one of {', '.join(PREFIX_SHARING)}, got '{sharing}'")
        self.sharing = sharing
        self.common_length = common_length
        if sharing == "none":
            del self.mlps  # no common generator
            self.mlps = None
        self.tower_mlps = nn.ModuleDict({
            tower: nn.ModuleList(prefix_mlp(self.source_dim, mlp_dim, hidden_size) for _ in range(num_layers)) for tower in TOWERS
        })

    def config_dict(self) -> dict[str, Any]:
        return {**super().config_dict(), "kind": self.sharing, "common_length": self.common_length}

    def forward(self, tower: str | None = None) -> torch.Tensor:
        tower = need_tower(tower, "ss_hidden_prefix")
        specific = self.tower_mlps[tower]
        if self.sharing == "none":  # Eq. 8–9
            return torch.stack([mlp(self.source) for mlp in specific])
        if self.sharing == "average":  # Eq. 4–5
            return torch.stack([common(self.source) + own(self.source) for common, own in zip(self.mlps, specific)])
        k = self.length - self.common_length  # Eq. 6–7
        return torch.stack([torch.cat([own(self.source[:k]), common(self.source[k:])])
                            for common, own in zip(self.mlps, specific)])


def build_hidden_prefix(config: dict[str, Any]) -> HiddenPrefix:
    """Rebuild a prefix module from its saved ``config_dict`` (Siamese, or one of the semi-Siamese sharings)."""
    config = dict(config)
    kind = config.pop("kind", "siamese")
    if kind == "siamese":
        return HiddenPrefix(**config)
    if kind not in PREFIX_SHARING:
        raise SsftError(f"unknown hidden prefix kind '{kind}'")
    return SemiSiameseHiddenPrefix(**config, sharing=kind)


def new_hidden_prefix(model: nn.Module, options: HiddenPrefixOptions, **extra) -> dict[str, Any]:
    """The config of a fresh prefix for ``model``."""
    return {"num_layers": len(encoder_layers(model)), "hidden_size": model.config.hidden_size, **asdict(options), **extra}


class HiddenPrefixTuning(Adapter):
    """001's prefix tuning: prefix hidden states generated per layer from a shared source (Eq. 2), the same
    for queries and documents (Eq. 3). Backbone frozen; source and MLPs train."""

    name = "hidden_prefix"
    Config = HiddenPrefixOptions
    frozen_base = True  # the saved folder holds only the prefix; the base model loads by name

    @classmethod
    def apply(cls, model: nn.Module, config: HiddenPrefixOptions) -> Backbone:
        for p in model.parameters():
            p.requires_grad_(False)
        prefix = build_hidden_prefix(new_hidden_prefix(model, config))
        return Backbone(model, cls.name, hidden_prefix=prefix)


__all__ = ["PREFIX_SHARING", "HiddenPrefix", "HiddenPrefixOptions", "HiddenPrefixTuning", "SemiSiameseHiddenPrefix",
           "build_hidden_prefix", "new_hidden_prefix", "prefix_mlp"]
