"""Prompt tuning (Lester et al. 2021) and PEFT's key/value prefix tuning (Li & Liang 2021).

001's own prefix (hidden states replaced before each layer's attention projection) is a different
method, named ``hidden_prefix``; ``prefix`` here is PEFT's key/value prefix.
"""
from __future__ import annotations

from dataclasses import dataclass

from peft import PrefixTuningConfig, PromptTuningConfig, TaskType, get_peft_model
from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.adapters.base import Adapter
from ssft.config.parse import Checked, Problem


@dataclass
class PromptOptions(Checked):
    num_virtual_tokens: int = 10

    def problem(self) -> Problem:
        return ("num_virtual_tokens", "must be >= 1") if self.num_virtual_tokens < 1 else None


@dataclass
class PrefixOptions(PromptOptions):
    prefix_projection: bool = False  # reparameterise the prefix through an MLP (Li & Liang)
    encoder_hidden_size: int | None = None  # MLP width when prefix_projection is on


class PromptTuning(Adapter):
    """Trainable virtual-token embeddings prepended to the input (001 Table 8: length 10)."""

    name = "prompt"
    Config = PromptOptions
    peft = True

    @classmethod
    def apply(cls, model: nn.Module, config: PromptOptions) -> Backbone:
        peft_config = PromptTuningConfig(task_type=TaskType.FEATURE_EXTRACTION, num_virtual_tokens=config.num_virtual_tokens)
        return Backbone(get_peft_model(model, peft_config), cls.name)


class PrefixTuning(Adapter):
    """PEFT prefix tuning: trainable key/value prefixes in every layer."""

    name = "prefix"
    Config = PrefixOptions
    peft = True

    @classmethod
    def apply(cls, model: nn.Module, config: PrefixOptions) -> Backbone:
        kwargs = {}
        if config.prefix_projection:
            kwargs["encoder_hidden_size"] = config.encoder_hidden_size or model.config.hidden_size
        peft_config = PrefixTuningConfig(
            task_type=TaskType.FEATURE_EXTRACTION,
            num_virtual_tokens=config.num_virtual_tokens,
            prefix_projection=config.prefix_projection,
            **kwargs,
        )
        return Backbone(get_peft_model(model, peft_config), cls.name)
