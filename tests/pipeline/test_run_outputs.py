"""What a finished run leaves in its folder: curves.png (the training loss and every validation measure against
epoch, the start as epoch 0, the selected epoch marked), file names that say each row once, no lock file; a sweep's
table figure; run files of earlier versions still read by --first-stage."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ssft.analysis.figures import run_curves, run_curves_figure, sweep_table_figure
from ssft.core.output_names import first_stage_row, per_query_file, run_file
from ssft.core.run_folder import LOCK, OutputFolder
from tests.cli_runner import run_cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _recipe(tmp_path: Path, model: Path, data: Path, out: Path) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(f"model: {{name: {model}, max_length: 48}}\nadapter: {{method: lora, r: 4}}\n"
                    f"data: {{dataset: {data}, num_negatives: 2, negatives_depth: 6, negatives: random}}\n"
                    f"eval: {{depth: 6, metrics: [nDCG@10, RR@10], interpolation: 0.5}}\n"
                    f"training: {{output_dir: {out}, num_train_epochs: 2, per_device_train_batch_size: 2, "
                    f"logging_steps: 1}}\n")
    return path


@pytest.fixture
def finished_run(tmp_path, tiny_dataset, tiny_model_dir) -> Path:
    out = tmp_path / "out"
    done = run_cli("ssft.cli.train", [str(_recipe(tmp_path, tiny_model_dir, tiny_dataset, out))], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_a_finished_run_draws_its_curves_and_leaves_no_lock(finished_run):
    out = finished_run
    png = (out / "curves.png").read_bytes()
    assert png[:8] == PNG_SIGNATURE
    from PIL import Image

    with Image.open(out / "curves.png") as image:
        image.verify()
        assert image.size[0] > 600 and image.size[1] > 250
    assert not (out / LOCK).exists()  # removed when the run finished
    info = json.loads((out / "run_info.json").read_text())
    # 4 training queries, batches of 2: 2 steps an epoch, the loss logged every step; validation: start + 2 epochs
    curves = run_curves(info)
    assert [e for e, _ in curves.loss] == [0.5, 1.0, 1.5, 2.0]
    assert set(curves.validation) == {"nDCG@10", "RR@10"}
    assert all([e for e, _ in points] == [0.0, 1.0, 2.0] for points in curves.validation.values())
    assert curves.selected == [info["best_validation"]["epoch"]] and curves.selection_metric == "nDCG@10"
    fig = run_curves_figure(curves)
    lines = {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}
    assert len(lines["training loss"].get_xdata()) == 4
    assert list(lines["nDCG@10"].get_xdata()) == [0.0, 1.0, 2.0] and len(lines["RR@10"].get_ydata()) == 3
    assert [label for label in lines if label.startswith("selected: epoch")]  # the star on the selected epoch


def test_run_files_say_each_row_once_and_rerank_reads_them_back(finished_run, tmp_path, tiny_dataset):
    out = finished_run
    names = sorted(p.name for p in out.glob("run.*.trec")) + sorted(p.name for p in out.glob("per_query.*.tsv"))
    assert names == ["run.bm25.test.trec", "run.test+bm25.trec", "run.test.trec",
                     "per_query.bm25.test.tsv", "per_query.test+bm25.tsv", "per_query.test.tsv"]
    metrics = json.loads((out / "metrics.json").read_text())
    # the first stage's own file, and the same run under the doubled name earlier versions wrote
    old = tmp_path / "earlier" / "run.run.bm25.test.test.trec"
    old.parent.mkdir()
    shutil.copy(out / "run.bm25.test.trec", old)
    for first_stage in (out / "run.bm25.test.trec", old):
        rerank_out = tmp_path / f"rerank-{first_stage.parent.name}"
        done = run_cli("ssft.cli.rerank", [str(out), "--data", str(tiny_dataset), "--first-stage", str(first_stage),
                                           "--split", "test", "--output", str(rerank_out), "--depth", "6",
                                           "--metrics", "nDCG@10,RR@10"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        again = json.loads((rerank_out / "metrics.json").read_text())
        assert set(again) == {"test", "bm25"} and again["bm25"] == pytest.approx(metrics["bm25"])
        written = sorted(p.name for p in rerank_out.iterdir() if not p.name.startswith("."))
        assert written == ["metrics.json", "per_query.bm25.test.tsv", "per_query.test.tsv", "run.bm25.test.trec",
                           "run.trec"]
        assert not (rerank_out / LOCK).exists()


@pytest.mark.parametrize("name, row", [
    ("bm25", "bm25"), ("run.bm25.test", "bm25"), ("run.run.bm25.test.test", "bm25"), ("bm25.test", "bm25"),
    ("run.bm25.dev", "bm25.dev"), ("run", "first_stage"), ("run.test", "first_stage"), ("test", "first_stage"),
    ("test+bm25", "first_stage.test+bm25"), ("my-run", "my-run")])
def test_first_stage_rows_drop_what_the_file_names_repeat(name, row):
    assert first_stage_row(name, "test") == row


def test_file_names_put_the_split_once():
    assert [run_file(r, "test") for r in ("test", "bm25", "test+bm25", "start", "test+bm25.fusion")] == \
        ["run.test.trec", "run.bm25.test.trec", "run.test+bm25.trec", "run.start.test.trec", "run.test+bm25.fusion.trec"]
    assert per_query_file("bm25", "dev") == "per_query.bm25.dev.tsv" and per_query_file("dev", "dev") == "per_query.dev.tsv"


def test_release_removes_the_lock_and_a_second_writer_is_still_refused(tmp_path):
    from ssft.core.errors import SsftError

    first = OutputFolder(tmp_path / "out", "ssft-rerank", ("metrics.json",), ("metrics.json",))
    first.claim()
    second = OutputFolder(tmp_path / "out", "ssft-rerank", ("metrics.json",), ("metrics.json",))
    with pytest.raises(SsftError, match="in use by another ssft-rerank process"):
        second.check()
    with pytest.raises(SsftError, match="in use by another ssft-rerank process"):
        second.claim()
    assert (tmp_path / "out" / LOCK).exists()  # the first one's, left in place by the refused second
    first.release()
    assert not (tmp_path / "out" / LOCK).exists()
    second.claim()  # free again
    assert (tmp_path / "out" / LOCK).exists()
    second.release()
    assert not (tmp_path / "out" / LOCK).exists()


def test_a_stale_lock_file_of_a_killed_process_does_not_block_and_goes(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text("")  # left by a process that was killed: no one holds it
    folder = OutputFolder(out, "ssft-rerank", ("metrics.json",), ("metrics.json",))
    folder.check()
    folder.claim()
    folder.release()
    assert not (out / LOCK).exists()


def test_a_sweep_writes_its_table_figure(tmp_path):
    from ssft.pipeline.sweep import load_grid, run_sweep
    from tests.pipeline.test_sweep import FakeTrain, write_grid

    grid = load_grid(write_grid(tmp_path))
    rows = run_sweep(grid, FakeTrain(fail=("full",)))  # the runs of one variant fail: not drawn
    ok = [r for r in rows if r["status"] == "ok"]
    assert 0 < len(ok) < len(rows)
    png = grid.output_root / "results.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE and not (grid.output_root / LOCK).exists()
    fig = sweep_table_figure(ok)
    bars = [patch for patch in fig.axes[0].patches]
    assert len(bars) == len(ok)  # one row of metrics.json per run here: one bar each
