"""The transformer every ranker is built on, with or without a PEFT adapter.

One forward for all methods: hidden states aligned with the input tokens. PEFT's own forward for prompt
learning drops ``token_type_ids`` (segment B of a cross-encoder pair); here PEFT's modules generate the
prompt / prefix and the base model is called with the segment ids kept.
"""
from __future__ import annotations

import torch
from torch import nn


class Backbone(nn.Module):
    def __init__(self, model: nn.Module, method: str):
        super().__init__()
        self.model = model
        self.method = method
        peft_config = getattr(model, "peft_config", None)
        self.peft_config = peft_config["default"] if peft_config else None
        self.prompt_learning = bool(self.peft_config is not None and self.peft_config.is_prompt_learning)

    @property
    def config(self):
        return self.base_model.config

    @property
    def base_model(self) -> nn.Module:
        """The plain transformers model (under the PEFT wrappers)."""
        model = self.model
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        return model

    @property
    def is_peft(self) -> bool:
        return self.peft_config is not None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        if not self.prompt_learning:
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                kwargs["token_type_ids"] = token_type_ids
            return self.model(**kwargs).last_hidden_state
        batch, length = input_ids.shape
        n = self.peft_config.num_virtual_tokens
        ones = attention_mask.new_ones(batch, n)
        mask = torch.cat([ones, attention_mask], dim=1)
        base = self.base_model
        if self.peft_config.peft_type == "PREFIX_TUNING":
            past = self.model.get_prompt(batch_size=batch)
            # explicit positions keep the pretrained position embeddings of the real tokens
            positions = torch.arange(length, device=input_ids.device).unsqueeze(0).expand(batch, -1)
            out = base(input_ids=input_ids, attention_mask=mask, token_type_ids=token_type_ids,
                       position_ids=positions, past_key_values=past, use_cache=False)
            return out.last_hidden_state
        embeds = base.get_input_embeddings()(input_ids)
        prompts = self.model.get_prompt(batch_size=batch).to(embeds.dtype)
        embeds = torch.cat([prompts, embeds], dim=1)
        kwargs = {"inputs_embeds": embeds, "attention_mask": mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = torch.cat([token_type_ids.new_zeros(batch, n), token_type_ids], dim=1)
        return base(**kwargs).last_hidden_state[:, n:]
