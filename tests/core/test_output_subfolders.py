"""--overwrite never removes a file a user put inside one of a command's own folders (an export's ``1_Pooling/`` or
``openvino/``, a run's ``model/``): the manifest records every file a finished output holds, and a file it does not
record is refused in one line before anything is removed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import ssft
from ssft.config.recipe import ModelConfig
from ssft.core.errors import SsftError
from ssft.core.run_folder import MANIFEST
from ssft.models.dense import DenseDualEncoder


@pytest.fixture
def saved_dense(tmp_path, tiny_model_dir) -> Path:
    folder = tmp_path / "dense"
    DenseDualEncoder.build(ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=48), "full",
                           {}).save(folder)
    return folder


def test_export_overwrite_refuses_a_users_file_inside_the_exports_folders(saved_dense, tmp_path):
    out = tmp_path / "export"
    ssft.export(saved_dense, out)
    inner = next(p for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))  # e.g. 1_Pooling/
    manifest = json.loads((out / MANIFEST).read_text())
    assert f"{inner.name}/" + next(inner.iterdir()).name in manifest["files"]
    mine = inner / "openvino_model_qint8_quantized.xml"  # what sentence-transformers' own quantisation adds
    mine.write_text("<net/>")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    with pytest.raises(SsftError) as err:
        ssft.export(saved_dense, out, overwrite=True)
    assert "openvino_model_qint8_quantized.xml" in str(err.value) and "\n" not in str(err.value)
    assert mine.read_text() == "<net/>"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dense", "export"]  # no build folder left beside it
    mine.unlink()  # moved away: the export is replaced
    ssft.export(saved_dense, out, overwrite=True)
    assert (out / "modules.json").is_file()


def test_train_overwrite_refuses_a_users_file_inside_model(tmp_path, tiny_dataset, tiny_model_dir):
    recipe = {"model": {"name": str(tiny_model_dir), "max_length": 48}, "adapter": {"method": "lora", "r": 4},
              "data": {"dataset": str(tiny_dataset), "num_negatives": 2, "negatives_depth": 6, "negatives": "random"},
              "eval": {"depth": 6, "start": False},
              "training": {"output_dir": str(tmp_path / "run"), "num_train_epochs": 1,
                           "per_device_train_batch_size": 2}}
    run = ssft.train(recipe)
    mine = run.output_dir / "model" / "my_quantised.xml"
    mine.write_text("<net/>")
    metrics = (run.output_dir / "metrics.json").read_bytes()
    with pytest.raises(SsftError, match="my_quantised.xml"):
        ssft.train(recipe, overwrite=True)
    assert mine.read_text() == "<net/>" and (run.output_dir / "metrics.json").read_bytes() == metrics
    mine.unlink()
    again = ssft.train(recipe, overwrite=True)
    assert "test" in again.metrics


def _killed_while_building(model: str, out: str) -> None:
    """ssft-export killed (SIGKILL) once its export is built, before it is put in place (a spawned process)."""
    import os
    import signal

    from ssft.pipeline import export as pipeline_export

    real = pipeline_export.export_model

    def build_then_die(ranker, folder, fmt):
        real(ranker, folder, fmt)
        os.kill(os.getpid(), signal.SIGKILL)

    pipeline_export.export_model = build_then_die
    pipeline_export.export_run(model, out)


def test_a_killed_exports_build_folder_is_removed_by_the_next_export(saved_dense, tmp_path):
    """An export killed while it builds leaves its hidden build folder beside the output; the next export into that
    output, holding its lock, removes it."""
    import multiprocessing
    import signal

    out = tmp_path / "export"
    child = multiprocessing.get_context("spawn").Process(target=_killed_while_building, args=(str(saved_dense), str(out)))
    child.start()
    child.join(300)
    assert child.exitcode == -signal.SIGKILL
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".export.")]
    assert left, sorted(p.name for p in tmp_path.iterdir())  # the build folder the kill left behind
    ssft.export(saved_dense, out)
    assert (out / "modules.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dense", "export"]
