"""The recipe's ``training`` section: ``transformers.TrainingArguments`` keys, passed on unchanged. Every key must be
a TrainingArguments field (an unknown key: one line with the closest name), numbers are coerced as the other
sections' are (``ssft.config.parse.coerce``; ``bf16: auto`` is kept for the run to resolve), and the values that
would crash deep inside training, or quietly train something else, are refused here with one line naming the key:
ranges, ``report_to`` integrations that cannot run, ``lr_scheduler_kwargs`` the scheduler does not take."""
from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import math
import typing
from pathlib import Path
from typing import Any

import torch
from transformers import TrainingArguments
from transformers.integrations import integration_utils
from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION, SchedulerType, get_scheduler

from ssft.config.parse import coerce, plain_type
from ssft.core.errors import SsftError, closest

SEED_RANGE = 2 ** 32  # numpy, torch and random all take seeds in [0, 2**32)

# training.report_to name -> (transformers' check that it can run, the pip package to install)
REPORTERS = {
    "azure_ml": ("is_azureml_available", "azureml-core"), "clearml": ("is_clearml_available", "clearml"),
    "codecarbon": ("is_codecarbon_available", "codecarbon"), "comet_ml": ("is_comet_available", "comet-ml"),
    "dagshub": ("is_dagshub_available", "dagshub mlflow"), "dvclive": ("is_dvclive_available", "dvclive"),
    "flyte": ("is_flytekit_available", "flytekit"), "kubeflow": ("is_kubeflow_available", "kubeflow"),
    "mlflow": ("is_mlflow_available", "mlflow"), "neptune": ("is_neptune_available", "neptune"),
    "swanlab": ("is_swanlab_available", "swanlab"), "tensorboard": ("is_tensorboard_available", "tensorboard"),
    "trackio": ("is_trackio_available", "trackio"), "wandb": ("is_wandb_available", "wandb"),
}


def seed_problem(value: int | None) -> str | None:
    """A seed outside what numpy, torch and random take (``SEED_RANGE``), as a ``Checked`` problem text."""
    return f"must be in [0, 2**32), got {value}" if value is not None and not 0 <= value < SEED_RANGE else None


