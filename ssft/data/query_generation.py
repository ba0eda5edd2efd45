"""Query generation for EmbedDistill (004 §4.3, App. E): new queries near the observed ones, x' = Dec(Enc(x) + ε).

An off-the-shelf encoder-decoder (004: BART-base) encodes an observed query whose tokens were each replaced by the
tokenizer's mask token with probability ``mask_probability`` (App. E: "randomly mask the original query tokens with a
small probability"; §5: 10 %), isotropic Gaussian noise ε ~ N(0, σ² I) is added to every encoder state (σ 0.1 or 0.2
in §5), and the decoder generates from the perturbed states (greedy by default, or sampling), ``per_query`` new
queries per observed one (App. E: two), each with its own mask and noise. Everything random is drawn from one seeded
``torch.Generator`` (sampling runs under a seed derived from it), so a run generates the same queries again. With
σ = 0 and no masking the output is the model's plain greedy decoding of the query.

ssft uses them as 004 does: extra data points for the query embedding matching loss only (Eq. 7 on Q',
``distillation.generated_queries``; ``ssft.training.distillation``), generated once before training.
No generator weights are available offline on the machines ssft is developed on (BART-base is not cached there):
this module is tested on a tiny random BART built in code.
"""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.modeling_outputs import BaseModelOutput

from ssft.config.choices import GENERATION_DECODINGS
from ssft.core.errors import SsftError
from ssft.core.hub import resolve_model

WHERE = "distillation.generated_queries"


def mask_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: set[int], mask_id: int,
                probability: float, generator: torch.Generator) -> torch.Tensor:
    """A copy of ``input_ids`` whose ordinary tokens (attended, not special) are each replaced by ``mask_id`` with
    ``probability``, drawn from ``generator`` (one uniform draw per position, special positions included, so the
    draws do not depend on which tokens are special)."""
    draws = torch.rand(input_ids.shape, generator=generator).to(input_ids.device)
    special = torch.tensor(sorted(special_ids), dtype=input_ids.dtype, device=input_ids.device)
    ordinary = attention_mask.bool() & ~torch.isin(input_ids, special)
    return torch.where(ordinary & (draws < probability), torch.full_like(input_ids, mask_id), input_ids)


def check_generator(model, tokenizer, name: str, mask_probability: float) -> None:
    """One-line refusals: a model that is not an encoder-decoder, a tokenizer without the mask token masking needs."""
    if not getattr(model.config, "is_encoder_decoder", False) or not hasattr(model, "get_encoder"):
        raise SsftError(f"{WHERE}.model: {name} is a {type(model).__name__}, not an encoder-decoder (seq2seq) model; "
                        f"query generation (004 App. E) decodes Enc(x) + noise, e.g. facebook/bart-base")
    if mask_probability > 0 and tokenizer.mask_token_id is None:
        raise SsftError(f"{WHERE}.mask_probability: the tokenizer of {name} has no mask token; set it to 0")


def generate_queries(model, tokenizer, queries: list[str], per_query: int = 2, sigma: float = 0.1,
                     mask_probability: float = 0.1, max_length: int = 32, decoding: str = "greedy", seed: int = 0,
                     batch_size: int = 32, name: str = "the generator") -> list[list[str]]:
    """``per_query`` generated queries for each of ``queries`` (in order), x' = Dec(Enc(mask(x)) + ε) (see the module
    docstring). ``model``: a transformers encoder-decoder (``AutoModelForSeq2SeqLM``) with its ``tokenizer``."""
    check_generator(model, tokenizer, name, mask_probability)
    if decoding not in GENERATION_DECODINGS:
        raise SsftError(f"{WHERE}.decoding: expected {' or '.join(GENERATION_DECODINGS)}, got '{decoding}'")
    generator = torch.Generator().manual_seed(int(seed))
    device = next(model.parameters()).device
    special = set(tokenizer.all_special_ids)
    was_training = model.training
    model.eval()
    out: list[list[str]] = [[] for _ in queries]
    try:
        for start in range(0, len(queries), batch_size):
            tokens = tokenizer(list(queries[start : start + batch_size]), padding=True, truncation=True,
                               max_length=max_length, return_tensors="pt")
            ids, mask = tokens["input_ids"].to(device), tokens["attention_mask"].to(device)
            for _ in range(per_query):
                masked = (mask_tokens(ids, mask, special, tokenizer.mask_token_id, mask_probability, generator)
                          if mask_probability > 0 else ids)
                texts = _decode(model, tokenizer, masked, mask, sigma, max_length, decoding, generator)
                for i, text in enumerate(texts):
                    out[start + i].append(text.strip())
    finally:
        model.train(was_training)
    return out


def _decode(model, tokenizer, ids: torch.Tensor, mask: torch.Tensor, sigma: float, max_length: int, decoding: str,
            generator: torch.Generator) -> list[str]:
    with torch.no_grad():
        states = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        if sigma > 0:
            states = states + sigma * torch.randn(states.shape, generator=generator).to(states.device, states.dtype)
        kwargs = {"encoder_outputs": BaseModelOutput(last_hidden_state=states), "attention_mask": mask,
                  "max_new_tokens": max_length, "num_beams": 1, "do_sample": decoding == "sample"}
        if decoding == "sample":  # generate() samples from the global generator: seeded from ours, restored after
            with torch.random.fork_rng(devices=[] if states.device.type == "cpu" else [states.device]):
                torch.manual_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=generator)))
                generated = model.generate(**kwargs)
        else:
            generated = model.generate(**kwargs)
    return tokenizer.batch_decode(generated, skip_special_tokens=True)


def load_generator(name: str, trust_remote_code: bool = False):
    """(model, tokenizer) of a seq2seq generator by hub id or folder, offline where possible (``resolve_model``);
    safetensors weights only. A model that is not an encoder-decoder is refused from its config, before any weight
    is read."""
    path = Path(resolve_model(name))
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise SsftError(f"{WHERE}.model: {name} at {path} could not be read: {str(err).strip().splitlines()[0]}") from None
    if not getattr(config, "is_encoder_decoder", False):
        raise SsftError(f"{WHERE}.model: {name} is a '{config.model_type}' model, not an encoder-decoder (seq2seq) model; "
                        f"query generation (004 App. E) decodes Enc(x) + noise, e.g. facebook/bart-base")
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(path, use_safetensors=True, trust_remote_code=trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as err:
        raise SsftError(f"{WHERE}.model: {name} at {path} could not be loaded: {str(err).strip().splitlines()[0]}") from None
    return model, tokenizer


__all__ = ["check_generator", "generate_queries", "load_generator", "mask_tokens"]
