"""LoRA (Hu et al. 2021) on the attention query and value projections, and LoRA++ (Jung et al. 2022,
§3.2.3), which adds the attention-output dense layer, through PEFT."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from peft import LoraConfig, get_peft_model
from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.adapters.base import Adapter
from ssft.config.parse import Checked, Problem
from ssft.core.errors import SsftError

# model_type → module-name suffixes of (query, value, attention-output dense)
ATTENTION_MODULES = {
    "bert": ("attention.self.query", "attention.self.value", "attention.output.dense"),
    "roberta": ("attention.self.query", "attention.self.value", "attention.output.dense"),
    "xlm-roberta": ("attention.self.query", "attention.self.value", "attention.output.dense"),
    "electra": ("attention.self.query", "attention.self.value", "attention.output.dense"),
    "mpnet": ("attention.attn.q", "attention.attn.v", "attention.attn.o"),
    "distilbert": ("attention.q_lin", "attention.v_lin", "attention.out_lin"),
}


@dataclass
class LoraOptions(Checked):
    r: int = 16
    alpha: float = 32.0
    dropout: float = 0.1
    target_modules: list[str] | None = None  # module-name suffixes; default: query + value (LoRA++: + attention output)
    # the trained update handed back scaled by this (``scale_update``: a weight-space ensemble with the start); 1: as trained
    delta_scale: float = 1.0

    def problem(self) -> Problem:
        if self.r < 1:
            return "r", "must be >= 1"
        if not 0.0 <= self.dropout < 1.0:
            return "dropout", "must be in [0, 1)"
        if not 0.0 < self.delta_scale <= 1.0:
            return "delta_scale", f"must be in (0, 1] (1: the update as trained), got {self.delta_scale}"
        return None


def scale_plan(options: LoraOptions) -> str | None:
    """The run plan's line for ``delta_scale`` (None at 1)."""
    if options.delta_scale == 1.0:
        return None
    return (f"handed back: the best epoch's update (LoRA's, and the ranker's parameters that start at zero) scaled by "
            f"{options.delta_scale:g} (adapter.delta_scale, a "
            f"weight-space ensemble with the start); validation picks the epoch on the full update")


def scale_lora_b(module: nn.Module, factor: float) -> int:
    """Every LoRA B matrix under ``module`` multiplied by ``factor`` in place (0: zeroed, which gives back the start:
    LoRA's update starts at B = 0); returns how many there were."""
    scaled = 0
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if ".lora_B." in name:
                if factor == 0.0:
                    parameter.zero_()
                else:
                    parameter.mul_(factor)
                scaled += 1
    return scaled


def scale_update(backbone: Backbone, options: LoraOptions) -> str | None:
    """WiSE-FT's weight-space ensemble of the start and the fine-tuned model (Wortsman et al. 2022, "Robust
    fine-tuning of zero-shot models", Eq. 1: θ = (1 − α)·θ₀ + α·θ₁, α = ``delta_scale``). LoRA's update is
    scaling·B·A and starts at B = 0, so the ensemble is the start plus α times the update: every B matrix scaled by α
    (every adapter of the backbone, shared and tower-specific alike). The ranker scales its own parameters that start
    at zero (``ssft.pipeline.run.finish_training``); other trained weights (a head or projection that starts random or
    fitted) are kept as trained. Returns the line the run logs, or None at ``delta_scale`` 1."""
    if options.delta_scale == 1.0:
        return None
    scaled = scale_lora_b(backbone, options.delta_scale)
    if not scaled:
        raise SsftError("adapter.delta_scale: the backbone has no LoRA B matrix to scale")
    return (f"adapter.delta_scale {options.delta_scale:g}: the trained LoRA update scaled by {options.delta_scale:g} "
            f"({scaled} B matrices), a weight-space ensemble of the start and the trained model")


def lora_targets(model: nn.Module, plus_plus: bool, explicit: list[str] | None) -> str:
    if explicit:
        suffixes = explicit
    else:
        model_type = getattr(model.config, "model_type", "")
        if model_type not in ATTENTION_MODULES:
            raise SsftError(
                f"adapter: no default LoRA targets for model type '{model_type}'; set adapter.target_modules "
                f"(known types: {', '.join(sorted(ATTENTION_MODULES))})"
            )
        q, v, o = ATTENTION_MODULES[model_type]
        suffixes = [q, v, o] if plus_plus else [q, v]
    escaped = "|".join(s.replace(".", r"\.") for s in suffixes)
    return rf".*\.(?:{escaped})$"


def lora_config(model: nn.Module, options: LoraOptions, plus_plus: bool) -> LoraConfig:
    return LoraConfig(
        r=options.r,
        lora_alpha=options.alpha,
        lora_dropout=options.dropout,
        target_modules=lora_targets(model, plus_plus, options.target_modules),
        bias="none",
    )


class ScaledLoraUpdate(Adapter):
    """A method whose trained update is LoRA's (B·A from B = 0): ``delta_scale`` hands back part of it."""

    @classmethod
    def finish(cls, backbone: Backbone, config: LoraOptions) -> str | None:
        return scale_update(backbone, config)

    @classmethod
    def update_scale(cls, config: LoraOptions) -> float:
        return config.delta_scale

    @classmethod
    def finish_plan(cls, config: LoraOptions) -> str | None:
        return scale_plan(config)


class Lora(ScaledLoraUpdate):
    """LoRA on W_q and W_v of every layer (001 Table 8: r=16, alpha=32, dropout 0.1)."""

    name = "lora"
    Config = LoraOptions
    peft = True
    exportable = True  # merged into the weights (merge_and_unload) for export
    mergeable = True  # one adapter for every input: merge_and_unload gives the same scores without LoRA's overhead
    plus_plus = False

    @classmethod
    def apply(cls, model: nn.Module, config: LoraOptions) -> Backbone:
        peft_model = get_peft_model(model, lora_config(model, config, cls.plus_plus))
        if not any(p.requires_grad for p in peft_model.parameters()):
            raise SsftError("adapter.target_modules matched no module of the model")
        return Backbone(peft_model, cls.name)


class LoraPlusPlus(Lora):
    """LoRA++: LoRA plus the dense layer after self-attention (001 §3.2.3)."""

    name = "lora++"
    plus_plus = True
