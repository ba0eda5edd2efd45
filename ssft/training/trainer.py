"""RankingTrainer: a transformers Trainer whose loss, prediction and evaluation are a ranker's."""
from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from ssft.data.beir import Qrels
from ssft.data.examples import PairDataset
from ssft.core.errors import SsftError
from ssft.eval.metrics import evaluate_run
from ssft.core.io import atomic_write_json
from ssft.losses.base import RankingLoss

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


def checkpoint_problem(checkpoint: Path, name: str, what: str) -> SsftError:
    """The one-line error for a file of a checkpoint that cannot be resumed from: ``what`` is 'missing' or
    'damaged (<short reason>)'."""
    return SsftError(f"{Path(checkpoint) / name}: {what}; delete {checkpoint} to resume from an earlier checkpoint, "
                     f"or pass --overwrite to start over")


def _torch_file_problem(path: Path, numpy_state: bool = False) -> str | None:
    """Why the torch file ``path`` (optimizer / scheduler / RNG state) cannot be loaded, or None. Loaded as the
    Trainer loads it (``weights_only=True``; the RNG state with numpy's arrays allowed)."""
    import zipfile

    if not path.is_file():
        return "missing"
    if path.stat().st_size == 0:
        return "damaged (empty file)"
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; cut short, its directory at the end is gone
        return "damaged (truncated, or not a file torch.save wrote)"
    try:  # mmap: the tensors of a large optimizer state are mapped, not read into memory
        if numpy_state:
            from transformers.trainer_pt_utils import safe_globals

            with safe_globals():
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 -- unpickling a damaged file raises anything
        if type(err).__name__ == "UnpicklingError":
            return "damaged (holds pickled objects other than plain state, which are never loaded)"
        from ssft.models.base import _first_line

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
    from safetensors import SafetensorError, safe_open

    from ssft.models.base import PICKLE_WEIGHTS, SPEC_FILE, Ranker

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
    marker, why = _json_file(folder / CHECKPOINT_MARKER)
    if why == "missing":
        raise SsftError(f"{folder}: incomplete checkpoint (no {CHECKPOINT_MARKER}); it cannot be resumed from")
    number = (int, float)
    if why is None and not (isinstance(marker, dict) and type(marker.get("global_step")) is int
                            and isinstance(marker.get("loss_sum"), number) and not isinstance(marker.get("loss_sum"), bool)):
        why = "damaged (expected {\"global_step\": <int>, \"loss_sum\": <number>})"
    if why is not None:
        raise checkpoint_problem(folder, CHECKPOINT_MARKER, why)
    why = _ranker_folder_problem(folder / "ranker")
    if why is not None:
        if why == "missing":
            raise checkpoint_problem(folder, "ranker", "missing")
        raise checkpoint_problem(folder, "ranker", f"the saved model cannot be loaded ({why})")
    from transformers.trainer_callback import TrainerState

    state, why = _json_file(folder / "trainer_state.json")
    if why is None:
        try:
            if not isinstance(state, dict) or type(state.get("global_step")) is not int:
                raise TypeError("no global_step")
            TrainerState(**state)
        except TypeError:
            why = "damaged (not a Trainer state)"
    if why is not None:
        raise checkpoint_problem(folder, "trainer_state.json", why)
    if needs_optimizer:
        for name in ("optimizer.pt", "scheduler.pt"):
            why = _torch_file_problem(folder / name)
            if why is not None:
                raise checkpoint_problem(folder, name, why)
    rng_files = sorted(folder.glob("rng_state*.pth"))
    if not rng_files:
        raise checkpoint_problem(folder, "rng_state.pth", "missing")
    for path in rng_files:
        why = _torch_file_problem(path, numpy_state=True)
        if why is not None:
            raise checkpoint_problem(folder, path.name, why)
    for callback in callbacks:
        if hasattr(callback, "check_checkpoint_state"):
            problem = callback.check_checkpoint_state(folder)
            if problem is not None:
                raise checkpoint_problem(folder, *problem)


def discard_incomplete_checkpoints(folder: Path) -> list[Path]:
    """Remove checkpoint folders a kill cut short (no marker); returns what was removed."""
    removed = []
    if folder.is_dir():
        for p in folder.iterdir():
            if p.is_dir() and checkpoint_step(p) is not None and not (p / CHECKPOINT_MARKER).is_file():
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


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


