"""Inference precision: one setting (``eval.precision``, ``--precision``) for every inference path.

- ``fp32``: PyTorch's float32 forward.
- ``bf16``: the transformer runs with bfloat16 copies of its weights (``BF16Weights``: every product, LayerNorm and
  residual in bfloat16 — AMX / AVX512-BF16 on CPUs that have them — as a model loaded in bfloat16 computes); the
  hidden states leave it as float32, so pooling, projections and scores stay float32, and the float32 parameters
  are never touched. Only where no gradient is recorded: training precision is ``training.bf16``'s business.
- ``int8``: dynamic int8 quantisation of every ``nn.Linear`` (weights int8, activations quantised per call;
  VNNI / AMX-INT8) of a *copy* of the model; CPU only.
- ``auto``: ``bf16`` where the device computes bfloat16 natively (a CUDA GPU with bf16, a CPU with
  ``amx_bf16`` or ``avx512_bf16``), else ``fp32`` (``bf16_native``).

``inference(model, precision)`` is what an inference path wraps itself in: it yields the model to run (the model
itself for fp32 / bf16, with every module that declares ``inference_precision`` switched while the block runs;
the quantised copy for int8). ``model_precision(model)`` tells a cache which precision a model computes in.
"""
from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ssft.core.errors import SsftError

with warnings.catch_warnings():  # torch.ao.quantization's eager API says it moves to torchao; it is still in torch 2.13
    warnings.simplefilter("ignore")
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

PRECISIONS = ("auto", "fp32", "bf16", "int8")
DEFAULT = "auto"  # eval.precision and the CLIs' --precision when not given
RESOLVED = ("fp32", "bf16", "int8")
BACKENDS = ("auto", "torch", "openvino")  # the runtimes a transformer serves on (ssft.models.interop.openvino)
# what the root of a model run at a precision carries (a plain attribute, never in the state dict)
ATTRIBUTE = "inference_precision"


def _cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (Linux); empty where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


@functools.cache
def onednn_bf16() -> bool:
    """oneDNN can run bfloat16 at all on this CPU (which it also says of CPUs that only emulate it); False on one
    without AVX-512 (an AVX2-only AMD EPYC), where it refuses bf16 primitives whatever precision a caller asked for.

    Returns:
        True where oneDNN runs bf16 inner products.
    """
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def cpu_bf16_native() -> bool:
    """True on a CPU with native bfloat16 arithmetic: x86 ``amx_bf16`` or ``avx512_bf16``, Arm ``bf16``. oneDNN
    also runs bf16 on plain AVX-512 by emulation, slower than float32: that is not native."""
    flags = _cpu_flags()
    return onednn_bf16() and bool(flags & {"amx_bf16", "avx512_bf16", "bf16"})


def bf16_native(device: str | torch.device = "cpu") -> bool:
    """True where ``device`` computes bfloat16 natively (a CUDA GPU with bf16; a CPU, ``cpu_bf16_native``)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if kind == "cpu":
        return cpu_bf16_native()
    return False


def check_backend(backend: str, where: str = "--backend") -> str:
    """``backend`` when it is one of ``BACKENDS`` (the runtimes a transformer serves on: ``ssft.models.interop.
    openvino``), else a one-line error naming ``where``."""
    if backend not in BACKENDS:
        raise SsftError(f"{where}: expected one of {', '.join(BACKENDS)}, got '{backend}'")
    return backend


def check(precision: str, where: str = "precision") -> str:
    """``precision`` when it is one of ``PRECISIONS``, else a one-line error naming ``where``."""
    if precision not in PRECISIONS:
        raise SsftError(f"{where}: expected one of {', '.join(PRECISIONS)}, got '{precision}'")
    return precision


def resolve(precision: str, device: str | torch.device = "cpu", where: str = "precision") -> str:
    """The precision an inference on ``device`` runs at: ``auto`` decided (``bf16_native``), ``int8`` refused
    off the CPU."""
    check(precision, where)
    kind = torch.device(device).type
    if precision == "auto":
        return "bf16" if bf16_native(device) else "fp32"
    if precision == "int8" and kind != "cpu":
        raise SsftError(f"{where}: int8 (dynamic quantisation of the linear layers) runs on the CPU only, the model is "
                        f"on {kind}; use bf16 or fp32 there")
    return precision


class _Call(nn.Module):
    """What ``torch.func.functional_call`` runs: ``fn`` with ``target``'s tensors substituted."""

    def __init__(self, target: nn.Module, fn: Callable[..., Any]):
        super().__init__()
        self.target, self.fn = target, fn

    def forward(self, *args):
        return self.fn(*args)


