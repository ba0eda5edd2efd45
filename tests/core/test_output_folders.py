"""Output folders: results under the right names, a user's files never touched, one writer at a time,
no folder that looks finished while it mixes two runs. (Refusals are cases of the bad-input matrix,
tests/bad_inputs/cases_output.py.)"""
from __future__ import annotations

import errno
import json
import time
from pathlib import Path

import pytest

from ssft.core.errors import cli_entry
from ssft.core.run_folder import MANIFEST, TRAIN_MARKERS, TRAIN_OUTPUTS, OutputFolder
from ssft.data.beir import load_dataset
from ssft.data.trec import read_run
from ssft.eval.metrics import evaluate_run
from tests.cli_runner import run_cli, start_cli

METRICS = ["nDCG@10", "RR@10"]


def _recipe(tmp_path: Path, model: Path, data: Path, out: Path, extra: str = "") -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(f"model: {{name: {model}, max_length: 48}}\nadapter: {{method: lora, r: 4}}\n"
                    f"data: {{dataset: {data}, num_negatives: 2, negatives_depth: 6, negatives: random}}\n"
                    f"eval: {{depth: 6, metrics: [nDCG@10, RR@10]{extra}}}\n"
                    f"training: {{output_dir: {out}, num_train_epochs: 1, per_device_train_batch_size: 2}}\n")
    return path