def ranking_loss(model, ranker, loss_fn: RankingLoss, inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, scores) of a training batch: ``model`` is what runs the forward (the ranker itself, or its DDP
    wrapper), ``ranker`` the unwrapped ranker. Each process of a multi-process run computes the loss of its own
    items; DDP averages the gradients. In-batch negatives (dense) are gathered across processes by the model,
    whose ``loss_weight`` makes that average the global batch's mean when processes hold different item counts."""
    inputs = dict(inputs)
    group = int(inputs.pop("group_size"))
    if getattr(ranker, "in_batch_negatives", False):  # dense: in-batch + cached negatives per item
        scores = model(**inputs, group_size=group)
        return loss_fn(scores) * getattr(ranker, "loss_weight", 1.0), scores
    scores = model(**inputs).view(-1, group)
    return loss_fn(scores), scores


class RankingTrainer(Trainer):
    """Trainer for rankers.

    - ``compute_loss``: the batch holds ``group_size`` = 1 + negatives documents per query; scores are
      reshaped to (queries, group) and passed to the ranking loss. With a ``distillation`` objective
      (``ssft.training.distillation``) that objective is the loss (it applies the ranking loss itself).
    - ``prediction_step``: returns relevance scores (``trainer.predict(pairs)`` reranks any pairs).
    - ``score``: what evaluation and test reranking call; bi-encoders encode each distinct document once.
    - ``evaluate``: reranks the validation first stage and returns ir_measures metrics as ``eval_<name>``.
    - the optimizer gives the ranker head its own learning rate (001 Table 8).
    - with a ``teacher`` (a frozen ``FrozenTeacher``, for a loss with ``needs_teacher`` such as ``tct``), the loss
      compares the student's and the teacher's scores of every query of the batch against every document of it;
      the teacher is no part of the model, so it is neither optimised nor saved in checkpoints.
    - checkpoints hold the ranker in ssft's folder format (``ranker/``) and the state of callbacks that keep any
      (``save_checkpoint_state`` / ``load_checkpoint_state``, e.g. the best-epoch snapshot); a marker file written
      last makes a checkpoint complete, so ``train(resume_from_checkpoint=...)`` continues exactly.
    - a non-finite loss or gradient norm stops training with an ``SsftError`` before the optimizer step, so no
      checkpoint ever holds weights a NaN touched.
    - ``learning_rates_from_args`` (``ssft-train --resume-with-changes``): a resume keeps the checkpoint's optimizer
      moments and its place in the schedule, but the learning rates become this run's (``args.learning_rate``,
      ``head_learning_rate``) instead of the checkpoint's.
    """

    def __init__(self, *args, loss: RankingLoss, head_learning_rate: float | None = None,
                 eval_qrels: Qrels | None = None, eval_metrics: list[str] | None = None, teacher=None,
                 distillation=None, learning_rates_from_args: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if getattr(loss, "needs_teacher", False) and teacher is None:
            raise ValueError(f"the loss {type(loss).__name__} distils a teacher: pass teacher=FrozenTeacher(...)")
        self.loss = loss
        if teacher is not None and distillation is not None:
            raise ValueError("pass either a teacher (in-loop score distillation, e.g. tct) or a distillation objective, not both")
        self.teacher = teacher
        self.distillation = distillation
        self.head_learning_rate = head_learning_rate
        self.learning_rates_from_args = learning_rates_from_args
        self.eval_qrels = eval_qrels
        self.eval_metrics = eval_metrics or ["nDCG@10"]
        self.add_callback(SaveAfterEpochEvaluation())

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.distillation is not None:
            loss = self.distillation(self._ranker(), inputs)
            if model.training and not torch.isfinite(loss.detach()).all():
                self._stop_non_finite("loss", float(loss.detach().float().reshape(-1)[0]))
            return (loss, None) if return_outputs else loss
        if self.teacher is not None:  # in-loop distillation: the teacher scores this very batch
            loss, scores = self._distillation_loss(model, inputs)
        else:
            loss, scores = ranking_loss(model, self._ranker(), self.loss, inputs)
        if model.training and not torch.isfinite(loss.detach()).all():
            self._stop_non_finite("loss", float(loss.detach().float().reshape(-1)[0]))
        return (loss, scores) if return_outputs else loss

    def _distillation_loss(self, model, inputs):
        """In-loop distillation (003 Eq. 6): the student's and the frozen teacher's scores of every distinct query
        of the batch against every distinct document of it (positives and hard negatives of all queries), one row
        per (query, positive) item. Returns (loss, the student's rows)."""
        from ssft.teachers.in_loop import TEACHER_KEYS, batch_items

        inputs = dict(inputs)
        group = int(inputs.pop("group_size"))
        missing = [k for k in TEACHER_KEYS if k not in inputs]
        if missing:
            raise ValueError(f"a distillation batch lacks {missing}: build the collator with RankerCollator(ranker, teacher)")
        teacher_inputs = {k: inputs.pop(k) for k in TEACHER_KEYS}
        student = model(**inputs, all_pairs=True)  # (distinct queries, distinct documents)
        teacher = self.teacher.score_matrix(teacher_inputs)
        if teacher.shape != student.shape:
            raise ValueError(f"teacher scores {tuple(teacher.shape)} do not line up with the student's {tuple(student.shape)}")
        item_q, item_pos, excluded = batch_items(inputs["q_index"], inputs["d_index"], group)
        rows = student[item_q]
        return self.loss(rows, teacher[item_q], item_pos, excluded), rows

    def _get_grad_norm(self, model, grad_norm=None):
        # the Trainer logs this as grad_norm; a non-finite one would turn the weights into NaN at the next step
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        if grad_norm is not None and not math.isfinite(float(grad_norm)):
            self._stop_non_finite("gradient norm", float(grad_norm))
        return grad_norm

    def _stop_non_finite(self, what: str, value: float) -> None:
        step = self.state.global_step + 1
        last = latest_checkpoint(Path(self._get_output_dir(None))) if self.args.should_save else None
        # the same command would resume into the same NaN, and a changed learning rate is a different recipe:
        # hence --resume-with-changes (or --overwrite)
        if last is not None:
            advice = (f"the last good checkpoint is {last}; re-run with a lower training.learning_rate (or a "
                      f"training.max_grad_norm) and --resume-with-changes to continue from it, or with --overwrite to "
                      f"start over")
        else:
            advice = ("no checkpoint was written before it; re-run with a lower training.learning_rate (or a "
                      "training.max_grad_norm) and --overwrite")
        raise SsftError(f"training stopped at step {step} (epoch {self.state.epoch or 0:.2f}): the {what} is {value}; "
                        f"{advice}")

    # ------------------------------------------------------------ batching
    def _get_train_sampler(self, train_dataset=None):
        # training.train_sampling_strategy: group_by_length batches queries of similar length together (less
        # padding); the Trainer can only read lengths from a datasets column or tokenised items, the training
        # groups give theirs (query + positive, in characters) themselves
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy == "group_by_length" and hasattr(dataset, "lengths"):
            from transformers.trainer_pt_utils import LengthGroupedSampler

            return LengthGroupedSampler(self.args.train_batch_size * self.args.gradient_accumulation_steps,
                                        lengths=dataset.lengths())
        return super()._get_train_sampler(train_dataset)

    def _get_eval_sampler(self, eval_dataset):
        # predictions must come back in the pairs' order (PairDataset.to_run), which is already sorted by length:
        # never the length-grouped (shuffled) order the Trainer would use under group_by_length
        if self.args.world_size <= 1:
            from torch.utils.data import SequentialSampler

            return SequentialSampler(eval_dataset)
        return None

    # ------------------------------------------------------------ checkpoints and resume
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
            check_checkpoint(Path(resume_from_checkpoint), self.callback_handler.callbacks,
                             needs_optimizer=not (self.args.save_only_model or self.is_deepspeed_enabled or self.is_fsdp_enabled))
        output = super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        loss_sum, steps = self._resumed_loss
        if steps:  # the Trainer averages over this call's steps only: average over the whole run instead
            now = self.state.global_step - steps
            output = output._replace(training_loss=(loss_sum + output.training_loss * now) / max(self.state.global_step, 1))
        return output

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None and self.learning_rates_from_args and self.lr_scheduler is not None:
            self._rebase_learning_rates()

    def _rebase_learning_rates(self) -> None:
        """Each parameter group's base rate becomes this run's; the schedule's factor at the resumed step stays."""
        head_ids = {id(p) for p in self._ranker().head_parameters()} if self.head_learning_rate is not None else set()
        scheduler = self.lr_scheduler
        for i, group in enumerate(self.optimizer.param_groups):
            is_head = bool(head_ids) and all(id(p) in head_ids for p in group["params"])
            new_base = self.head_learning_rate if is_head else self.args.learning_rate
            old_base = scheduler.base_lrs[i] if hasattr(scheduler, "base_lrs") else group.get("initial_lr", group["lr"])
            factor = group["lr"] / old_base if old_base else 1.0
            if hasattr(scheduler, "base_lrs"):
                scheduler.base_lrs[i] = new_base
            group["initial_lr"] = new_base
            group["lr"] = new_base * factor
        if hasattr(scheduler, "_last_lr"):
            scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]
        logger.info("resumed with new learning rates: %s", ", ".join(f"{g['lr']:.3g}" for g in self.optimizer.param_groups))

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
        atomic_write_json(folder / CHECKPOINT_MARKER, {"global_step": self.state.global_step, "loss_sum": loss_sum})
        rotate_checkpoints(output_dir=str(run_dir), save_total_limit=limit,
                           best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=False)

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

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        inputs.pop("group_size", None)
        with torch.inference_mode():
            scores = model(**inputs).float()
        return None, scores, None

    def create_optimizer(self, model=None):
        if self.optimizer is not None or self.head_learning_rate is None:
            return super().create_optimizer(model)
        opt_model = self.model if model is None else model
        decay = set(self.get_decay_parameter_names(opt_model))
        head_ids = {id(p) for p in opt_model.head_parameters()}
        groups: dict[tuple[bool, bool], list] = {}
        for name, p in opt_model.named_parameters():
            if p.requires_grad:
                groups.setdefault((id(p) in head_ids, name in decay), []).append(p)
        param_groups = [
            {
                "params": params,
                "lr": self.head_learning_rate if is_head else self.args.learning_rate,
                "weight_decay": self.args.weight_decay if decays else 0.0,
            }
            for (is_head, decays), params in groups.items()
        ]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
        optimizer_kwargs.pop("lr", None)
        self.optimizer = optimizer_cls(param_groups, lr=self.args.learning_rate, **optimizer_kwargs)
        return self.optimizer

    def _ranker(self):
        return self.accelerator.unwrap_model(self.model) if hasattr(self, "accelerator") else self.model

    def score(self, pairs: PairDataset):
        """Scores of ``pairs`` in their order. Cross-encoders: ``Trainer.predict``. Bi-encoders (one process):
        ``score_pairs_once``, which encodes each distinct document once however many queries retrieved it
        (with several processes ``Trainer.predict`` shards the pairs instead)."""
        from ssft.models.bi import BiEncoder, score_pairs_once

        model = self.accelerator.unwrap_model(self.model) if hasattr(self, "accelerator") else self.model
        if isinstance(model, BiEncoder) and self.args.world_size == 1 and len(pairs):
            return score_pairs_once(model, pairs, self.args.per_device_eval_batch_size)
        return self.predict(pairs).predictions

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        pairs = eval_dataset if eval_dataset is not None else self.eval_dataset
        if not isinstance(pairs, PairDataset) or self.eval_qrels is None:
            raise ValueError("RankingTrainer.evaluate needs a PairDataset and eval_qrels")
        if getattr(self._ranker(), "full_retrieval", False):  # dense: retrieve from the whole corpus (000 §5.3.1)
            from ssft.eval.retrieve import evaluate_retrieval

            aggregate = evaluate_retrieval(self._ranker(), pairs.dataset, self.eval_qrels, self.eval_metrics,
                                           batch_size=self.args.per_device_eval_batch_size)
        else:
            run = pairs.to_run(self.score(pairs))
            aggregate, _ = evaluate_run(self.eval_qrels, run, self.eval_metrics)
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in aggregate.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _save(self, output_dir: str | None = None, state_dict=None):
        # checkpoints hold the ranker in ssft's own folder format (PEFT adapter + ranker head) under ranker/;
        # the Trainer writes its optimizer / scheduler state beside it
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save:
            self.model.save(Path(output_dir) / "ranker")
