"""A resume continues only what the checkpoints were made from: the checkpoint records the fingerprints of the base
model's files and of the data the run trains, validates and tests on, and every precision ``auto`` resolved to; a
resume over changed weights or data is refused (one line, --overwrite), a resume on a machine where ``auto`` resolves
otherwise keeps the checkpoint's precisions (validation history and best epoch as an uninterrupted run's), and a
checkpoint written before the record still resumes (not checked, and said so)."""
from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from pathlib import Path

import pytest

from ssft.config.recipe import recipe_from_dict
from ssft.core import precision
from ssft.core.errors import SsftError
from ssft.pipeline.run import run_recipe
from ssft.training import checkpoints
from ssft.training.checkpoints import CHECKPOINT_MARKER, latest_checkpoint, weights_fingerprint
from tests.helpers import save_tiny_bert


class Killed(Exception):
    """Stands in for a SIGKILL right after a checkpoint is complete (the process ends; the folder stays as it is)."""


@pytest.fixture
def model_dir(tmp_path) -> Path:
    return save_tiny_bert(tmp_path / "base", seed=0)  # this test's own: some tests re-save it


@pytest.fixture
def train_file(tmp_path, tiny_dataset) -> Path:
    path = tmp_path / "train.jsonl"
    rows = [("q1", "d1", "d2"), ("q2", "d2", "d3"), ("q3", "d3", "d4"), ("q4", "d4", "d5")]
    path.write_text("".join(json.dumps({"query_id": q, "positive_id": p, "negative_id": n}) + "\n" for q, p, n in rows))
    return path


def _recipe(model: Path, data: Path, out: Path, architecture: str = "cross", train: Path | None = None,
            eval_precision: str = "auto"):
    return recipe_from_dict({
        "model": {"architecture": architecture, "name": str(model), "max_length": 48},
        "adapter": {"method": "lora", "r": 4},
        "data": {"dataset": str(data), "num_negatives": 1, "negatives": "random",
                 **({"train": str(train)} if train is not None else {})},
        "eval": {"depth": 6, "precision": eval_precision},
        "training": {"output_dir": str(out), "num_train_epochs": 2, "per_device_train_batch_size": 2,
                     "learning_rate": 1e-3, "report_to": []},
    }, "r.yaml")


@contextmanager
def _native_bf16(monkeypatch, native: bool):
    """Where ``auto`` resolves to bf16 (native) or to fp32: the device this part of the test plays."""
    with monkeypatch.context() as m:
        m.setattr(precision, "cpu_bf16_native", lambda: native)
        yield


def _killed_after(recipe, step: int, monkeypatch) -> Path:
    """run_recipe, ended abruptly right after the checkpoint of ``step`` is complete; returns that checkpoint."""
    real = checkpoints.CheckpointedTrainer._save_checkpoint

    def save_then_die(self, model, trial):
        real(self, model, trial)
        if self.state.global_step >= step:
            raise Killed

    with monkeypatch.context() as m:
        m.setattr(checkpoints.CheckpointedTrainer, "_save_checkpoint", save_then_die)
        with pytest.raises(Killed):
            run_recipe(recipe)
    out = Path(recipe.training["output_dir"])
    assert not (out / "metrics.json").exists()
    return latest_checkpoint(out)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- changed weights or data: refused


def _resave_model(model_dir: Path, train_file: Path, dataset: Path) -> str:
    save_tiny_bert(model_dir, seed=1)  # other values, same files, same sizes
    return "model.name"


def _edit_train_file(model_dir: Path, train_file: Path, dataset: Path) -> str:
    lines = train_file.read_text().splitlines(keepends=True)
    train_file.write_text("".join(lines[:-1]) + lines[-1].replace('"d5"', '"d6"'))  # one negative changed
    return "data.train"


def _edit_corpus(model_dir: Path, train_file: Path, dataset: Path) -> str:
    corpus = dataset / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace("sleep duration and memory", "sleep duration and mood"))
    return "corpus"


