"""Damaged checkpoints and model folders: a resume checks every file it reads first; pickle weights are
refused; an adapter on the wrong base model, and a folder saved with trust_remote_code, are one line each; the
NaN stop's advice; file modes under the umask; stale temporary folders of a killed save."""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch

from ssft.core.errors import SsftError
from tests.helpers import write_synthetic_beir

ADVICE = "to resume from an earlier checkpoint, or pass --overwrite to start over"


# ---------------------------------------------------------------- a real checkpoint


def _trainer(model_dir: Path, data: Path, out: Path, max_steps: int = 4):
    from transformers import TrainingArguments

    from ssft.config.recipe import ModelConfig
    from ssft.data.beir import load_dataset
    from ssft.data.examples import PairDataset, RankerCollator, TrainingGroups, build_examples
    from ssft.losses import PairwiseSoftmaxLoss
    from ssft.models.cross import CrossEncoder
    from ssft.training.callbacks.best_epoch import BestEpochCallback
    from ssft.training.trainer import RankingTrainer

    torch.manual_seed(0)
    ranker = CrossEncoder.build(ModelConfig(name=str(model_dir), max_length=48), "lora", {"r": 2})
    ds = load_dataset(str(data))
    dev = ds.qrels("dev")
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=2, learning_rate=1e-3, report_to=[],
                             remove_unused_columns=False, use_cpu=True, save_strategy="steps", save_steps=2,
                             eval_strategy="steps", eval_steps=2, max_steps=max_steps, dataloader_pin_memory=False,
                             disable_tqdm=True)
    return RankingTrainer(model=ranker, args=args,
                          train_dataset=TrainingGroups(build_examples(ds.qrels("train"), list(ds.corpus), None), ds, 2),
                          eval_dataset=PairDataset({q: {d: 1.0 for d in ds.corpus} for q in dev}, 20, ds),
                          data_collator=RankerCollator(ranker), loss=PairwiseSoftmaxLoss(), eval_qrels=dev,
                          callbacks=[BestEpochCallback("nDCG@10")])


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir) -> tuple[Path, Path]:
    """(data, run folder) of a 4-step LoRA run checkpointed at steps 2 and 4 (evaluated at each)."""
    root = tmp_path_factory.mktemp("trained")
    data = write_synthetic_beir(root / "beir", queries=12, docs=20)
    trainer = _trainer(tiny_model_dir, data, root / "out")
    trainer.train()
    return data, root / "out"


def test_a_real_checkpoint_passes_the_check_and_resumes(trained, tiny_model_dir, tmp_path):
    from ssft.training.checkpoints import check_checkpoint

    data, out = trained
    checkpoint = out / "checkpoint-2"
    names = {p.name for p in checkpoint.iterdir()}
    assert {"optimizer.pt", "scheduler.pt", "trainer_state.json", "rng_state.pth", "ssft_checkpoint.json", "ranker",
            "best_epoch.json", "best_epoch.safetensors"} <= names, names
    trainer = _trainer(tiny_model_dir, data, tmp_path / "out")
    check_checkpoint(checkpoint, trainer.callback_handler.callbacks)
    trainer.train(resume_from_checkpoint=str(checkpoint))
    assert trainer.state.global_step == 4


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGE = [
    ("optimizer.pt", "truncated", "damaged (truncated, or not a file torch.save wrote)"),
    ("optimizer.pt", "empty", "damaged (empty file)"),
    ("scheduler.pt", "missing", "missing"),
    ("trainer_state.json", "garbage", "damaged (invalid JSON"),
    ("trainer_state.json", "other-json", "damaged (not a Trainer state)"),
    ("rng_state.pth", "pickled-object", "damaged (holds pickled objects other than plain state, which are never loaded)"),
    ("rng_state.pth", "missing", "missing"),
    ("ssft_checkpoint.json", "other-json", "damaged (expected"),
    ("best_epoch.json", "garbage", "damaged (invalid JSON"),
    ("best_epoch.safetensors", "truncated", "damaged (incomplete metadata"),
    ("best_epoch.safetensors", "missing", "missing"),
]


