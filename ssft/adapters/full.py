from __future__ import annotations

from torch import nn

from ssft.adapters.base import Adapter
from ssft.models.backbone import Backbone
from ssft.registry import ADAPTERS


@ADAPTERS.register("full")
class FullFineTuning(Adapter):
    """Full fine-tuning: every backbone weight is trained."""

    name = "full"

    @classmethod
    def apply(cls, model: nn.Module, config) -> Backbone:
        for p in model.parameters():
            p.requires_grad_(True)
        return Backbone(model, cls.name)
