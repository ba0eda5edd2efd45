"""The precisions a command computes in, decided once and passed down as values. How a device computes (bf16 native
or not, int8 on the CPU only, what ``auto`` means there) is ``ssft.core.precision``'s business; this module holds
the policy a command adds on top of it, in one place:

- ``inference_precision``: the one resolution of an inference precision in the pipeline — ssft-train's plan for
  its device, ssft-rerank / ssft-eval for the model they loaded; what it returns is what every later step uses.
- ssft-train's ``training.bf16: auto`` (also the default when neither the recipe nor the accelerate config names a
  precision): bf16 mixed precision where the device computes it natively; a resume keeps its checkpoint's, so that it
  resumes exactly (``training_bf16``).
- ssft-train's ``eval.precision``: ``auto`` is the device's native precision, but a resume keeps its checkpoint's, so
  that its validation history goes on in one precision (``eval_precision``); the stages after the plan read the
  resolved value from the run's copy of the recipe (``resolved_recipe``), and every checkpoint records it
  (``checkpoint_precisions``).
- ssft-train's ``eval.backend``: the runtime the start and the test split are scored on (``eval_backend``), resolved
  once the model is built, before training: ``openvino`` where it cannot serve is an error then, not after training.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import torch
from transformers import TrainingArguments

from ssft.config.recipe import Recipe
from ssft.core import precision
from ssft.core.errors import SsftError
from ssft.models.interop import openvino

logger = logging.getLogger("ssft")


def inference_precision(asked: str, on: Any, where: str) -> str:
    """``asked`` (``eval.precision``, ``--precision``) resolved for ``on`` — a device, or a loaded model (its
    parameters' device): ``auto`` decided, int8 refused off the CPU with a one-line error naming ``where``."""
    device = next(on.parameters()).device if hasattr(on, "parameters") else on
    return precision.resolve(asked, device, where)


def training_precision(args: TrainingArguments) -> str:
    """What the training steps computed in: the recipe's bf16 / fp16 or the accelerate config's mixed precision
    (fp16 autocasts on GPUs only)."""
    mixed = args.mixed_precision
    return "bf16" if mixed == "bf16" else "fp16" if mixed == "fp16" and args.device.type == "cuda" else "fp32"


def resolve_auto_bf16(native: bool, recorded: str | None, resuming: bool, defaulted: bool) -> tuple[bool, str]:
    """training.bf16: auto → (bf16 or not, the run's note). A new run takes bf16 where the device computes it
    natively (a CUDA GPU with bf16, a CPU with avx512_bf16 / amx_bf16), never emulated. A resumed run keeps the
    precision its checkpoint was trained in, so that it resumes exactly (also on another machine); a checkpoint
    from before checkpoints recorded it, of a recipe without training.bf16, trained in float32 (then the default)."""
    if resuming and recorded is None and defaulted:
        recorded = "no"
    if resuming and recorded is not None:
        bf16 = recorded == "bf16"
        kept = f"training.bf16: auto, kept from the checkpoint this run resumes{'' if bf16 == native else ', unlike this device'}"
        return bf16, f"training precision: {'bf16 mixed precision' if bf16 else 'float32'} ({kept})"
    return native, ("training precision: bf16 mixed precision (training.bf16: auto, native on this device)" if native
                    else "training precision: float32 (training.bf16: auto, no native bf16 on this device)")


def training_bf16(kwargs: dict[str, Any], record: dict[str, Any] | None, resuming: bool) -> str:
    """training.bf16 in the run's TrainingArguments keywords ``kwargs``, settled in place: ``auto`` — also the default
    when neither the recipe nor the accelerate config names a precision — resolved (``resolve_auto_bf16``; a resume:
    ``record``, its checkpoint's marker); bf16 without a GPU trains on the CPU. Returns the note of what ``auto``
    became, "" when a precision was named (logged by ``describe`` once the inputs are known good: a bad input stays
    one line)."""
    defaulted = "bf16" not in kwargs and not kwargs.get("fp16") and os.environ.get("ACCELERATE_MIXED_PRECISION",
                                                                                     "no") == "no"
    if defaulted:
        # the default when neither the recipe nor the accelerate config names a precision: BENCHMARKS.md
        # § training_precision finds bf16 training no worse than float32 (cross, dense, ColBERT) and 1.35-1.48x faster
        kwargs["bf16"] = "auto"
    note = ""
    if kwargs.get("bf16") == "auto":
        kwargs["bf16"], note = resolve_auto_bf16(
            precision.bf16_native("cuda" if torch.cuda.is_available() else "cpu"),
            record.get("mixed_precision") if record is not None else None, resuming, defaulted)
    if (kwargs.get("bf16") or kwargs.get("bf16_full_eval")) and not torch.cuda.is_available():
        # transformers accepts bf16 without a GPU only with use_cpu (which accelerate then autocasts on the CPU);
        # without a GPU there is nothing else to train on, so training.bf16 alone is enough
        kwargs.setdefault("use_cpu", True)
        if kwargs.get("bf16") and not precision.cpu_bf16_native():
            logger.warning("training.bf16 on a CPU without native bf16 (no amx_bf16 / avx512_bf16 flag): torch emulates "
                           "it, which is usually slower than float32")
    return note


def resolve_eval_precision(asked: str, native: str, recorded: str | None, resuming: bool) -> tuple[str, str]:
    """eval.precision → (the precision every inference of the run computes in, the run's note). ``native``: what
    ``asked`` resolves to on this device. A named precision is the recipe's; ``auto`` takes ``native`` in a new run and
    in a resumed run the precision its checkpoint recorded, so that its validation history goes on in one precision
    (also on another machine); a checkpoint from before the record: ``native``, said so."""
    if asked != "auto":
        return native, ""
    if resuming and recorded in precision.RESOLVED:
        kept = f"kept from the checkpoint this run resumes{'' if recorded == native else ', unlike this device'}"
        return recorded, f"inference precision: {recorded} (eval.precision: auto, {kept})"
    if resuming:
        return native, (f"inference precision: {native} (eval.precision: auto, resolved on this device: the checkpoint "
                        "this run resumes predates the record of its inference precision)")
    why = "native" if native == "bf16" else "no native bf16"
    return native, f"inference precision: {native} (eval.precision: auto, {why} on this device)"


def eval_precision(recipe: Recipe, device: torch.device, record: dict[str, Any] | None,
                   resuming: bool) -> tuple[str, str]:
    """(the precision every inference of the run computes in, the run's note): eval.precision resolved once for the
    whole run on ``device`` — int8 on a GPU refused now — and ``auto`` kept from the checkpoint a resume continues
    (``record``, its marker)."""
    native = inference_precision(recipe.eval.precision, device, f"{recipe.source}: eval.precision")
    return resolve_eval_precision(recipe.eval.precision, native,
                                  record.get("eval_precision") if record is not None else None, resuming)


def resolved_recipe(recipe: Recipe, resolved: str) -> Recipe:
    """A copy of ``recipe`` whose eval.precision is ``resolved``, the one the run computes in: validation, the start,
    the test split and the teachers all read it there (the recipe written to the folder keeps the user's ``auto``)."""
    if recipe.eval.precision == resolved:
        return recipe
    return dataclasses.replace(recipe, eval=dataclasses.replace(recipe.eval, precision=resolved))


def eval_backend(recipe: Recipe, ranker, device: torch.device, job_size: int) -> str:
    """eval.backend resolved for the run: ``torch`` or ``openvino`` (``ssft.models.interop.openvino.resolve_backend``:
    ``auto`` converts where OpenVINO is installed, the method converts and ``job_size``, the test split's inputs, repays
    the conversion); a run computing off the CPU scores on torch, and ``openvino`` named there is a one-line error."""
    asked, where = recipe.eval.backend, f"{recipe.source}: eval.backend"
    if asked == "torch":
        return "torch"
    if torch.device(device).type != "cpu":
        if asked == "openvino":
            raise SsftError(f"{where}: openvino runs on the CPU, this run computes on {torch.device(device).type}; "
                            f"use torch or auto")
        return "torch"
    return openvino.resolve_backend(asked, ranker, where, job_size)


def checkpoint_precisions(resolved: str, start_label: str | None) -> dict[str, str | None]:
    """What every checkpoint of the run records of its inference precision: ``eval_precision`` (what a resume with
    eval.precision: auto keeps) and ``start_precision``, how run.start.<split>.trec was scored (``bf16``, or
    ``openvino:bf16`` on eval.backend openvino; None: no start scored)."""
    return {"eval_precision": resolved, "start_precision": start_label}


def start_file_precision(record: dict[str, Any] | None) -> str | None:
    """The precision the start's run file of a resumed run was scored in: as its checkpoint records it; before the
    record, float32 (the start was scored in float32 then, whatever eval.precision said)."""
    if record is None:
        return None
    return record.get("start_precision") if "eval_precision" in record else "fp32"


__all__ = ["checkpoint_precisions", "eval_backend", "eval_precision", "inference_precision", "resolve_auto_bf16",
           "resolve_eval_precision", "resolved_recipe", "start_file_precision", "training_bf16", "training_precision"]