@pytest.mark.parametrize("name, how, reason", DAMAGE, ids=[f"{n}-{h}" for n, h, _ in DAMAGE])
def test_each_damaged_checkpoint_file_is_one_line_naming_it(name, how, reason, trained, tmp_path):
    from ssft.training.callbacks.best_epoch import BestEpochCallback
    from ssft.training.checkpoints import check_checkpoint

    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(trained[1] / "checkpoint-2", checkpoint)
    path = checkpoint / name
    if how == "truncated":
        _truncate(path)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "missing":
        path.unlink()
    elif how == "garbage":
        path.write_bytes(b"{\"half\": ")
    elif how == "other-json":
        path.write_text('["a", "list"]\n')
    elif how == "pickled-object":
        torch.save({"python": Path("/etc/passwd"), "cpu": torch.zeros(2)}, path)
    with pytest.raises(SsftError) as err:
        check_checkpoint(checkpoint, [BestEpochCallback("nDCG@10")])
    message = str(err.value)
    assert message.startswith(f"{path}: {reason}"), message
    assert message.endswith(f"; delete {checkpoint} {ADVICE}"), message
    assert "\n" not in message and "weights_only" not in message


def test_a_checkpoint_without_optimizer_state_passes_when_none_is_saved(trained, tmp_path):
    """save_only_model checkpoints hold no optimizer / scheduler state: not asked for then."""
    from ssft.training.checkpoints import check_checkpoint

    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(trained[1] / "checkpoint-2", checkpoint)
    (checkpoint / "optimizer.pt").unlink()
    (checkpoint / "scheduler.pt").unlink()
    check_checkpoint(checkpoint, needs_optimizer=False)
    with pytest.raises(SsftError, match="optimizer.pt: missing"):
        check_checkpoint(checkpoint)


def test_resuming_a_damaged_checkpoint_stops_before_anything_is_loaded(trained, tiny_model_dir, tmp_path):
    data, out = trained
    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(out / "checkpoint-2", checkpoint)
    _truncate(checkpoint / "scheduler.pt")
    trainer = _trainer(tiny_model_dir, data, tmp_path / "out")
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(SsftError, match="scheduler.pt: damaged"):
        trainer.train(resume_from_checkpoint=str(checkpoint))
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "nothing of the checkpoint was loaded"


# ---------------------------------------------------------------- pickle weights, wrong base model, error text


def test_pickle_weights_are_refused(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    from ssft.models.base import load_transformer

    model = tmp_path / "pickled"
    shutil.copytree(tiny_model_dir, model)
    torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    with pytest.raises(SsftError) as err:
        load_transformer(str(model))
    assert str(err.value) == f"{model / 'pytorch_model.bin'}: pickle weights are not loaded; convert to safetensors"


def test_torch_advice_to_unpickle_is_never_passed_on():
    from ssft.models.base import _first_line

    class UnpicklingError(Exception):
        pass

    text = ("Weights only load failed. This file can still be loaded, to do so you have two options\n(1) Re-running "
            "`torch.load` with `weights_only` set to `False` will likely succeed")
    for err in (UnpicklingError(text), RuntimeError(text)):
        assert "weights_only" not in _first_line(err) and "can still be loaded" not in _first_line(err)


def test_an_adapter_on_another_base_model_is_one_line(tiny_model_dir, tmp_path):
    from ssft.config.recipe import ModelConfig
    from ssft.models import load_ranker
    from ssft.models.cross import CrossEncoder
    from tests.helpers import save_tiny_bert

    wide = save_tiny_bert(tmp_path / "wide", hidden_size=64, layers=2, seed=0)
    CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 4}).save(tmp_path / "model")
    spec = json.loads((tmp_path / "model" / "ssft_model.json").read_text())
    spec["base_model"] = str(wide)
    (tmp_path / "model" / "ssft_model.json").write_text(json.dumps(spec))
    with pytest.raises(SsftError) as err:
        load_ranker(tmp_path / "model")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'model' / 'adapter'}: the adapter does not fit base model '{wide}' "
                              f"(first size mismatch: encoder.layer.0."), message
    assert "is [4, 32] in the adapter, [4, 64] in the base model" in message and "\n" not in message


# ---------------------------------------------------------------- trust_remote_code comes from the user


