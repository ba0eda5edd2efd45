"""Reliability: exact resume after SIGKILL, atomic writes under a simulated crash, the NaN guard, the output-folder
rules (finished runs refused, --overwrite), and safe-by-default code (no unsafe loaders)."""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ssft.core.errors import SsftError
from tests.cli_runner import run_cli, start_cli
from tests.helpers import write_synthetic_beir

SSFT = Path(__file__).resolve().parents[2] / "ssft"


# ---------------------------------------------------------------- kill -9 and resume


@pytest.fixture(scope="module")
def synthetic_data(tmp_path_factory) -> Path:
    return write_synthetic_beir(tmp_path_factory.mktemp("synthetic") / "beir", queries=60, docs=80)


def _recipe(path: Path, model: Path, data: Path, adapter: str, training: str) -> Path:
    path.write_text(f"model: {{name: {model}, max_length: 48}}\nadapter: {adapter}\n"
                    f"data: {{dataset: {data}, num_negatives: 2, negatives_depth: 10}}\neval: {{depth: 10}}\n"
                    f"training: {{per_device_train_batch_size: 2, learning_rate: 1.0e-3, save_strategy: steps, "
                    f"save_steps: 5, logging_steps: 5{training}}}\n")
    return path


def _kill_at(argv: list[str], marker: Path, cwd: Path) -> None:
    """Start ``ssft-train argv`` as its own process; SIGKILL it as soon as ``marker`` (a checkpoint's
    completion file) exists."""
    process = start_cli("ssft.cli.train", argv, cwd=cwd)
    deadline = time.time() + 300
    while not marker.exists():
        if process.exitcode is not None:
            pytest.fail(f"the run ended (exit code {process.exitcode}) before it could be killed")
        if time.time() > deadline:
            process.kill()
            pytest.fail("no checkpoint appeared")
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    assert process.exitcode == -signal.SIGKILL


def _same_results(a: Path, b: Path) -> None:
    assert json.loads((a / "metrics.json").read_text()) == json.loads((b / "metrics.json").read_text())  # exactly
    assert (a / "run.test.trec").read_text() == (b / "run.test.trec").read_text()
    info_a, info_b = (json.loads((p / "run_info.json").read_text()) for p in (a, b))
    assert info_a["validation_history"] == info_b["validation_history"]
    assert info_a["best_validation"] == info_b["best_validation"]
    assert info_b["train_loss"] == pytest.approx(info_a["train_loss"], rel=1e-6)
    for phase_a, phase_b in zip(info_a.get("hybrid_phases", []), info_b.get("hybrid_phases", []), strict=True):
        assert phase_a["best_validation"] == phase_b["best_validation"]
        assert phase_a["validation_history"] == phase_b["validation_history"]
        assert phase_b["train_loss"] == pytest.approx(phase_a["train_loss"], rel=1e-6)


