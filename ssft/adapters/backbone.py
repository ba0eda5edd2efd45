"""The transformer every ranker is built on, with or without a PEFT adapter.

One forward for all methods: hidden states aligned with the input tokens. PEFT's own forward for prompt
learning drops ``token_type_ids`` (segment B of a cross-encoder pair); here PEFT's modules generate the
prompt / prefix and the base model is called with the segment ids kept.

001's own prefix (``hidden_prefix``, an ssft module, see ``ssft.adapters.hidden_prefix``) is attached as
``Backbone.hidden_prefix``: the sequence gets ``length`` extra leading positions whose hidden states are
overwritten at the input of every layer, and those positions are dropped from the output.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ssft.adapters.cpu_kernels import use_cpu_kernels
from ssft.core import precision
from ssft.core.errors import SsftError

TOWERS = ("query", "document")


def need_tower(tower: str | None, method: str) -> str:
    """``tower`` when it names one ("query" / "document"); a semi-Siamese module called without one is an error."""
    if tower not in TOWERS:
        raise SsftError(f"{method} is semi-Siamese: it needs a bi-encoder (twin, colbert) that encodes with tower='query' "
                        f"or tower='document', got tower={tower!r}")
    return tower


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The transformer layers of a plain transformers encoder (BERT-like or DistilBERT-like)."""
    for path in ("encoder.layer", "transformer.layer", "encoder.layers"):
        module = model
        for part in path.split("."):
            module = getattr(module, part, None)
            if module is None:
                break
        if isinstance(module, nn.ModuleList):
            return module
    raise SsftError(f"cannot find the transformer layers of {type(model).__name__} (looked for encoder.layer, transformer.layer)")


def layer_subset(layers: int | list[int] | tuple[int, ...]) -> list[int] | None:
    """The layer indices a ``query_layers`` value names: N = the first N layers, a list = those layers."""
    if layers is None:
        return None
    if isinstance(layers, int):
        return list(range(layers))
    return [int(i) for i in layers]


def select_layers(transformer: nn.Module, layers: int | list[int], name: str, key: str = "model.query_layers") -> None:
    """Keep only the transformer layers ``layers`` names (N = the first N; a list = those indices, in order), in
    place, the config updated; embeddings and everything outside the layer stack are kept (002 §2.1: a student
    from a subset of the teacher's layers, e.g. [0, 5] of a 6-layer teacher)."""
    stack = encoder_layers(transformer)
    chosen = layer_subset(layers)
    if not chosen or chosen != sorted(set(chosen)) or chosen[0] < 0 or chosen[-1] >= len(stack):
        raise SsftError(f"{key}: {name} has {len(stack)} layers (0-{len(stack) - 1}); cannot keep {layers} "
                        f"(a count 1-{len(stack)} or increasing distinct indices)")
    kept = [stack[i] for i in chosen]
    for position, layer in enumerate(kept):  # modules that know their layer index (KV caches) get the new one
        for module in layer.modules():
            if isinstance(getattr(module, "layer_idx", None), int):
                module.layer_idx = position
    del stack[:]
    stack.extend(kept)
    transformer.config.num_hidden_layers = len(kept)