@pytest.fixture
def remote_code_model(tiny_model_dir, tmp_path) -> Path:
    """A saved ranker whose spec says trust_remote_code (its base model is a plain BERT: nothing runs)."""
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    path = tmp_path / "model"
    CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 2}).save(path)
    spec = json.loads((path / "ssft_model.json").read_text())
    spec["trust_remote_code"] = True
    (path / "ssft_model.json").write_text(json.dumps(spec))
    return path


def test_trust_remote_code_of_a_saved_folder_is_refused_without_the_users_permission(remote_code_model):
    from ssft.models import Ranker, load_ranker
    from ssft.models.cross import CrossEncoder

    expected = (f"{remote_code_model}/ssft_model.json: this model was saved with trust_remote_code; pass "
                f"--trust-remote-code (or trust_remote_code=True) if you trust its code")
    for load in (load_ranker, CrossEncoder.load, Ranker.load):
        with pytest.raises(SsftError) as err:
            load(remote_code_model)
        assert str(err.value) == expected


def test_trust_remote_code_given_by_the_user_loads(remote_code_model, monkeypatch):
    import transformers

    from ssft.models import load_ranker

    seen = []
    original = transformers.AutoModel.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        seen.append(kwargs.get("trust_remote_code"))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", classmethod(spy))
    ranker = load_ranker(remote_code_model, trust_remote_code=True)
    assert ranker.architecture == "cross" and seen and all(seen)
    seen.clear()
    spec = json.loads((remote_code_model / "ssft_model.json").read_text())
    spec["trust_remote_code"] = False
    (remote_code_model / "ssft_model.json").write_text(json.dumps(spec))
    load_ranker(remote_code_model)  # the folder's false is no permission either: the user's default
    assert seen and not any(seen)


def test_a_checkpoint_resume_uses_the_running_models_own_setting(remote_code_model, tiny_model_dir):
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    trusting = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48, trust_remote_code=True), "lora", {"r": 2})
    trusting.load_weights(remote_code_model)
    cautious = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 2})
    with pytest.raises(SsftError, match="saved with trust_remote_code"):
        cautious.load_weights(remote_code_model)


def _dense_saved_with_remote_code(tiny_model_dir, path):
    """A saved dense model whose ssft_model.json says it was built with trust_remote_code."""
    from ssft.config.recipe import ModelConfig
    from ssft.models.dense import DenseDualEncoder

    DenseDualEncoder.build(ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=48), "lora",
                           {"r": 2}).save(path)
    spec = json.loads((path / "ssft_model.json").read_text())
    spec["trust_remote_code"] = True
    (path / "ssft_model.json").write_text(json.dumps(spec))
    return path


def test_teachers_take_the_users_setting(tiny_model_dir, tmp_path):
    from ssft.config.recipe import ModelConfig
    from ssft.teachers.dense import load_teacher, teacher_reference
    from ssft.teachers.in_loop import FrozenTeacher

    path = _dense_saved_with_remote_code(tiny_model_dir, tmp_path / "dense")
    with pytest.raises(SsftError, match="saved with trust_remote_code"):
        load_teacher(teacher_reference(str(path)))
    assert load_teacher(teacher_reference(str(path)), trust_remote_code=True).model.architecture == "dense"
    with pytest.raises(SsftError, match="saved with trust_remote_code"):
        FrozenTeacher.load(str(path), ModelConfig(name=str(tiny_model_dir)))
    FrozenTeacher.load(str(path), ModelConfig(name=str(tiny_model_dir), trust_remote_code=True))


def test_latency_cli_takes_the_flag(tiny_model_dir, tiny_dataset, tmp_path, capsys):
    from ssft.cli.latency import main

    path = _dense_saved_with_remote_code(tiny_model_dir, tmp_path / "dense")
    argv = [str(path), "--data", str(tiny_dataset), "--batch-sizes", "2", "--repeats", "1"]
    assert main(argv) == 2
    assert "pass --trust-remote-code" in capsys.readouterr().err
    assert main([*argv, "--trust-remote-code"]) == 0


# ---------------------------------------------------------------- the NaN stop's advice