def test_sigkill_mid_epoch_then_resume_gives_the_same_metrics(tmp_path, tiny_model_dir, synthetic_data):
    """LoRA cross-encoder, 2 epochs of 20 steps, a checkpoint every 5 steps: killed right after checkpoint 25
    (mid epoch 2, after the first validation), the same command resumes and ends with identical metrics."""
    recipe = _recipe(tmp_path / "r.yaml", tiny_model_dir, synthetic_data, "{method: lora, r: 4}", ", num_train_epochs: 2")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "SSFT_CACHE": str(tmp_path / "cache")}
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = run_cli("ssft.cli.train", [str(recipe), f"training.output_dir={straight}"], cwd=cwd,
                   env={"SSFT_CACHE": tmp_path / "cache"})
    assert done.returncode == 0, done.stderr[-3000:]

    argv = [str(recipe), f"training.output_dir={killed}"]
    _kill_at(argv, killed / "checkpoint-25" / "ssft_checkpoint.json", cwd)
    assert not (killed / "metrics.json").exists()
    # resumed by the very command a user would type again
    resumed = subprocess.run([sys.executable, "-m", "ssft.train", *argv], cwd=cwd, env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr
    _same_results(straight, killed)
    assert json.loads((killed / "run_info.json").read_text())["resumed_from"].startswith("checkpoint-")
    assert not list(cwd.iterdir()), "nothing written outside the output folder"
    # the recipe asked for checkpoints (save_strategy), so they stay; the Trainer logged the gradient norm
    assert list(straight.glob("checkpoint-*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = {p.parent for p in (straight / "logs").rglob("events.out.tfevents*")}
    tags = EventAccumulator(str(events)).Reload().Tags()["scalars"]
    assert "train/grad_norm" in tags and "train/loss" in tags

    # a finished run is refused; --overwrite trains it again from scratch
    again = run_cli("ssft.cli.train", [str(recipe), f"training.output_dir={straight}"], cwd=cwd)
    assert again.returncode == 2 and "holds a finished run" in again.stderr.strip().splitlines()[-1]


def test_hybrid_killed_in_its_second_phase_resumes_with_the_phase_state(tmp_path, tiny_model_dir, synthetic_data):
    """Sequential hybrid (hidden_prefix 1 epoch, then LoRA 2 epochs): killed inside phase 2, the resumed run
    reads phase 1's result and best epoch and continues phase 2 from its checkpoint."""
    adapter = ("{method: hybrid, first: {method: hidden_prefix, length: 2}, second: {method: lora, r: 4}, "
               "first_epochs: 1, second_epochs: 2}")
    recipe = _recipe(tmp_path / "r.yaml", tiny_model_dir, synthetic_data, adapter, "")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = run_cli("ssft.cli.train", [str(recipe), f"training.output_dir={straight}"], cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    _kill_at([str(recipe), f"training.output_dir={killed}"], killed / "phase-second" / "checkpoint-15" / "ssft_checkpoint.json",
             cwd)
    assert (killed / "phase-first" / "phase.json").is_file() and not (killed / "metrics.json").exists()
    resumed = run_cli("ssft.cli.train", [str(recipe), f"training.output_dir={killed}"], cwd=cwd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _same_results(straight, killed)
    info = json.loads((killed / "run_info.json").read_text())
    assert info["resumed_from"][0] == "phase-first/phase.json" and info["resumed_from"][-1].startswith("phase-second/checkpoint-")


def test_overwrite_and_default_checkpoints(tmp_path, tiny_model_dir, synthetic_data):
    """Without training.save_strategy, ssft checkpoints every epoch (for resuming) and removes the checkpoints
    once the run has finished; --overwrite retrains a finished run; checkpoints of another recipe are refused."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {{name: {tiny_model_dir}, max_length: 48}}\nadapter: {{method: lora, r: 4}}\n"
                      f"data: {{dataset: {synthetic_data}, max_train_queries: 8, validation_split: null}}\neval: {{depth: 5}}\n"
                      f"training: {{output_dir: {tmp_path / 'out'}, num_train_epochs: 1, per_device_train_batch_size: 4}}\n")
    first = run_cli("ssft.cli.train", [str(recipe)], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert not list((tmp_path / "out").glob("checkpoint-*"))
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    again = run_cli("ssft.cli.train", [str(recipe), "--overwrite"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((tmp_path / "out" / "metrics.json").read_text()) == metrics
    (tmp_path / "out" / "metrics.json").unlink()
    (tmp_path / "out" / "checkpoint-2").mkdir()
    (tmp_path / "out" / "checkpoint-2" / "ssft_checkpoint.json").write_text('{"global_step": 2, "loss_sum": 1.0}')
    other = run_cli("ssft.cli.train", [str(recipe), "adapter.r=8"], cwd=tmp_path)
    assert other.returncode == 2 and "different recipe (adapter.r differs)" in other.stderr
    # an optimiser setting may change only when the user says so (after a NaN stop: a lower learning rate)
    lower = run_cli("ssft.cli.train", [str(recipe), "training.learning_rate=1e-3"], cwd=tmp_path)
    assert lower.returncode == 2 and "trained with another training.learning_rate; pass --resume-with-changes" in lower.stderr


# ---------------------------------------------------------------- checkpoint bookkeeping


@pytest.mark.parametrize("architecture, method, options", [
    ("cross", "full", {}), ("cross", "lora", {"r": 2}), ("cross", "lora++", {"r": 2}), ("cross", "prefix", {}),
    ("cross", "prompt", {}), ("cross", "hidden_prefix", {"length": 2}), ("twin", "ss_lora", {"r": 2}),
    ("colbert", "ss_hidden_prefix", {"length": 2}),
    ("cross", "hybrid", {"first": {"method": "hidden_prefix", "length": 2}, "second": {"method": "lora", "r": 2}}),
    ("twin", "hybrid", {"first": {"method": "ss_hidden_prefix", "length": 2}, "second": {"method": "ss_lora", "r": 2}}),
])
def test_a_checkpointed_ranker_loads_back_into_the_live_model_exactly(architecture, method, options, tmp_path, tiny_model_dir):
    """What a resume does with ``checkpoint-N/ranker``: every tensor of the live model (trainable or not) takes
    the saved value, in place, for every method."""
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS

    config = ModelConfig(architecture=architecture, name=str(tiny_model_dir), max_length=48)
    torch.manual_seed(0)
    saved = MODELS.get(architecture).build(config, method, options)
    with torch.no_grad():
        for p in saved.parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn_like(p))
    saved.save(tmp_path / "ranker")
    torch.manual_seed(1)
    live = MODELS.get(architecture).build(config, method, options)
    parameters = {n: p for n, p in live.named_parameters()}
    live.load_weights(tmp_path / "ranker")
    assert {n: p for n, p in live.named_parameters()} == parameters, "loaded in place: the optimizer keeps its tensors"
    expected = saved.state_dict()
    for name, tensor in live.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=name)
    other = MODELS.get(architecture).build(config, "full" if method != "full" else "lora", {})
    with pytest.raises(SsftError, match="method"):
        other.load_weights(tmp_path / "ranker")



def test_incomplete_checkpoints_are_never_resumed_from(tmp_path):
    from ssft.training.checkpoints import CHECKPOINT_MARKER, discard_incomplete_checkpoints, latest_checkpoint

    for step, complete in ((5, True), (10, True), (15, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / CHECKPOINT_MARKER).write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"
    assert discard_incomplete_checkpoints(tmp_path) == [tmp_path / "checkpoint-15"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-10", "checkpoint-5", "checkpoint-x"]


def test_best_epoch_state_round_trips_through_a_checkpoint(tmp_path):
    from ssft.training.callbacks.best_epoch import BestEpochCallback

    best = BestEpochCallback("nDCG@10")
    best.best_value, best.best_step, best.best_epoch = 0.5, 10, 1.0
    best.history = [{"epoch": 1.0, "step": 10, "eval_nDCG@10": 0.5}]
    best._snapshot = {"head.weight": torch.randn(3, 2)}
    best.save_checkpoint_state(tmp_path)
    again = BestEpochCallback("nDCG@10")
    again.load_checkpoint_state(tmp_path)
    assert again.state_dict() == best.state_dict()
    torch.testing.assert_close(again._snapshot["head.weight"], best._snapshot["head.weight"], rtol=0, atol=0)
    with pytest.raises(SsftError, match="selects by eval_nDCG@10"):
        BestEpochCallback("RR@10").load_checkpoint_state(tmp_path)


# ---------------------------------------------------------------- simulated crashes during writes


def test_crash_during_an_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
    from ssft.core import io

    target = tmp_path / "metrics.json"
    io.atomic_write_json(target, {"nDCG@10": 0.3})

    def crash(src, dst):
        raise KeyboardInterrupt  # killed between writing the temporary file and renaming it

    monkeypatch.setattr(io.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        io.atomic_write_json(target, {"nDCG@10": 0.9})
    assert json.loads(target.read_text()) == {"nDCG@10": 0.3}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"], "no partial or temporary file visible"


def test_crash_while_saving_a_model_keeps_the_previous_folder(tmp_path, tiny_model_dir, monkeypatch):
    from ssft.config.recipe import ModelConfig
    from ssft.models import base, load_ranker
    from ssft.models.cross import CrossEncoder

    ranker = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 2}).eval()
    ranker.save(tmp_path / "model")
    inputs = ranker.tokenize(["vitamin d"], ["bone health"])
    with torch.no_grad():
        expected = load_ranker(tmp_path / "model")(**inputs)
        for p in ranker.parameters():
            if p.requires_grad:
                p.add_(1.0)
    real_save_file = base.save_file

    def half_written(tensors, path, *args, **kwargs):
        real_save_file(tensors, path, *args, **kwargs)
        Path(path).write_bytes(Path(path).read_bytes()[:100])  # truncated, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(base, "save_file", half_written)
    with pytest.raises(KeyboardInterrupt):
        ranker.save(tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], "no half-written folder left beside it"
    with torch.no_grad():
        torch.testing.assert_close(load_ranker(tmp_path / "model")(**inputs), expected, rtol=0, atol=0)


def test_crash_while_writing_the_embedding_cache_leaves_nothing(tmp_path, monkeypatch):
    from ssft.models import embedding_cache
    from ssft.models.bi import Encoded

    def dies(tensors, path, metadata=None):
        Path(path).write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(embedding_cache, "save_file", dies)
    path = tmp_path / "cache" / "x.safetensors"
    with pytest.raises(KeyboardInterrupt):
        embedding_cache._write(path, ["d1"], [Encoded(torch.ones(1, 4))], "m" * 64, "c" * 64)
    assert list(path.parent.iterdir()) == []


def test_a_cache_file_of_another_model_or_corpus_is_never_read(tmp_path):
    from ssft.models import embedding_cache
    from ssft.models.bi import Encoded

    path = tmp_path / "x.safetensors"
    embedding_cache._write(path, ["d1", "d2"], [Encoded(torch.ones(1, 4)), Encoded(torch.zeros(1, 4))], "a" * 64, "b" * 64)
    assert embedding_cache._read(path, ["d1", "d2"], "a" * 64, "b" * 64) is not None
    assert embedding_cache._read(path, ["d1", "d2"], "f" * 64, "b" * 64) is None  # same file name, other model
    assert embedding_cache._read(path, ["d1", "d2"], "a" * 64, "f" * 64) is None  # other corpus
    assert embedding_cache._read(path, ["d2", "d1"], "a" * 64, "b" * 64) is None  # other document order


# ---------------------------------------------------------------- numerical guard


class NaNAfter(torch.nn.Module):
    """The pairwise softmax loss until step ``after``, then NaN (``mode='loss'``) or a finite loss whose
    gradient is NaN (``mode='grad'``: d sqrt(u)/du at u = 0 is infinite)."""

    def __init__(self, after: int, mode: str):
        super().__init__()
        self.calls, self.after, self.mode = 0, after, mode

    def forward(self, scores):
        self.calls += 1
        loss = torch.nn.functional.cross_entropy(scores, torch.zeros(scores.shape[0], dtype=torch.long))
        if self.calls <= self.after:
            return loss
        if self.mode == "loss":
            return loss * float("nan")
        return loss + torch.sqrt((scores - scores.detach()).abs().sum())


@pytest.mark.parametrize("mode", ["loss", "grad"])
def test_non_finite_loss_or_gradient_stops_training_and_keeps_the_last_good_checkpoint(mode, tmp_path, tiny_model_dir,
                                                                                       tiny_dataset):
    from transformers import TrainingArguments

    from ssft.config.recipe import ModelConfig
    from ssft.data.beir import load_dataset
    from ssft.data.examples import RankerCollator, TrainingGroups, build_examples
    from ssft.models import load_ranker
    from ssft.models.cross import CrossEncoder
    from ssft.training.trainer import RankingTrainer

    torch.manual_seed(0)
    ranker = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 2})
    ds = load_dataset(str(tiny_dataset))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=1, learning_rate=1e-3,
                             report_to=[], remove_unused_columns=False, use_cpu=True, save_strategy="steps", save_steps=2,
                             num_train_epochs=3, dataloader_pin_memory=False, disable_tqdm=True)
    trainer = RankingTrainer(model=ranker, args=args,
                             train_dataset=TrainingGroups(build_examples(ds.qrels("train"), list(ds.corpus), None), ds, 2),
                             data_collator=RankerCollator(ranker), loss=NaNAfter(5, mode))
    with pytest.raises(SsftError) as err:
        trainer.train()
    message = str(err.value)
    what = "loss is nan" if mode == "loss" else "gradient norm is nan"
    assert "training stopped at step 6" in message and what in message and "checkpoint-4" in message, message
    assert "\n" not in message
    # the last checkpoint before the NaN is complete and holds finite weights; none was written after it
    assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    saved = load_ranker(tmp_path / "out" / "checkpoint-4" / "ranker")
    assert all(torch.isfinite(t).all() for t in saved.state_dict().values())
    assert all(torch.isfinite(p).all() for p in ranker.parameters()), "the NaN never reached the weights"


# ---------------------------------------------------------------- safe by default


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            yield owner, name, node


def test_no_unsafe_loading_in_the_package():
    """YAML only through safe_load/safe_dump, torch.load only with weights_only=True, no pickle / eval / exec,
    and trust_remote_code never switched on in code (only a recipe's model.trust_remote_code does that)."""
    problems = []
    for path in sorted(SSFT.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        where = path.relative_to(SSFT.parent)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                if any(n.split(".")[0] in ("pickle", "dill", "cloudpickle", "marshal", "shelve") for n in names):
                    problems.append(f"{where}:{node.lineno}: imports a pickle-like module")
        for owner, name, node in _calls(tree):
            keywords = {k.arg: k.value for k in node.keywords}
            if owner == "yaml" and name not in ("safe_load", "safe_dump"):
                problems.append(f"{where}:{node.lineno}: yaml.{name}")
            if owner == "torch" and name == "load":
                flag = keywords.get("weights_only")
                if not (isinstance(flag, ast.Constant) and flag.value is True):
                    problems.append(f"{where}:{node.lineno}: torch.load without weights_only=True")
            if name in ("eval", "exec") and isinstance(node.func, ast.Name):  # the builtins, not module.eval()
                problems.append(f"{where}:{node.lineno}: {name}()")
            flag = keywords.get("trust_remote_code")
            if isinstance(flag, ast.Constant) and flag.value is True:
                problems.append(f"{where}:{node.lineno}: trust_remote_code=True")
            if keywords.get("safe_serialization") is not None:
                problems.append(f"{where}:{node.lineno}: safe_serialization set (safetensors is the default)")
    assert problems == []


def test_saved_models_and_checkpoints_hold_weights_as_safetensors_only(tmp_path, tiny_model_dir):
    from ssft.config.recipe import ModelConfig, Recipe
    from ssft.models.cross import CrossEncoder

    assert Recipe().model.trust_remote_code is False
    for method, options in (("full", {}), ("lora", {"r": 2}), ("hidden_prefix", {"length": 2})):
        ranker = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), method, options)
        assert ranker.spec["trust_remote_code"] is False
        ranker.save(tmp_path / method)
        suffixes = {p.suffix for p in (tmp_path / method).rglob("*") if p.is_file()}
        assert ".safetensors" in suffixes and not suffixes & {".bin", ".pt", ".pth", ".pkl", ".ckpt"}, (method, suffixes)


def test_sweep_dry_run_tells_resumable_runs_apart(tmp_path, capsys):
    from ssft.cli.sweep import main
    from ssft.pipeline.sweep import expand, load_grid

    (tmp_path / "base.yaml").write_text("seed: 1\n")
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(f"recipe: base.yaml\noutput_root: {tmp_path / 'sweep'}\ngrid: {{seed: [1, 2, 3]}}\n")
    finished, resumable, fresh = expand(load_grid(grid_file))
    finished.run_dir.mkdir(parents=True)
    (finished.run_dir / "metrics.json").write_text("{}")
    (resumable.run_dir / "checkpoint-3").mkdir(parents=True)
    (resumable.run_dir / "checkpoint-3" / "ssft_checkpoint.json").write_text("{}")
    assert main([str(grid_file), "--dry-run"]) == 0
    states = [line.split("\t")[:2] for line in capsys.readouterr().out.splitlines()]
    assert states == [["finished", finished.name], ["resumable", resumable.name], ["to run", fresh.name]]


from tests.models.test_dense import wide_model_dir  # noqa: E402,F401  (fixture: a second, wider tiny tower)


@pytest.mark.parametrize("kill_step, bf16", [(10, False), (35, False), (10, True)])
def test_daft_run_killed_resumes_in_the_same_stage(tmp_path, tiny_model_dir, wide_model_dir,  # noqa: F811  (the fixture imported above)
                                                   synthetic_data, kill_step, bf16):
    """Heterogeneous dense model with DAFT (2 alignment checks, then 2 fine-tuning epochs): killed inside stage 1
    (step 10) or stage 2 (step 35), the same command resumes in that stage — document tower frozen or not, KL
    history and stopping state kept — and ends with the same metrics and stage changes. Also under bf16 training,
    where the frozen tower's kept vectors must not depend on the batch they were first computed in."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"model: {{architecture: dense, name: {tiny_model_dir}, document_name: {wide_model_dir}, "
        f"projection_dim: 16, max_length: 48}}\n"
        f"loss: contrastive\ndata: {{dataset: {synthetic_data}, num_negatives: 1, negatives_depth: 10}}\n"
        "eval: {depth: 10, metrics: [nDCG@10, R@100]}\n"
        "callbacks: [{name: daft, delta: 0.0, max_alignment_checks: 2, finetune_epochs: 2}]\n"
        "training: {per_device_train_batch_size: 4, learning_rate: 1.0e-3, num_train_epochs: 4, save_strategy: steps, "
        f"save_steps: 5, logging_steps: 5, bf16: {str(bf16).lower()}}}\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = run_cli("ssft.cli.train", [str(recipe), f"training.output_dir={straight}"], cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    argv = [str(recipe), f"training.output_dir={killed}"]
    _kill_at(argv, killed / f"checkpoint-{kill_step}" / "ssft_checkpoint.json", cwd)
    state = json.loads((killed / f"checkpoint-{kill_step}" / "daft_state.json").read_text())
    marker = json.loads((killed / f"checkpoint-{kill_step}" / "ssft_checkpoint.json").read_text())
    assert marker["mixed_precision"] == ("bf16" if bf16 else "no")  # what a resume with training.bf16: auto keeps
    assert state["stage"] == ("alignment" if kill_step == 10 else "fine-tuning")
    resumed = run_cli("ssft.cli.train", argv, cwd=cwd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((straight / "metrics.json").read_text()) == json.loads((killed / "metrics.json").read_text())
    daft_a, daft_b = (json.loads((p / "daft.json").read_text()) for p in (straight, killed))
    assert daft_a["stage_changes"] == daft_b["stage_changes"]
    assert [c["stage"] for c in daft_b["stage_changes"]] == ["alignment", "fine-tuning"]
    # the KL estimates agree to float rounding: the frozen tower's kept vectors were computed in other batches
    assert [h["step"] for h in daft_a["kl_history"]] == [h["step"] for h in daft_b["kl_history"]]
    assert [h["kl"] for h in daft_b["kl_history"]] == pytest.approx([h["kl"] for h in daft_a["kl_history"]], rel=1e-6)
