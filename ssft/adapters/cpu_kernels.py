"""Faster fp32 inference on x86 CPUs: the encoder's linear layers through oneDNN with the module's own weights, and
the feed-forward block's ``dense`` + exact GELU fused into one oneDNN call.

Why: PyTorch's CPU ``F.linear`` goes through the BLAS it was built with (MKL), and the activation is a second
pass over the (tokens × intermediate) tensor, costly on a machine with little memory bandwidth once the
activations leave the caches. Measured here (``benchmarks/cpu_kernels.py``, BENCHMARKS.md § cpu_kernels; one thread,
x86-64 with AVX-512, all-MiniLM-L6-v2): linear + GELU 1.2–1.4× faster fused at 2,048–8,192 tokens, encoding
documents 1.23× faster (1.33× on two threads).
Same weights, same fp32 function: only the summation order differs (outputs agree to a few units in the sixth
significant digit).

What is changed: ``use_cpu_kernels(model)`` sets an instance-level ``forward`` on every plain ``nn.Linear`` of
``model`` and on every feed-forward block made of ``dense`` + exact GELU (BERT's ``BertIntermediate``, MPNet's,
...). The class, the parameters and the state dict are untouched. The fast path runs only where it computes
the same thing as the original forward: fp32 tensors on the CPU (or bf16 tensors with bf16 weights: ssft's bf16
inference, ``ssft.core.precision.BF16Weights``, where oneDNN runs bf16 at all), no autocast, not under ``torch.compile``,
at least ``MIN_ROWS`` tokens in the call (a single short query gains nothing), and grad mode off
(``torch.no_grad`` / ``inference_mode``: evaluation, prediction, encoding, frozen teachers). Everywhere else,
every training forward included, the original forward runs. The weights are read as they are at each call
(nothing is packed or cached), so a weight changed in place (an optimizer step, a LoRA merge) is always used.

``SSFT_CPU_KERNELS=0`` turns it off.
"""
from __future__ import annotations

import os

import torch
from torch import nn
from transformers.activations import GELUActivation

from ssft.core import precision

_AVAILABLE: bool | None = None
# below this many rows (tokens of a call) the fused kernel gains nothing (benchmarks/cpu_kernels.py: 0.9x for one
# row, about even up to 512 rows, 1.2-1.4x at 2,048-8,192 rows, where the activations no longer fit in the caches)
MIN_ROWS = 128
# float32, and bfloat16 where the weights themselves are bfloat16 (ssft's bf16 inference, ssft.core.precision)
_DTYPES = (torch.float32, torch.bfloat16)


def available() -> bool:
    """True when this torch build has oneDNN's linear kernels and ``SSFT_CPU_KERNELS`` is not 0."""
    global _AVAILABLE
    if os.environ.get("SSFT_CPU_KERNELS", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if _AVAILABLE is None:
        try:
            weight = torch.ones(3, 2)
            out = torch.ops.mkldnn._linear_pointwise(torch.ones(4, 2), weight, None, "gelu", [], "none")
            _AVAILABLE = bool(torch.backends.mkldnn.is_available()) and torch.allclose(
                out, nn.functional.gelu(torch.full((4, 3), 2.0)), atol=1e-5)
        except (AttributeError, RuntimeError):
            _AVAILABLE = False
    return _AVAILABLE



def _needs_original(linear: nn.Linear, x: torch.Tensor) -> bool:
    weight = linear.weight
    if x.device.type != "cpu" or x.dtype not in _DTYPES or x.dim() < 2 or x.numel() < MIN_ROWS * x.shape[-1]:
        return True
    if x.dtype == torch.bfloat16 and not precision.onednn_bf16():  # not on an AVX2-only CPU
        return True
    if weight.device.type != "cpu" or weight.dtype != x.dtype:
        return True
    if torch.is_autocast_enabled("cpu") or torch.compiler.is_compiling():
        return True
    # inference only: with grad mode on, even a frozen layer keeps PyTorch's kernels, so a training run's numbers
    # never depend on whether an evaluation installed the kernels before (exact resume, issue 9)
    return torch.is_grad_enabled()


def _linear(x: torch.Tensor, linear: nn.Linear, post: str) -> torch.Tensor:
    bias = linear.bias.detach() if linear.bias is not None else None
    return torch.ops.mkldnn._linear_pointwise(x, linear.weight.detach(), bias, post, [], "none" if post == "gelu" else "")


class _LinearForward:
    """Instance ``forward`` of a plain ``nn.Linear`` (a picklable object, not a bound method)."""

    def __init__(self, module: nn.Linear):
        self.module = module

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if _needs_original(self.module, x):
            return nn.Linear.forward(self.module, x)
        return _linear(x, self.module, "none")


class _DenseGeluForward:
    """Instance ``forward`` of a ``dense`` + exact-GELU feed-forward block: one fused oneDNN call."""

    def __init__(self, module: nn.Module):
        self.module = module

    def __call__(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dense = self.module.dense
        if type(dense) is not nn.Linear or _needs_original(dense, hidden_states):
            return type(self.module).forward(self.module, hidden_states)
        return _linear(hidden_states, dense, "gelu")


_FAST_FORWARDS = (_LinearForward, _DenseGeluForward)


def _is_exact_gelu(act) -> bool:
    if isinstance(act, GELUActivation):
        return act.act is nn.functional.gelu
    if isinstance(act, nn.GELU):
        return act.approximate == "none"
    return act is nn.functional.gelu


def _is_dense_gelu_block(module: nn.Module) -> bool:
    return (type(getattr(module, "dense", None)) is nn.Linear and _is_exact_gelu(getattr(module, "intermediate_act_fn", None))
            and len(list(module.children())) <= 2)


def use_cpu_kernels(model: nn.Module) -> int:
    """Route ``model``'s plain linear layers (and dense + GELU blocks, fused) through oneDNN where the result
    cannot differ from the original forward but for rounding (see the module docstring). Idempotent; returns
    how many modules got the fast forward (0 when ``available()`` is False)."""
    if not available():
        return 0
    count = 0
    for module in model.modules():
        if isinstance(module.__dict__.get("forward"), _FAST_FORWARDS):
            continue
        if type(module) is nn.Linear:
            module.forward = _LinearForward(module)
            count += 1
        elif _is_dense_gelu_block(module):
            module.forward = _DenseGeluForward(module)
            count += 1
    return count


def remove_cpu_kernels(model: nn.Module) -> int:
    """Undo ``use_cpu_kernels``: the class forwards again. Returns how many modules."""
    count = 0
    for module in model.modules():
        if isinstance(module.__dict__.get("forward"), _FAST_FORWARDS):
            del module.__dict__["forward"]
            count += 1
    return count


__all__ = ["available", "remove_cpu_kernels", "use_cpu_kernels"]
