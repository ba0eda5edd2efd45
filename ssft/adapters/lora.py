"""LoRA (Hu et al. 2021) on the attention query and value projections, and LoRA++ (Jung et al. 2022,
§3.2.3), which adds the attention-output dense layer, through PEFT."""
from __future__ import annotations

from dataclasses import dataclass

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

    def problem(self) -> Problem:
        if self.r < 1:
            return "r", "must be >= 1"
        if not 0.0 <= self.dropout < 1.0:
            return "dropout", "must be in [0, 1)"
        return None


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


class Lora(Adapter):
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