@pytest.mark.parametrize("change", [_resave_model, _edit_train_file, _edit_corpus], ids=["model", "train", "corpus"])
def test_a_resume_over_changed_weights_or_data_is_refused(change, model_dir, train_file, tiny_dataset, tmp_path,
                                                          monkeypatch):
    """Killed after its first checkpoint; then the base model is re-saved at the same path with other values (same
    sizes), or a row of data.train or a document of the corpus changes: the same command is refused with one line
    naming what changed, before anything in the output folder is touched."""
    out = tmp_path / "run"
    recipe = _recipe(model_dir, tiny_dataset, out, train=train_file)
    checkpoint = _killed_after(recipe, 2, monkeypatch)
    marker = json.loads((checkpoint / CHECKPOINT_MARKER).read_text())
    assert marker["fingerprints"]["model.name"]["sha256"] == weights_fingerprint(str(model_dir))
    before = _tree(out)
    named = change(model_dir, train_file, tiny_dataset)
    with pytest.raises(SsftError) as err:
        run_recipe(_recipe(model_dir, tiny_dataset, out, train=train_file))
    message = str(err.value)
    assert "\n" not in message and named in message and "--overwrite" in message
    if named != "corpus":  # the path of the file or folder that changed
        assert str(model_dir if named == "model.name" else train_file) in message
    assert _tree(out) == before  # nothing written, nothing removed


def test_the_weights_fingerprint_reads_the_values_not_the_sizes(tmp_path):
    first = weights_fingerprint(str(save_tiny_bert(tmp_path / "m", seed=0)))
    assert weights_fingerprint(str(tmp_path / "m")) == first  # the same files: the same fingerprint
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "m").iterdir()}
    save_tiny_bert(tmp_path / "m", seed=1)
    assert {p.name: p.stat().st_size for p in (tmp_path / "m").iterdir()} == sizes
    assert weights_fingerprint(str(tmp_path / "m")) != first


def test_a_checkpoint_written_before_the_record_still_resumes(model_dir, tiny_dataset, tmp_path, monkeypatch, caplog):
    """A checkpoint of the previous code (its marker without fingerprints or inference precisions) resumes as before:
    the inputs are not checked, and the log says so."""
    out = tmp_path / "run"
    checkpoint = _killed_after(_recipe(model_dir, tiny_dataset, out), 2, monkeypatch)
    marker = json.loads((checkpoint / CHECKPOINT_MARKER).read_text())
    (checkpoint / CHECKPOINT_MARKER).write_text(json.dumps({k: marker[k] for k in ("global_step", "loss_sum",
                                                                                   "mixed_precision")}))
    with caplog.at_level(logging.WARNING):
        results = run_recipe(_recipe(model_dir, tiny_dataset, out))
    assert "test" in results and (out / "metrics.json").is_file()
    assert any("not checked" in r.getMessage() and "fingerprint" in r.getMessage() for r in caplog.records)
    assert json.loads((out / "run_info.json").read_text())["resumed_from"] == checkpoint.name


# ---------------------------------------------------------------- auto resolved elsewhere: pinned


@pytest.mark.parametrize("architecture", ["cross", "colbert"])
def test_a_resume_where_auto_resolves_otherwise_keeps_every_precision(architecture, model_dir, tiny_dataset, tmp_path,
                                                                      monkeypatch):
    """Trained and killed where ``auto`` resolves to bf16 (training and inference); resumed where it resolves to fp32:
    the resumed run validates, tests (and scores its start) in bf16 as the uninterrupted run did, so its validation
    history, best epoch and metrics are the uninterrupted run's, exactly."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    with _native_bf16(monkeypatch, True):
        run_recipe(_recipe(model_dir, tiny_dataset, straight, architecture))
        checkpoint = _killed_after(_recipe(model_dir, tiny_dataset, killed, architecture), 2, monkeypatch)
    marker = json.loads((checkpoint / CHECKPOINT_MARKER).read_text())
    assert marker["mixed_precision"] == "bf16" and marker["eval_precision"] == "bf16"

    resolved: list[str] = []
    real = precision.inference

    @contextmanager
    def watched(model, p):
        resolved.append(precision.resolve(p, "cpu"))
        with real(model, p) as running:
            yield running

    with _native_bf16(monkeypatch, False):
        assert precision.resolve("auto") == "fp32"  # this machine would have chosen fp32
        monkeypatch.setattr(precision, "inference", watched)
        run_recipe(_recipe(model_dir, tiny_dataset, killed, architecture))
    assert resolved and set(resolved) == {"bf16"}
    a, b = (json.loads((p / "run_info.json").read_text()) for p in (straight, killed))
    assert b["resumed_from"] == checkpoint.name
    assert (b["precision"], b["training_precision"]) == (a["precision"], a["training_precision"]) == ("bf16", "bf16")
    assert b["validation_history"] == a["validation_history"] and b["best_validation"] == a["best_validation"]
    assert json.loads((killed / "metrics.json").read_text()) == json.loads((straight / "metrics.json").read_text())
    assert any("kept from the checkpoint" in note and "eval.precision" in note for note in b["notes"])