def _first_stage_named_test(tmp_path: Path) -> Path:
    """A first-stage run file called test.trec that ranks the relevant documents last (so its metrics differ
    from any reranker's)."""
    path = tmp_path / "runs" / "test.trec"
    path.parent.mkdir()
    rows = []
    for qid, relevant in (("q6", "d5"), ("q5", "d6")):
        others = [d for d in ("d1", "d2", "d3", "d4", "d5", "d6") if d != relevant]
        for rank, doc in enumerate([*others, relevant], 1):
            rows.append(f"{qid} Q0 {doc} {rank} {10 - rank} bm25")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_first_stage_named_like_the_split_keeps_the_model_row(tmp_path, tiny_dataset, tiny_model_dir):
    """`eval.first_stage: test.trec` on split test, then `ssft-rerank --first-stage test.trec --split test`: the
    model's row stays under `test` (scored from the model's own run file) and the first stage's is
    `first_stage` (its own metrics)."""
    first = _first_stage_named_test(tmp_path)
    out = tmp_path / "out"
    recipe = _recipe(tmp_path, tiny_model_dir, tiny_dataset, out, extra=f", first_stage: {first}")
    done = run_cli("ssft.cli.train", [str(recipe)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    qrels = load_dataset(str(tiny_dataset)).qrels("test")
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"test", "first_stage"}
    assert metrics["first_stage"] == pytest.approx(evaluate_run(qrels, read_run(first), METRICS)[0])
    assert metrics["first_stage"]["RR@10"] == pytest.approx(1 / 6)  # the relevant document ranked last
    assert metrics["test"] == pytest.approx(evaluate_run(qrels, read_run(out / "run.test.trec"), METRICS)[0])
    assert (out / "run.first_stage.test.trec").is_file()

    rerank_out = tmp_path / "rerank"
    again = run_cli("ssft.cli.rerank", [str(out), "--data", str(tiny_dataset), "--first-stage", str(first), "--split", "test",
                                    "--output", str(rerank_out), "--depth", "6", "--metrics", ",".join(METRICS)], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    reranked = json.loads((rerank_out / "metrics.json").read_text())
    assert set(reranked) == {"test", "first_stage"}
    assert reranked["test"] == pytest.approx(evaluate_run(qrels, read_run(rerank_out / "run.trec"), METRICS)[0])
    assert reranked["first_stage"] == metrics["first_stage"]


def test_overwrite_removes_only_what_ssft_wrote(tmp_path, tiny_dataset, tiny_model_dir):
    """A finished run, a file the user put beside its outputs: --overwrite trains again and keeps the file; the
    manifest names the tool and what it writes."""
    out = tmp_path / "out"
    recipe = _recipe(tmp_path, tiny_model_dir, tiny_dataset, out)
    assert run_cli("ssft.cli.train", [str(recipe)], cwd=tmp_path).returncode == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["tool"] == "ssft-train" and "metrics.json" in manifest["outputs"]
    (out / "notes.txt").write_text("my notes\n")
    (out / "analysis").mkdir()
    (out / "analysis" / "plot.png").write_bytes(b"\x89PNG")
    before = (out / "metrics.json").stat().st_mtime_ns
    again = run_cli("ssft.cli.train", [str(recipe), "--overwrite"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "notes.txt").read_text() == "my notes\n"
    assert (out / "analysis" / "plot.png").read_bytes() == b"\x89PNG"
    assert (out / "metrics.json").stat().st_mtime_ns != before
    refused = run_cli("ssft.cli.train", [str(recipe)], cwd=tmp_path)  # finished: refused without --overwrite
    assert refused.returncode == 2 and "holds a finished run" in refused.stderr


def test_clear_keeps_a_user_logs_folder_when_the_user_chose_tensorboards_folder(tmp_path):
    """logs/ is ssft's only when ssft chose it as TensorBoard's folder."""
    folder = OutputFolder(tmp_path, "ssft-train", tuple(o for o in TRAIN_OUTPUTS if o != "logs"), TRAIN_MARKERS)
    for name in ("metrics.json", "run.test.trec", "logs", "checkpoint-3", ".model.abc12"):
        (tmp_path / name).mkdir() if "." not in name or name.startswith(".model") else (tmp_path / name).write_text("x")
    assert sorted(folder.clear()) == [".model.abc12", "checkpoint-3", "metrics.json", "run.test.trec"]
    assert (tmp_path / "logs").is_dir()


def test_two_trainings_on_one_folder_the_second_is_refused(tmp_path, tiny_dataset, tiny_model_dir):
    out = tmp_path / "out"
    recipe = _recipe(tmp_path, tiny_model_dir, tiny_dataset, out)
    first = start_cli("ssft.cli.train", [str(recipe)], cwd=tmp_path)
    deadline = time.time() + 120
    while not (out / ".ssft.lock").exists() and first.exitcode is None and time.time() < deadline:
        time.sleep(0.01)
    second = run_cli("ssft.cli.train", [str(recipe)], cwd=tmp_path)
    first.join(300)
    assert first.exitcode == 0
    if (out / "metrics.json").is_file() and "holds a finished run" in second.stderr:
        pytest.skip("the first run finished before the second started")  # a very fast machine
    assert second.returncode == 2, second.stderr[-2000:]
    assert "in use by another ssft-train process" in second.stderr.strip().splitlines()[-1]


def test_an_interrupted_rerank_leaves_no_finished_looking_folder(tmp_path, tiny_dataset, tiny_model_dir, monkeypatch):
    """ssft-rerank --overwrite onto an earlier result, interrupted after writing its run files: the old
    metrics.json is gone (it would describe another model's run); the next --overwrite finishes."""
    import ssft.cli.rerank
    import ssft.eval.rerank

    out = tmp_path / "out"
    recipe = _recipe(tmp_path, tiny_model_dir, tiny_dataset, out)
    assert run_cli("ssft.cli.train", [str(recipe)], cwd=tmp_path).returncode == 0
    rerank_out = tmp_path / "rerank"
    argv = [str(out), "--data", str(tiny_dataset), "--first-stage", "bm25", "--split", "test", "--output", str(rerank_out),
            "--depth", "6"]
    assert ssft.cli.rerank.main(argv) == 0
    assert (rerank_out / "metrics.json").is_file()
    real = ssft.eval.rerank.rerank_and_report

    def interrupted(**kwargs):
        real(**kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(ssft.eval.rerank, "rerank_and_report", interrupted)
    assert ssft.cli.rerank.main([*argv, "--overwrite"]) == 130
    assert not (rerank_out / "metrics.json").exists()
    assert (rerank_out / "run.test.trec").is_file()  # the new run, unfinished
    monkeypatch.setattr(ssft.eval.rerank, "rerank_and_report", real)
    assert ssft.cli.rerank.main(argv) == 0  # unfinished: no --overwrite needed
    assert (rerank_out / "metrics.json").is_file()


def test_a_failed_system_call_is_one_line(capsys):
    @cli_entry("ssft-x")
    def main(argv=None):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/out/run.test.trec")

    assert main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ssft-x: error: /data/out/run.test.trec: No space left on device"]


def test_resume_with_changes_continues_with_the_new_learning_rate(tmp_path, tiny_model_dir):
    """After a stop (here a kill at a checkpoint), a lower learning rate is refused as a changed recipe unless
    --resume-with-changes; with it, training continues from the checkpoint at the new rate: the Trainer's own log
    shows the old rate up to the resumed step and the new one after it."""
    from tests.helpers import write_synthetic_beir
    from tests.training.test_reliability import _kill_at

    data = write_synthetic_beir(tmp_path / "beir", queries=60, docs=80)
    out = tmp_path / "out"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {{name: {tiny_model_dir}, max_length: 48, head_learning_rate: null}}\n"
                      f"adapter: {{method: lora, r: 4}}\ndata: {{dataset: {data}, num_negatives: 2, negatives_depth: 10}}\n"
                      f"eval: {{depth: 10}}\ntraining: {{output_dir: {out}, per_device_train_batch_size: 2, max_steps: 40, "
                      f"learning_rate: 1.0e-3, save_strategy: steps, save_steps: 5, logging_steps: 1}}\n")
    _kill_at([str(recipe)], out / "checkpoint-5" / "ssft_checkpoint.json", cwd=tmp_path)
    lower = [str(recipe), "training.learning_rate=1e-4"]
    refused = run_cli("ssft.cli.train", lower, cwd=tmp_path)
    assert refused.returncode == 2 and "--resume-with-changes" in refused.stderr.strip().splitlines()[-1]
    done = run_cli("ssft.cli.train", [*lower, "--resume-with-changes"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads((out / "run_info.json").read_text())
    assert info["resumed_with_changes"] == ["training.learning_rate"]
    resumed_at = int(info["resumed_from"].split("-")[1])
    history = json.loads((out / "checkpoint-40" / "trainer_state.json").read_text())["log_history"]
    rates = {row["step"]: row["learning_rate"] for row in history if "learning_rate" in row}
    before = [rate / (1 - (step - 1) / 40) for step, rate in rates.items() if step <= resumed_at]
    after = [rate / (1 - (step - 1) / 40) for step, rate in rates.items() if step > resumed_at]
    assert before and after
    assert all(rate == pytest.approx(1e-3, rel=0.05) for rate in before), before
    assert all(rate == pytest.approx(1e-4, rel=0.05) for rate in after), after


# ---------------------------------------------------------------- ssft-export under the same contract


@pytest.fixture
def saved_run(tmp_path, tiny_model_dir) -> Path:
    """A finished run folder: model/ (a tiny full cross-encoder), metrics.json, recipe.yaml."""
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    run = tmp_path / "run"
    CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "full", {}).save(run / "model")
    (run / "metrics.json").write_text(json.dumps({"test": {"nDCG@10": 0.5, "RR@10": 0.25}}))
    (run / "recipe.yaml").write_text("data: {dataset: nfcorpus, test_split: test}\n")
    return run


def test_two_exports_into_one_new_folder_the_second_is_refused(saved_run, tmp_path, monkeypatch):
    """Two ssft-export into one new folder at once, neither with --overwrite: while the first builds its export, the
    second is refused in one line (the folder is created and locked first); only the first's export is there."""
    from ssft.core.errors import SsftError
    from ssft.pipeline import export as pipeline_export

    out = tmp_path / "export"
    real, calls, second = pipeline_export.export_model, [], []

    def first_then_a_second(ranker, folder, fmt):
        calls.append(folder)
        if len(calls) == 1:  # the second export starts while the first is writing its temporary folder
            try:
                second.append(pipeline_export.export_run(saved_run, out))
            except SsftError as err:
                second.append(err)
        return real(ranker, folder, fmt)

    monkeypatch.setattr(pipeline_export, "export_model", first_then_a_second)
    info = pipeline_export.export_run(saved_run, out)
    assert isinstance(second[0], SsftError), second
    assert "in use by another ssft-export process" in str(second[0]) and "\n" not in str(second[0])
    assert info["format"] == "cross-encoder" and (out / "model.safetensors").is_file()
    assert json.loads((out / MANIFEST).read_text())["tool"] == "ssft-export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "run"]  # no temporary folder left beside it


def test_an_export_refused_while_another_process_holds_the_new_folder(saved_run, tmp_path):
    """The same, across processes: another ssft-export created the folder and holds its lock (here: this test)."""
    from filelock import FileLock

    out = tmp_path / "export"
    out.mkdir()
    lock = FileLock(str(out / ".ssft.lock"), timeout=0)
    lock.acquire()
    try:
        done = run_cli("ssft.cli.export", [str(saved_run), "--output", str(out)], cwd=tmp_path)
    finally:
        lock.release()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "in use by another ssft-export process" in done.stderr.strip().splitlines()[-1]
    assert sorted(p.name for p in out.iterdir()) == [".ssft.lock"]


def test_export_overwrite_replaces_only_what_ssft_export_wrote(saved_run, tmp_path):
    """An earlier export, a user's notes and a folder beside its files, a file the earlier export listed but the new
    one does not write: --overwrite replaces the export, removes that stale file, keeps the user's entries (with
    their modes), and the folder's manifest names what ssft-export wrote."""
    from ssft.pipeline.export import export_run

    out = tmp_path / "export"
    export_run(saved_run, out)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["tool"] == "ssft-export" and {"model.safetensors", "README.md", "config.json"} <= set(manifest["outputs"])
    (out / "notes.txt").write_text("my notes\n")
    (out / "notes.txt").chmod(0o600)
    (out / "analysis").mkdir()
    (out / "analysis" / "plot.png").write_bytes(b"\x89PNG")
    (out / "stale.bin").write_bytes(b"old")  # written by an earlier export (listed in its manifest)
    (out / MANIFEST).write_text(json.dumps({**manifest, "outputs": [*manifest["outputs"], "stale.bin"]}))
    weights = (out / "model.safetensors").stat().st_ino
    export_run(saved_run, out, overwrite=True)
    assert (out / "notes.txt").read_text() == "my notes\n" and (out / "notes.txt").stat().st_mode & 0o777 == 0o600
    assert (out / "analysis" / "plot.png").read_bytes() == b"\x89PNG"
    assert not (out / "stale.bin").exists()
    assert (out / "model.safetensors").stat().st_ino != weights  # the new export's file
    outputs = json.loads((out / MANIFEST).read_text())["outputs"]
    assert "notes.txt" not in outputs and "analysis" not in outputs and "stale.bin" not in outputs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "run"]
    # the user's entries stay through a third export too: they are never taken for the export's
    export_run(saved_run, out, overwrite=True)
    assert (out / "notes.txt").read_text() == "my notes\n"


def test_export_through_a_symbolic_link_follows_it(saved_run, tmp_path):
    """--output a link to an (empty) folder: the export is written into the folder it points to; the link stays."""
    from ssft.pipeline.export import export_run

    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    export_run(saved_run, link)
    assert link.is_symlink() and (real / "model.safetensors").is_file()
    export_run(saved_run, link, overwrite=True)  # and again, replacing it
    assert link.is_symlink() and (link / "model.safetensors").is_file()


def test_export_of_a_run_whose_metrics_hold_strings(saved_run, tmp_path):
    """A hand-edited metrics.json with values that are not numbers: the export goes ahead, the card keeps the numbers
    (a traceback before)."""
    from huggingface_hub import ModelCard

    from ssft.pipeline.export import export_run

    (saved_run / "metrics.json").write_text(json.dumps({"model": "oops", "test": {"nDCG@10": "x", "RR@10": 0.25},
                                                        "bm25": {"nDCG@10": None, "R@100": True}}))
    export_run(saved_run, tmp_path / "export")
    card = ModelCard.load(tmp_path / "export" / "README.md")
    assert [(r.metric_type, r.metric_value) for r in card.data.eval_results] == [("RR@10", 0.25)]
    assert "| test | this model | 0.2500 |" in card.text


def test_mine_overwrite_replaces_only_its_own_pair(tmp_path, capsys):
    """ssft-mine --overwrite replaces a pair it wrote (its lock file gone afterwards); one whose .mining.json is a
    user's file is refused, and the files stay as they were."""
    from ssft.cli.mine import main
    from tests.helpers import write_synthetic_beir

    data = write_synthetic_beir(tmp_path / "syn")
    out = tmp_path / "mined" / "neg.jsonl"
    argv = ["--data", str(data), "--bm25", "--output", str(out), "--depth", "20"]
    assert main(argv) == 0
    assert main([*argv, "--overwrite"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["neg.jsonl", "neg.mining.json"]  # no lock file left
    assert json.loads(out.with_suffix(".mining.json").read_text())["tool"] == "ssft-mine"
    capsys.readouterr()
    out.with_suffix(".mining.json").write_text('{"my": "notes"}\n')
    before = out.read_bytes()
    assert main([*argv, "--overwrite"]) == 2
    assert "neg.mining.json does not name ssft-mine" in capsys.readouterr().err
    assert out.read_bytes() == before and out.with_suffix(".mining.json").read_text() == '{"my": "notes"}\n'
