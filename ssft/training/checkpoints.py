"""Checkpoints that a killed run resumes from exactly, and the Trainer that writes and reads them.

- A checkpoint folder is complete once ``CHECKPOINT_MARKER`` is written into it (last): a checkpoint without it was
  cut short and is never resumed from (``discard_incomplete_checkpoints`` removes it, ``latest_checkpoint`` skips it).
- ``check_checkpoint``: before a resume, every file it reads is checked; a missing, truncated or garbage file is one
  ``SsftError`` naming it.
- ``CheckpointedTrainer``: a transformers Trainer whose checkpoints hold the model in ssft's folder format
  (``ranker/``), the state of callbacks that keep any (``save_checkpoint_state`` / ``load_checkpoint_state`` /
  ``check_checkpoint_state``, e.g. the best-epoch snapshot) and the marker with the loss so far (the training loss
  of a resumed run is averaged over the whole run). A step checkpoint due at the end of an epoch is written after
  that epoch's evaluation (``SaveAfterEpochEvaluation``). ``learning_rates_from_args`` (``--resume-with-changes``):
  a resume keeps the optimizer moments and the place in the schedule, but the base learning rates become this
  run's (``base_learning_rate``). A non-finite loss or gradient norm stops training before the
  optimizer step (``_stop_non_finite``), so no checkpoint ever holds weights a NaN touched.
- What made a checkpoint (``run_record``, written into its marker): the mixed precision it trained in, the precision
  ``eval.precision`` resolved to (validation, test, the start, teachers), and the fingerprints of its inputs -- the files
  of every model it loaded (``weights_fingerprint``) and the data it trained, validated and tested on
  (``content_fingerprint``). A resume reads them back (``checkpoint_record``): it keeps the precisions and refuses
  changed inputs (``check_fingerprints``); a checkpoint written before the record resumes unchecked.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import shutil
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType
from safetensors import SafetensorError, safe_open
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import TrainerState
from transformers.trainer_pt_utils import safe_globals
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from ssft.core.errors import SsftError
from ssft.core.hub import resolve_model
from ssft.core.io import atomic_write_json
from ssft.models.base import PICKLE_WEIGHTS, SPEC_FILE, Ranker, _first_line, saved_model_folder

logger = logging.getLogger(__name__)

# written last into a checkpoint folder: a checkpoint without it was cut short and is never resumed from
CHECKPOINT_MARKER = "ssft_checkpoint.json"


def checkpoint_step(folder: Path) -> int | None:
    name = folder.name
    if not name.startswith(PREFIX_CHECKPOINT_DIR + "-"):
        return None
    tail = name[len(PREFIX_CHECKPOINT_DIR) + 1:]
    return int(tail) if tail.isdigit() else None


def complete_checkpoints(folder: Path) -> list[Path]:
    """The complete checkpoint folders (marker written) under ``folder``, oldest step first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and checkpoint_step(p) is not None and (p / CHECKPOINT_MARKER).is_file()]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(folder: Path) -> Path | None:
    found = complete_checkpoints(folder)
    return found[-1] if found else None


def checkpoint_record(run_dir: Path) -> dict[str, Any] | None:
    """The marker of a run's latest complete checkpoint (its own, or a hybrid phase's: one run, one record): the step,
    the loss so far and what made it (``CheckpointedTrainer``'s ``run_record``); None when there is no checkpoint or
    its marker cannot be read (the resume itself reports that: ``check_checkpoint``)."""
    folders = [run_dir, *sorted(run_dir.glob("phase-*"))] if run_dir.is_dir() else []
    for folder in folders:
        last = latest_checkpoint(folder)
        if last is not None:
            try:
                record = json.loads((last / CHECKPOINT_MARKER).read_text())
            except (OSError, ValueError):
                return None
            return record if isinstance(record, dict) else None
    return None


def checkpoint_mixed_precision(run_dir: Path) -> str | None:
    """The mixed precision ("no", "bf16", "fp16") a run's checkpoints were trained in (its own, or a hybrid phase's:
    one run, one precision); None when there is no checkpoint, or it was written before checkpoints recorded it."""
    record = checkpoint_record(run_dir)
    return record.get("mixed_precision") if record is not None else None