def training_section(value: Any, source: str) -> dict[str, Any]:
    """The ``training`` mapping with its keys checked against TrainingArguments and its numbers coerced;
    ``output_dir`` defaults to ``runs/<recipe stem>`` (``~`` is expanded with the recipe's other paths)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise SsftError(f"{source}: training: expected a mapping, got {type(value).__name__}")
    fields = {f.name: f for f in dataclasses.fields(TrainingArguments) if f.init}
    for key in value:
        if key not in fields:
            raise SsftError(f"{source}: unknown key 'training.{key}'{closest(str(key), fields)} "
                            f"(training takes TrainingArguments fields)")
    out = dict(value)
    hints = typing.get_type_hints(TrainingArguments)
    for key, val in out.items():
        choices = _enum_of(hints.get(key))
        out[key] = (_choice(key, val, choices, source) if choices is not None
                    else _coerced(key, val, plain_type(hints.get(key)), source))
    out.setdefault("output_dir", "runs/" + Path(source).stem)
    output_dir = out["output_dir"]
    if isinstance(output_dir, int) and not isinstance(output_dir, bool):
        output_dir = str(output_dir)
    if not isinstance(output_dir, str) or not output_dir.strip():
        raise SsftError(f"{source}: training.output_dir: expected a folder path, got {output_dir!r}")
    out["output_dir"] = output_dir
    return out


def _enum_of(hint: Any) -> type[enum.Enum] | None:
    """The enum a TrainingArguments field takes (``IntervalStrategy | str`` -> IntervalStrategy), else None."""
    for arg in typing.get_args(hint) or (hint,):
        if isinstance(arg, type) and issubclass(arg, enum.Enum):
            return arg
    return None


def _choice(key: str, val: Any, choices: type[enum.Enum], source: str) -> Any:
    """A value of an enum field, checked here with the key named (TrainingArguments would say only "False is not a
    valid IntervalStrategy"). YAML 1.1 reads an unquoted ``no`` as false: for the fields with a ``no`` choice
    (eval_strategy, save_strategy, logging_strategy) that is what was written."""
    values = [str(member.value) for member in choices]
    if val is False and "no" in values:
        return "no"
    if isinstance(val, choices) or (isinstance(val, str) and val in values):
        return val
    raise SsftError(f"{source}: training.{key}: expected one of {', '.join(values)}, got {val!r}"
                    f"{closest(str(val), values)}")


def _coerced(key: str, val: Any, target: type | None, source: str) -> Any:
    if key == "bf16" and isinstance(val, str) and val.strip().lower() == "auto":
        return "auto"  # resolved by the run (ssft.pipeline.precision): bf16 where the hardware has it
    if target not in (int, float, bool) or val is None:
        return val
    try:
        return coerce(val, target, f"{source}: training.{key}")
    except SsftError as err:
        if key != "bf16":
            raise
        raise SsftError(f"{err} (or auto: bf16 where the hardware computes it natively)") from None


def check_training(training: dict[str, Any], source: str) -> None:
    """The section's values (float fields are finite already: ``ssft.config.parse.coerce``)."""
    for key in ("seed", "data_seed"):
        problem = seed_problem(training.get(key))
        if problem:
            raise SsftError(f"{source}: training.{key}: {problem}")
    for key in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        value = training.get(key)
        if value is not None and value < 1:
            raise SsftError(f"{source}: training.{key}: must be >= 1, got {value}")
    for key in ("learning_rate", "num_train_epochs"):
        value = training.get(key)
        if value is not None and value < 0:
            raise SsftError(f"{source}: training.{key}: must be >= 0, got {value}")
    max_steps = training.get("max_steps")
    if max_steps is not None and (max_steps == 0 or max_steps < -1):
        raise SsftError(f"{source}: training.max_steps: must be >= 1, or -1 to train training.num_train_epochs; "
                        f"got {max_steps}")
    if training.get("num_train_epochs") == 0 and not (max_steps or 0) > 0:
        raise SsftError(f"{source}: training.num_train_epochs: 0 epochs trains nothing; set it > 0 "
                        f"(or training.max_steps)")
    check_scheduler_kwargs(training, source)
    check_report_to(training, source)


def check_report_to(training: dict[str, Any], source: str) -> None:
    """training.report_to names integrations transformers knows and that can run here (installed): the Trainer builds
    their callbacks only after the data and the first stage, and dies there with a traceback."""
    value = training.get("report_to")
    if value is None or value in ("none", "all", ["none"], ["all"]):  # "all": those installed
        return
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SsftError(f"{source}: training.report_to: expected a name or a list of names ({', '.join(REPORTERS)}, "
                        f"all, none), got {value!r}")
    known = set(REPORTERS) & set(integration_utils.INTEGRATION_TO_CALLBACK)
    for name in names:
        if name not in known:
            raise SsftError(f"{source}: training.report_to: unknown integration '{name}'{closest(name, known)}; known: "
                            f"{', '.join(sorted(known))}, all, none")
        check, package = REPORTERS[name]
        if not getattr(integration_utils, check)():
            if name == "kubeflow":
                raise SsftError(f"{source}: training.report_to: 'kubeflow' reports only inside a Kubeflow TrainJob "
                                f"(KUBEFLOW_TRAINER_SERVER_URL is not set)")
            raise SsftError(f"{source}: training.report_to: '{name}' is not installed here (pip install {package}), "
                            f"or is switched off; install it or remove it from training.report_to")


def check_scheduler_kwargs(training: dict[str, Any], source: str) -> None:
    """training.lr_scheduler_kwargs: a mapping the chosen scheduler accepts, checked by building that scheduler
    on a dummy optimizer (an unknown lr_scheduler_type was refused already, by ``training_section``)."""
    where = f"{source}: training.lr_scheduler_kwargs"
    kwargs = _scheduler_kwargs(training.get("lr_scheduler_kwargs"), where)
    if not kwargs:
        return
    kind = SchedulerType(training.get("lr_scheduler_type", "linear"))
    if kind in (SchedulerType.CONSTANT, SchedulerType.CONSTANT_WITH_WARMUP):  # get_scheduler drops them silently
        raise SsftError(f"{where}: lr_scheduler_type '{kind.value}' takes no arguments, got {', '.join(map(str, kwargs))}")
    params = inspect.signature(TYPE_TO_SCHEDULER_FUNCTION[kind]).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        accepted = [n for n in params if n not in ("optimizer", "num_warmup_steps", "num_training_steps", "last_epoch")]
        for key in kwargs:
            if key not in accepted:
                raise SsftError(f"{where}: '{key}' is not an argument of lr_scheduler_type '{kind.value}'"
                                f"{closest(str(key), accepted)}; it takes: {', '.join(accepted) or 'none'}")
    _try_scheduler(kind, kwargs, where)


def _scheduler_kwargs(kwargs: Any, where: str) -> dict[str, Any] | None:
    """The mapping ``lr_scheduler_kwargs`` gives (TrainingArguments reads a JSON string too)."""
    if kwargs is None:
        return None
    if isinstance(kwargs, str) and kwargs.startswith("{"):
        try:
            kwargs = json.loads(kwargs)
        except json.JSONDecodeError as err:
            raise SsftError(f"{where}: invalid JSON: {err.msg}") from None
    if not isinstance(kwargs, dict):
        raise SsftError(f"{where}: expected a mapping of scheduler arguments, got {kwargs!r}")
    return kwargs


def _try_scheduler(kind: SchedulerType, kwargs: dict[str, Any], where: str) -> None:
    """Build the scheduler on a dummy optimizer: what it raises on its arguments, and factors it would give."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    try:
        scheduler = get_scheduler(kind, optimizer, num_warmup_steps=2, num_training_steps=10,
                                  scheduler_specific_kwargs=dict(kwargs))
        rates = [float(f(step)) for f in getattr(scheduler, "lr_lambdas", []) for step in range(11)]
    except Exception as err:  # noqa: BLE001  whatever the scheduler raises on its arguments
        raise SsftError(f"{where}: lr_scheduler_type '{kind.value}' does not accept {kwargs}: "
                        f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}") from None
    if not all(math.isfinite(r) and r >= 0 for r in rates):
        raise SsftError(f"{where}: {kwargs} gives lr_scheduler_type '{kind.value}' learning-rate factors that are "
                        f"negative or not finite")


__all__ = ["REPORTERS", "SEED_RANGE", "check_report_to", "check_scheduler_kwargs", "check_training", "seed_problem",
           "training_section"]
