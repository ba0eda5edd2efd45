from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.adapters.base import Adapter


@dataclass
class FullConfig:
    freeze_word_embeddings: bool = False  # keep the input token embeddings fixed (the largest matrix of a small model)


class FullFineTuning(Adapter):
    """Full fine-tuning: every backbone weight is trained (``freeze_word_embeddings``: all but the token
    embedding matrix — for a 2-layer MiniLM student that is 11.7M of its 15.5M weights, whose optimizer update
    dominates a CPU step)."""

    name = "full"
    exportable = True  # its weights are a plain transformers model
    Config = FullConfig

    @classmethod
    def apply(cls, model: nn.Module, config) -> Backbone:
        for p in model.parameters():
            p.requires_grad_(True)
        if getattr(config, "freeze_word_embeddings", False):
            model.get_input_embeddings().weight.requires_grad_(False)
        return Backbone(model, cls.name)