@contextmanager
def replaced_prefix_states(layers: nn.ModuleList, states: torch.Tensor) -> Iterator[None]:
    """While active, the input of layer l has its first ``states.shape[-2]`` positions replaced by
    ``states[l]`` (shape (layers, length, hidden) or (layers, batch, length, hidden)): 001 Eq. 2."""
    length = states.shape[-2]
    handles = []

    def make_hook(prefix: torch.Tensor):
        def hook(module, args, kwargs):
            if args:
                hidden, rest = args[0], args[1:]
            else:
                hidden, rest = kwargs["hidden_states"], ()
            p = prefix.to(hidden.dtype)
            if p.dim() == 2:
                p = p.unsqueeze(0).expand(hidden.shape[0], -1, -1)
            new = torch.cat([p, hidden[:, length:]], dim=1)
            if args:
                return (new, *rest), kwargs
            return args, {**kwargs, "hidden_states": new}

        return hook

    try:
        for layer, prefix in zip(layers, states):
            handles.append(layer.register_forward_pre_hook(make_hook(prefix), with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


class Backbone(nn.Module):
    # the inference precision (``ssft.core.precision``): fp32, or bf16 = the transformer run with bfloat16 copies of its
    # weights wherever no gradient is recorded; switched by ``precision.inference`` / ``precision.set_precision``,
    # never saved
    inference_precision = "fp32"

    def __init__(self, model: nn.Module, method: str, hidden_prefix: nn.Module | None = None):
        super().__init__()
        self.model = model
        self.method = method
        peft_config = getattr(model, "peft_config", None)
        self.peft_config = peft_config["default"] if peft_config and "default" in peft_config else (
            next(iter(peft_config.values())) if peft_config else None)
        self.prompt_learning = bool(self.peft_config is not None and self.peft_config.is_prompt_learning)
        if hidden_prefix is not None and self.prompt_learning:
            raise SsftError("hidden_prefix cannot be combined with PEFT prompt or prefix tuning")
        self.hidden_prefix = hidden_prefix
        self.tower_switch = None  # set by semi-Siamese wiring: callable(tower) selecting tower-specific modules
        self.cpu_kernels_installed = False  # ssft.adapters.cpu_kernels, installed on the first CPU forward without grad
        self.bf16_weights = precision.BF16Weights()  # bf16 inference's copies of the transformer's weights
        # another runtime serving the transformer where no gradient is recorded (ssft.models.interop.openvino): called
        # as (input_ids, attention_mask, token_type_ids, tower) -> float32 hidden states; None: torch
        self.serving = None

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
    def serves_pooled(self) -> bool:
        """This forward is served by a runtime whose graph also ran the ranker's pooler (``Ranker.serving_pooler``):
        it returns the pooled first-token vectors (n, 1, hidden), not hidden states."""
        return self.serving is not None and getattr(self.serving, "pooled", False) and not torch.is_grad_enabled()

    @property
    def is_peft(self) -> bool:
        return self.peft_config is not None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                tower: str | None = None, **model_kwargs: torch.Tensor) -> torch.Tensor:
        """Last-layer hidden states (batch, tokens, hidden). ``tower`` ("query" / "document") selects the
        tower-specific modules of a semi-Siamese backbone; None for cross-encoders and Siamese models.
        ``model_kwargs`` (e.g. ``position_ids``, or what a ranker's attention function reads) go to the transformer's
        forward as they are; a runtime serving a plain graph takes none."""
        if tower is not None and tower not in TOWERS:
            raise ValueError(f"tower must be one of {TOWERS}, got {tower!r}")
        if model_kwargs and (self.prompt_learning or self.hidden_prefix is not None):
            raise SsftError(f"method '{self.method}' places its own positions; the forward cannot also take "
                            f"{', '.join(sorted(model_kwargs))}")
        if self.serving is not None and not torch.is_grad_enabled():
            if model_kwargs:
                raise SsftError(f"a serving runtime computes a plain forward; it cannot take {', '.join(sorted(model_kwargs))}")
            return self.serving(input_ids, attention_mask, token_type_ids, tower)
        if self.tower_switch is not None:
            self.tower_switch(tower)
        forward = functools.partial(self._forward, **model_kwargs) if model_kwargs else self._forward
        if self.inference_precision == "bf16" and not torch.is_grad_enabled():
            hidden = self.bf16_weights.call(self.model, forward, input_ids, attention_mask, token_type_ids, tower)
            return hidden.float()  # pooling, projections and scores stay float32
        self.bf16_weights.clear()  # any other forward (a training step) may be followed by a weight update
        return forward(input_ids, attention_mask, token_type_ids, tower)

    def _forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None,
                 tower: str | None, **model_kwargs: torch.Tensor) -> torch.Tensor:
        if not self.cpu_kernels_installed and input_ids.device.type == "cpu" and not torch.is_grad_enabled():
            use_cpu_kernels(self.model)  # only ever used where no gradient is recorded: training is untouched
            self.cpu_kernels_installed = True
        if self.hidden_prefix is not None:
            return self._forward_hidden_prefix(input_ids, attention_mask, token_type_ids, tower)
        if not self.prompt_learning:
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, **model_kwargs}
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

    def _forward_hidden_prefix(self, input_ids, attention_mask, token_type_ids, tower):
        """``length`` placeholder positions in front of the tokens (attended by every token); their hidden
        states are replaced before each layer (001 Eq. 2) and dropped from the output. The real tokens keep
        their pretrained positions 0..n-1 and their segment ids."""
        states = self.hidden_prefix(tower)  # (layers, length, hidden)
        n = states.shape[-2]
        batch, length = input_ids.shape
        pad_id = getattr(self.config, "pad_token_id", None) or 0
        ids = torch.cat([input_ids.new_full((batch, n), pad_id), input_ids], dim=1)
        mask = torch.cat([attention_mask.new_ones(batch, n), attention_mask], dim=1)
        positions = torch.arange(length, device=input_ids.device)
        positions = torch.cat([positions.new_zeros(n), positions]).unsqueeze(0).expand(batch, -1)
        kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = torch.cat([token_type_ids.new_zeros(batch, n), token_type_ids], dim=1)
        base = self.base_model
        with replaced_prefix_states(encoder_layers(base), states):
            hidden = base(**kwargs).last_hidden_state
        return hidden[:, n:]