class BF16Weights:
    """bf16 inference: ``call(module, fn, *args)`` runs ``fn(*args)`` — a function that calls ``module`` — with
    bfloat16 copies of ``module``'s floating parameters and buffers in their place (``torch.func.functional_call``;
    the float32 tensors themselves are never touched), so the module computes as if loaded in bfloat16.

    Why not ``torch.autocast``: autocast casts every weight at each call, and keeps LayerNorm and the residual adds in
    float32, so the activations are cast back and forth around each of them — on an AMX CPU those casts are 15 % of a
    MiniLM forward (a one-off profile, BENCHMARKS.md § vs_sentence_transformers notes). There
    (``benchmarks/vs_sentence_transformers.py``) sentence-transformers loading bf16 weights reranks / encodes 1.05x /
    1.08x as fast as under autocast, and ssft's bf16 weights with the fused CPU kernels 1.37x / 1.34x. The price is
    precision: the residual stream is rounded to bfloat16 too (BENCHMARKS.md § precision_quality measures what it does
    to rankings).

    The copies are made once and kept while the weights are unchanged: the same tensors (``data_ptr``) at the same
    version (an optimizer step or ``load_state_dict`` bumps it); ``clear()`` drops them (a backbone does at every
    other forward, a training step, so a weight changed behind autograd's back — through ``.data`` — between
    evaluations is seen too)."""

    def __init__(self):
        self._copy: tuple[tuple, dict[str, torch.Tensor]] | None = None  # (the weights' fingerprint, bf16 tensors)

    def clear(self) -> None:
        self._copy = None

    def tensors(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """The bfloat16 copies, by name under ``_Call``'s ``target``."""
        named = [(name, t) for name, t in chain(module.named_parameters(), module.named_buffers())
                 if t.is_floating_point()]
        # an inference tensor (made under torch.inference_mode, e.g. a prompt encoder's table built while serving)
        # has no version counter: it cannot change in place outside inference mode, so its pointer identifies it
        fingerprint = tuple((t.data_ptr(), -1 if t.is_inference() else t._version, t.dtype, t.device)
                            for _, t in named)
        if self._copy is None or self._copy[0] != fingerprint:
            self._copy = (fingerprint, {f"target.{name}": t.detach().to(torch.bfloat16) for name, t in named})
        return self._copy[1]

    def call(self, module: nn.Module, fn: Callable[..., Any], *args) -> Any:
        return torch.func.functional_call(_Call(module, fn), self.tensors(module), args, tie_weights=True)


def model_precision(model) -> str:
    """The precision ``model`` computes in now (``fp32`` unless ``inference`` set another)."""
    return getattr(model, ATTRIBUTE, "fp32")


# what the root of a ranker served by another runtime than torch carries: "<backend>:<precision>" (e.g. "openvino:int8",
# ssft.models.interop.openvino); a plain attribute, never in the state dict
BACKEND_ATTRIBUTE = "serving_backend"


# what the root of a ranker served at static int8 carries: the SHA-256 of the calibration items its quantisation
# saw (another calibration, other vectors); a plain attribute, never in the state dict
CALIBRATION_ATTRIBUTE = "serving_calibration"


def calibration_of(model) -> str | None:
    """The fingerprint of the int8 calibration ``model`` is served with, or None (not statically quantised)."""
    return getattr(model, CALIBRATION_ATTRIBUTE, None)


def served_as(model) -> str:
    """What a fingerprint, a cache or an index records of how ``model`` computes: its precision on torch (``bf16``),
    or ``<backend>:<precision>`` on another runtime (``openvino:int8``)."""
    return getattr(model, BACKEND_ATTRIBUTE, None) or model_precision(model)


def parse_served(label: str) -> tuple[str, str]:
    """(backend, precision) of a ``served_as`` label: ``bf16`` -> (torch, bf16), ``openvino:int8`` -> (openvino, int8)."""
    backend, _, precision = label.rpartition(":")
    return backend or "torch", precision


def _device(model: nn.Module) -> torch.device:
    param = next(iter(model.parameters()), None)
    return param.device if param is not None else torch.device("cpu")


def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every ``nn.Linear`` dynamically quantised to int8 (``quantize_dynamic``) but the low-rank
    matrices of an unmerged LoRA adapter (lora, lora++, ss_lora: they stay float32, small); the model itself is
    untouched. CPU only."""
    if _device(model).type != "cpu":
        raise SsftError(f"int8: dynamic quantisation runs on the CPU only, the model is on {_device(model).type}")
    # a LoRA layer's own lora_A / lora_B stay float32: PEFT's forward reads their .weight.dtype, which a quantised
    # linear layer has not (its weight is a method); the base layers under them are quantised like any other
    names = {name: default_dynamic_qconfig for name, module in model.named_modules()
             if type(module) is nn.Linear and not any(part.startswith("lora_") for part in name.split("."))}
    with warnings.catch_warnings():  # torch.ao.quantization's eager API warns that it moves to torchao
        warnings.simplefilter("ignore")
        quantized = quantize_dynamic(copy.deepcopy(model), names, dtype=torch.qint8, inplace=True)
    object.__setattr__(quantized, ATTRIBUTE, "int8")
    return quantized


def _declaring(model: nn.Module) -> list[nn.Module]:
    """The model and its modules that declare an ``inference_precision`` (``ssft.adapters.backbone.Backbone``)."""
    return [m for m in model.modules() if hasattr(type(m), ATTRIBUTE) or m is model]


def set_precision(model: nn.Module, precision: str) -> nn.Module:
    """Switch ``model`` (fp32 / bf16) in place for good: a model that only serves from now on (a loaded one, a
    teacher, a trained model once training is over). int8 returns the quantised copy instead."""
    precision = resolve(precision, _device(model))
    if precision == "int8":
        return quantize_int8(model)
    for module in _declaring(model):
        object.__setattr__(module, ATTRIBUTE, precision)
    return model


@contextmanager
def inference(model: nn.Module, precision: str) -> Iterator[nn.Module]:
    """The model an inference at ``precision`` runs (see the module docstring); its earlier precision is back once
    the block ends. ``auto`` is resolved for the model's device."""
    precision = resolve(precision, _device(model))
    if precision == "int8":
        yield model if model_precision(model) == "int8" else quantize_int8(model)
        return
    modules = _declaring(model)
    before = [m.__dict__.get(ATTRIBUTE) for m in modules]
    for module in modules:
        object.__setattr__(module, ATTRIBUTE, precision)
    try:
        yield model
    finally:
        for module, value in zip(modules, before):
            if value is None:
                module.__dict__.pop(ATTRIBUTE, None)
            else:
                object.__setattr__(module, ATTRIBUTE, value)


__all__ = ["BACKENDS", "BACKEND_ATTRIBUTE", "BF16Weights", "CALIBRATION_ATTRIBUTE", "calibration_of", "check_backend",
           "DEFAULT", "PRECISIONS", "RESOLVED", "bf16_native", "check", "cpu_bf16_native", "inference",
           "model_precision", "onednn_bf16", "parse_served", "quantize_int8", "resolve", "served_as", "set_precision"]