# ---------------------------------------------------------------- fingerprints of what a run is made from

# the files a model is loaded from: weights (safetensors: ssft never loads pickle weights), configs, tokenizer files,
# remote code; other formats of the same weights (.bin, onnx/, openvino/) and a folder's history are not read
_MODEL_FILE_SUFFIXES = {".safetensors", ".json", ".txt", ".model", ".py", ".tiktoken"}
_NOT_MODEL_FOLDERS = {"onnx", "openvino", ".git", ".cache", "logs"}


def _hash_file(digest, path: Path) -> None:
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)


def _model_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and p.suffix in _MODEL_FILE_SUFFIXES and not p.name.startswith(".")
                  and not any(part in _NOT_MODEL_FOLDERS or part.startswith("checkpoint-")
                              for part in p.relative_to(folder).parts[:-1]))


def weights_fingerprint(name: str, _depth: int = 0) -> str:
    """SHA-256 over the bytes (and relative names) of the files a model named ``name`` (hub id or folder, resolved as
    loading resolves it; a saved ssft model: its own files and its base model's) is loaded from: weights, configs and
    tokenizer. Values, not sizes or dates: a model re-saved at the same path with other weights of the same shapes
    changes it. About 0.1 s for all-MiniLM-L6-v2's 90 MB (in the page cache, which loading the model fills anyway)."""
    digest = hashlib.sha256()
    saved = saved_model_folder(name)
    folder = saved if saved is not None else resolve_model(name)
    for path in _model_files(Path(folder)) if saved is None else sorted(p for p in saved.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{path.stat().st_size}\0".encode())
        _hash_file(digest, path)
    if saved is not None and _depth < 4:  # an adapter is loaded on top of its base model's weights
        try:
            base = json.loads((saved / SPEC_FILE).read_text(encoding="utf-8")).get("base_model")
        except (OSError, ValueError, AttributeError):
            base = None
        if isinstance(base, str):
            digest.update(f"base_model\0{weights_fingerprint(base, _depth + 1)}".encode())
    return digest.hexdigest()


def _feed(update, item: Any) -> None:
    """``item`` into a digest, unambiguously (every string and container length-prefixed): strings, numbers, None,
    dicts, lists / tuples, and dataclasses (a document, a training row) as the dict of their fields."""
    if isinstance(item, str):
        data = item.encode("utf-8", "surrogatepass")
        update(b"s%d:" % len(data))
        update(data)
    elif item is None or isinstance(item, (bool, int, float)):
        update(f"v{item!r};".encode())
    elif isinstance(item, dict):
        update(b"d%d:" % len(item))
        for key, value in item.items():
            _feed(update, key)
            _feed(update, value)
    elif isinstance(item, (list, tuple)):
        update(b"l%d:" % len(item))
        for value in item:
            _feed(update, value)
    elif dataclasses.is_dataclass(item) and not isinstance(item, type):
        _feed(update, {f.name: getattr(item, f.name) for f in dataclasses.fields(item)})
    else:
        _feed(update, str(item))


def content_fingerprint(items: Iterable[Any]) -> str:
    """SHA-256 over ``items`` in their order (e.g. a corpus' (id, document) pairs, a qrels' or a run's (query,
    {document: value}) pairs, data.train's rows): what the run read, whatever file it was read from. About 0.07 s for
    NFCorpus' 3,633 documents (5.4 MB of text)."""
    digest = hashlib.sha256()
    count = 0
    for item in items:
        _feed(digest.update, item)
        count += 1
    digest.update(b"n%d" % count)
    return digest.hexdigest()


def parameters_fingerprint(module: torch.nn.Module) -> str:
    """SHA-256 over every parameter and buffer of ``module`` (names and values): equal before and after training
    exactly when training left the weights as they were. About 0.1 s for all-MiniLM-L6-v2's 22.7M parameters."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                      if tensor.numel() else b"")
    return digest.hexdigest()


def check_fingerprints(run_dir: Path, record: dict[str, Any] | None, current: dict[str, dict[str, str]]) -> None:
    """Before a resume: the inputs a checkpoint recorded (``record["fingerprints"]``: key -> {"sha256", "what"}) are the
    ones this run has read (``current``), else one SsftError naming the first that changed. Changed weights or data
    cannot continue exactly (the adapter would go onto other weights, the history on other data): no option resumes
    over them. A checkpoint written before checkpoints recorded fingerprints is resumed unchecked, and the log says
    so."""
    if not isinstance(record, dict):
        return  # no readable marker: the resume reports the damaged checkpoint itself (check_checkpoint)
    recorded = record.get("fingerprints")
    if not isinstance(recorded, dict):
        logger.warning("%s: its checkpoint was written before checkpoints recorded the fingerprints of their model "
                       "and data: not checked; resuming on the model and data as they are now", run_dir)
        return
    for key, now in current.items():
        then = recorded.get(key)
        if isinstance(then, dict) and then.get("sha256") != now["sha256"]:
            raise SsftError(f"{run_dir} holds checkpoints made from other inputs: {now['what']} changed since they "
                            f"were written, so they cannot be resumed exactly; pass --overwrite to start over, or set "
                            f"training.output_dir to another folder")


def discard_incomplete_checkpoints(folder: Path) -> list[Path]:
    """Remove checkpoint folders a kill cut short (no marker); returns what was removed."""
    removed = []
    if folder.is_dir():
        for p in folder.iterdir():
            if p.is_dir() and checkpoint_step(p) is not None and not (p / CHECKPOINT_MARKER).is_file():
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def checkpoint_problem(checkpoint: Path, name: str, what: str) -> SsftError:
    """The one-line error for a file of a checkpoint that cannot be resumed from: ``what`` is 'missing' or
    'damaged (<short reason>)'."""
    return SsftError(f"{Path(checkpoint) / name}: {what}; delete {checkpoint} to resume from an earlier checkpoint, "
                     f"or pass --overwrite to start over")


def _torch_file_problem(path: Path, numpy_state: bool = False) -> str | None:
    """Why the torch file ``path`` (optimizer / scheduler / RNG state) cannot be loaded, or None. Loaded as the
    Trainer loads it (``weights_only=True``; the RNG state with numpy's arrays allowed)."""
    if not path.is_file():
        return "missing"
    if path.stat().st_size == 0:
        return "damaged (empty file)"
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; cut short, its directory at the end is gone
        return "damaged (truncated, or not a file torch.save wrote)"
    try:  # mmap: the tensors of a large optimizer state are mapped, not read into memory
        if numpy_state:
            with safe_globals():
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 -- unpickling a damaged file raises anything
        if type(err).__name__ == "UnpicklingError":
            return "damaged (holds pickled objects other than plain state, which are never loaded)"
        return f"damaged ({_first_line(err).split('. ')[0][:120]})"
    if not isinstance(state, dict):
        return f"damaged (a {type(state).__name__}, not a state dict)"
    return None


def _json_file(path: Path) -> tuple[object, str | None]:
    """(the JSON in ``path``, None) or (None, why it cannot be read)."""
    if not path.is_file():
        return None, "missing"
    try:
        return json.loads(path.read_bytes().decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "damaged (not a UTF-8 text file)"
    except json.JSONDecodeError as err:
        return None, f"damaged (invalid JSON: {err.msg}, line {err.lineno})"


def _ranker_folder_problem(folder: Path) -> str | None:
    """Why the ranker folder of a checkpoint cannot be loaded (cheap checks: spec, safetensors headers and sizes,
    no pickle weights), or None. The full load (``Ranker.load_weights``) follows when the resume starts."""
    if not folder.is_dir():
        return "missing"
    try:
        Ranker.read_spec(folder)
    except SsftError:
        _, why = _json_file(folder / SPEC_FILE)
        return f"{SPEC_FILE}: {why or 'not a model spec'}"
    for path in sorted(folder.rglob("*.bin")):
        if PICKLE_WEIGHTS.fullmatch(path.name) and not any(path.parent.glob("*.safetensors")):
            return f"{path.relative_to(folder)}: pickle weights are not loaded"
    for path in sorted(folder.rglob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except (SafetensorError, OSError) as err:
            reason = str(err).removeprefix("Error while deserializing header: ")
            return f"{path.relative_to(folder)}: damaged ({reason.splitlines()[0] if reason else type(err).__name__})"
    return None


def check_checkpoint(folder: Path, callbacks=(), needs_optimizer: bool = True) -> None:
    """Before a resume from the checkpoint ``folder``: every file it is resumed from can be read -- ssft's marker
    and ranker folder, the Trainer's ``trainer_state.json``, ``optimizer.pt``, ``scheduler.pt`` and RNG state, and
    the state of each callback with a ``check_checkpoint_state`` (e.g. the best-epoch snapshot). A file that is
    missing, cut short or garbage is one SsftError naming it, instead of a traceback half-way into the resume
    (or, for a missing optimizer or scheduler state, a resume that silently starts them over)."""
    folder = Path(folder)
    if not (folder / CHECKPOINT_MARKER).exists():
        raise SsftError(f"{folder}: incomplete checkpoint (no {CHECKPOINT_MARKER}); it cannot be resumed from")
    # the first problem, in the order a resume reads the files (later checks may load large files)
    for problem in _checkpoint_problems(folder, callbacks, needs_optimizer):
        raise checkpoint_problem(folder, *problem)


def _checkpoint_problems(folder: Path, callbacks, needs_optimizer: bool):
    """(file, why) for each unreadable file of a checkpoint whose marker exists, lazily."""
    marker, why = _json_file(folder / CHECKPOINT_MARKER)
    if why is None and not _is_marker(marker):
        why = "damaged (expected {\"global_step\": <int>, \"loss_sum\": <number>})"
    if why is not None:
        yield CHECKPOINT_MARKER, why
    why = _ranker_folder_problem(folder / "ranker")
    if why is not None:
        yield "ranker", why if why == "missing" else f"the saved model cannot be loaded ({why})"
    why = _trainer_state_problem(folder / "trainer_state.json")
    if why is not None:
        yield "trainer_state.json", why
    state_files = [folder / name for name in ("optimizer.pt", "scheduler.pt") if needs_optimizer]
    for path in state_files:
        why = _torch_file_problem(path)
        if why is not None:
            yield path.name, why
    rng_files = sorted(folder.glob("rng_state*.pth"))
    if not rng_files:
        yield "rng_state.pth", "missing"
    for path in rng_files:
        why = _torch_file_problem(path, numpy_state=True)
        if why is not None:
            yield path.name, why
    for callback in callbacks:
        problem = callback.check_checkpoint_state(folder) if hasattr(callback, "check_checkpoint_state") else None
        if problem is not None:
            yield problem


def _is_marker(marker) -> bool:
    loss_sum = marker.get("loss_sum") if isinstance(marker, dict) else None
    return (isinstance(marker, dict) and type(marker.get("global_step")) is int and isinstance(loss_sum, (int, float))
            and not isinstance(loss_sum, bool))


def _trainer_state_problem(path: Path) -> str | None:
    state, why = _json_file(path)
    if why is None:
        try:
            if not isinstance(state, dict) or type(state.get("global_step")) is not int:
                raise TypeError("no global_step")
            TrainerState(**state)
        except TypeError:
            why = "damaged (not a Trainer state)"
    return why


def non_finite_error(what: str, value: float, step: int, epoch: float | None, last: Path | None) -> SsftError:
    """The error that stops a run at a non-finite loss or gradient norm, with what to do next."""
    # the same command would resume into the same NaN, and a changed learning rate is a different recipe:
    # hence --resume-with-changes (or --overwrite)
    if last is not None:
        advice = (f"the last good checkpoint is {last}; re-run with a lower training.learning_rate (or a "
                  f"training.max_grad_norm) and --resume-with-changes to continue from it, or with --overwrite to "
                  f"start over")
    else:
        advice = ("no checkpoint was written before it; re-run with a lower training.learning_rate (or a "
                  "training.max_grad_norm) and --overwrite")
    return SsftError(f"training stopped at step {step} (epoch {epoch or 0:.2f}): the {what} is {value}; {advice}")


def rebase_learning_rates(optimizer, scheduler, base_rate_of) -> None:
    """Each parameter group's base rate becomes ``base_rate_of(group)``; the schedule's factor at the resumed step
    stays."""
    for i, group in enumerate(optimizer.param_groups):
        new_base = base_rate_of(group)
        old_base = scheduler.base_lrs[i] if hasattr(scheduler, "base_lrs") else group.get("initial_lr", group["lr"])
        factor = group["lr"] / old_base if old_base else 1.0
        if hasattr(scheduler, "base_lrs"):
            scheduler.base_lrs[i] = new_base
        group["initial_lr"] = new_base
        group["lr"] = new_base * factor
    if hasattr(scheduler, "_last_lr"):
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    logger.info("resumed with new learning rates: %s", ", ".join(f"{g['lr']:.3g}" for g in optimizer.param_groups))


class SaveAfterEpochEvaluation(TrainerCallback):
    """A step checkpoint due on the last step of an epoch (or of training) is written after that epoch's
    evaluation instead of before it: resumed from a checkpoint written before the evaluation, a run would skip
    the evaluation (and the best-epoch choice would differ from an uninterrupted run)."""

    def __init__(self):
        self.deferred = False

    def on_step_end(self, args, state, control, **kwargs):
        if args.eval_strategy != "epoch" or not control.should_save:
            return
        epoch_end = state.epoch is not None and float(state.epoch).is_integer()
        if epoch_end or control.should_training_stop:
            control.should_save = False
            self.deferred = True

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.deferred:
            control.should_save = True
            self.deferred = False


def release_accelerator_precision(wanted: str) -> None:
    """Let the next ``Accelerator`` take this Trainer's mixed precision. accelerate keeps one AcceleratorState per
    process and refuses another precision once it is set; transformers resets it only when a TrainingArguments'
    device is first set up. A run's arguments are set up early (``prepare``), and a prediction-only Trainer built
    since (scoring the starting model, mixed precision "no") would make the training Trainer's
    ``Accelerator(mixed_precision="bf16")`` fail. Only the accelerator-level state is dropped; the process group
    (PartialState) stays."""
    state = AcceleratorState._shared_state
    if (state and state.get("_mixed_precision", wanted) != wanted
            and state.get("distributed_type") != DistributedType.DEEPSPEED):
        AcceleratorState._reset_state()


class CheckpointedTrainer(Trainer):
    """The Trainer's checkpoints, made complete-or-absent and resumable exactly (see the module docstring). The
    model is an ssft ``Ranker`` (``save`` / ``load_weights``)."""

    def __init__(self, *args, learning_rates_from_args: bool = False, run_record: dict[str, Any] | None = None,
                 **kwargs):
        training_args = kwargs["args"] if "args" in kwargs else args[1] if len(args) > 1 else None
        if training_args is not None:
            release_accelerator_precision(training_args.mixed_precision)
        super().__init__(*args, **kwargs)
        self.learning_rates_from_args = learning_rates_from_args
        # what made the run (resolved precisions, input fingerprints): written into every checkpoint's marker
        self.run_record = dict(run_record or {})
        self.add_callback(SaveAfterEpochEvaluation())

    def _ranker(self):
        return self.accelerator.unwrap_model(self.model) if hasattr(self, "accelerator") else self.model

    def base_learning_rate(self, group: dict) -> float:
        """This run's base learning rate of an optimizer parameter group (what a resume with changes rebases to)."""
        return self.args.learning_rate

    # ------------------------------------------------------------ non-finite values
    def _get_grad_norm(self, model, grad_norm=None):
        # the Trainer logs this as grad_norm; a non-finite one would turn the weights into NaN at the next step
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        if grad_norm is not None and not math.isfinite(float(grad_norm)):
            self._stop_non_finite("gradient norm", float(grad_norm))
        return grad_norm

    def _stop_non_finite(self, what: str, value: float) -> None:
        last = latest_checkpoint(Path(self._get_output_dir(None))) if self.args.should_save else None
        raise non_finite_error(what, value, self.state.global_step + 1, self.state.epoch, last)

    # ------------------------------------------------------------ resume
    def _run_epoch(self, *args, **kwargs):
        # the training groups draw their negatives by epoch; accelerate forwards set_epoch to the dataset only
        # when the sampler has none, and not at all for the loader that skips the batches a resumed run has seen
        epoch = kwargs["epoch"] if "epoch" in kwargs else args[1]
        if hasattr(self.train_dataset, "set_epoch"):
            self.train_dataset.set_epoch(epoch)
        return super()._run_epoch(*args, **kwargs)

    def train(self, resume_from_checkpoint=None, **kwargs):
        self._resumed_loss = (0.0, 0)  # (sum of the per-step losses before the resume, steps), set on resume
        if resume_from_checkpoint is True:
            resume_from_checkpoint = latest_checkpoint(Path(self.args.output_dir)) or True  # True: the Trainer's error
        if resume_from_checkpoint not in (None, False, True):
            resume_from_checkpoint = str(resume_from_checkpoint)
            # every file the resume reads, before anything is read (the Trainer's own loads give tracebacks)
            no_optimizer = self.args.save_only_model or self.is_deepspeed_enabled or self.is_fsdp_enabled
            check_checkpoint(Path(resume_from_checkpoint), self.callback_handler.callbacks, needs_optimizer=not no_optimizer)
        output = super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        loss_sum, steps = self._resumed_loss
        if steps:  # the Trainer averages over this call's steps only: average over the whole run instead
            now = self.state.global_step - steps
            output = output._replace(training_loss=(loss_sum + output.training_loss * now) / max(self.state.global_step, 1))
        return output

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None and self.learning_rates_from_args and self.lr_scheduler is not None:
            rebase_learning_rates(self.optimizer, self.lr_scheduler, self.base_learning_rate)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        folder = Path(resume_from_checkpoint)
        marker = folder / CHECKPOINT_MARKER
        if not marker.is_file():
            raise SsftError(f"{folder}: incomplete checkpoint (no {CHECKPOINT_MARKER}); it cannot be resumed from")
        model = self.model if model is None else model
        try:
            model.load_weights(folder / "ranker")
        except SsftError as err:
            raise SsftError(f"{err}; delete {folder} to resume from an earlier checkpoint, or pass --overwrite to "
                            f"start over") from None
        for callback in self.callback_handler.callbacks:
            if hasattr(callback, "load_checkpoint_state"):
                callback.load_checkpoint_state(folder)
        state = json.loads(marker.read_text())
        self._resumed_loss = (float(state["loss_sum"]), int(state["global_step"]))
        logger.info("resuming from %s (step %d)", folder, state["global_step"])

    # ------------------------------------------------------------ saving
    def _save_checkpoint(self, model, trial):
        limit = self.args.save_total_limit
        self.args.save_total_limit = None  # older checkpoints go only once this one is complete (below)
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        if not self.args.should_save:
            return
        run_dir = Path(self._get_output_dir(trial))
        folder = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        for callback in self.callback_handler.callbacks:
            if hasattr(callback, "save_checkpoint_state"):
                callback.save_checkpoint_state(folder)
        prior_sum, prior_steps = getattr(self, "_resumed_loss", (0.0, 0))
        loss_sum = prior_sum + self._total_loss_scalar + float(self._tr_loss.item())
        # the mixed precision too: a resumed run whose recipe leaves it to training.bf16: auto keeps the one it began
        # in; and what else made the run (run_record: inference precision, input fingerprints), checked on resume
        atomic_write_json(folder / CHECKPOINT_MARKER, {**self.run_record, "global_step": self.state.global_step,
                                                       "loss_sum": loss_sum, "mixed_precision": self.args.mixed_precision})
        rotate_checkpoints(output_dir=str(run_dir), save_total_limit=limit,
                           best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=False)

    def _save(self, output_dir: str | None = None, state_dict=None):
        # checkpoints hold the ranker in ssft's own folder format (PEFT adapter + ranker head) under ranker/;
        # the Trainer writes its optimizer / scheduler state beside it
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save:
            self.model.save(Path(output_dir) / "ranker")


__all__ = ["CHECKPOINT_MARKER", "CheckpointedTrainer", "SaveAfterEpochEvaluation", "check_checkpoint",
           "check_fingerprints", "checkpoint_mixed_precision", "checkpoint_problem", "checkpoint_record",
           "checkpoint_step", "complete_checkpoints", "content_fingerprint", "discard_incomplete_checkpoints",
           "latest_checkpoint", "non_finite_error", "rebase_learning_rates", "weights_fingerprint"]