class _Stopped:
    """What RankingTrainer._stop_non_finite reads of a trainer."""

    def __init__(self, out: Path):
        from types import SimpleNamespace

        self.state = SimpleNamespace(global_step=5, epoch=1.25)
        self.args = SimpleNamespace(should_save=True)
        self._out = out

    def _get_output_dir(self, trial):
        return str(self._out)


def test_the_nan_stop_advises_a_lower_learning_rate_and_resume_with_changes(tmp_path):
    from ssft.training.trainer import RankingTrainer

    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "checkpoint-4" / "ssft_checkpoint.json").write_text('{"global_step": 4, "loss_sum": 1.0}\n')
    with pytest.raises(SsftError) as err:
        RankingTrainer._stop_non_finite(_Stopped(tmp_path), "loss", float("nan"))
    assert str(err.value) == (
        f"training stopped at step 6 (epoch 1.25): the loss is nan; the last good checkpoint is {tmp_path / 'checkpoint-4'}; "
        f"re-run with a lower training.learning_rate (or a training.max_grad_norm) and --resume-with-changes to continue "
        f"from it, or with --overwrite to start over")
    assert "re-running the same command" not in str(err.value)


def test_the_nan_stop_without_a_checkpoint_advises_overwrite(tmp_path):
    from ssft.training.trainer import RankingTrainer

    with pytest.raises(SsftError) as err:
        RankingTrainer._stop_non_finite(_Stopped(tmp_path), "gradient norm", float("inf"))
    assert str(err.value).endswith("the gradient norm is inf; no checkpoint was written before it; re-run with a lower "
                                   "training.learning_rate (or a training.max_grad_norm) and --overwrite")


# ---------------------------------------------------------------- file modes and a killed save


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_files_get_the_umask_mode(tmp_path, umask_022):
    from ssft.core.io import atomic_write_json, atomic_write_text

    atomic_write_text(tmp_path / "a.txt", "x\n")
    atomic_write_json(tmp_path / "sub" / "metrics.json", {"a": 1})
    assert _mode(tmp_path / "a.txt") == 0o644
    assert _mode(tmp_path / "sub" / "metrics.json") == 0o644
    (tmp_path / "plain.txt").write_text("x")
    assert _mode(tmp_path / "a.txt") == _mode(tmp_path / "plain.txt")


def test_a_saved_model_folder_gets_the_umask_modes(tiny_model_dir, tmp_path, umask_022):
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    ranker = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 2})
    ranker.save(tmp_path / "model")
    ranker.save(tmp_path / "model")  # replacing a folder too
    assert _mode(tmp_path / "model") == 0o755
    for path in (tmp_path / "model").rglob("*"):
        assert _mode(path) == (0o755 if path.is_dir() else 0o644), path


def test_a_save_removes_the_temporary_folders_of_a_killed_save(tiny_model_dir, tmp_path):
    from ssft.config.recipe import ModelConfig
    from ssft.models import load_ranker
    from ssft.models.cross import CrossEncoder

    ranker = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 2})
    for stale in (".model.k1ll3d_x", ".model.old"):
        (tmp_path / stale / "adapter").mkdir(parents=True)
        (tmp_path / stale / "ranker.safetensors").write_bytes(b"half")
    kept = [".model.keep", ".model.k1ll3d_x.tmp", ".other.k1ll3d_x", "model.abcdefgh", ".models.abcdefgh"]
    for name in kept:
        (tmp_path / name).mkdir()
    ranker.save(tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", *kept])
    load_ranker(tmp_path / "model")


def test_a_save_killed_between_its_renames_gets_its_previous_folder_back(tiny_model_dir, tmp_path):
    """Killed after the old folder went to .model.old and before the new one arrived: the old one is complete,
    and the next save puts it back before it cleans up (so a failing save still leaves a model)."""
    from ssft.config.recipe import ModelConfig
    from ssft.models.base import remove_stale_save_folders
    from ssft.models.cross import CrossEncoder

    ranker = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 2})
    ranker.save(tmp_path / "model")
    os.replace(tmp_path / "model", tmp_path / ".model.old")
    (tmp_path / ".model.abcd1234").mkdir()
    remove_stale_save_folders(tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert (tmp_path / "model" / "ssft_model.json").is_file()
