"""Output folders (issue 16): results under the right names, a user's files never touched, one writer at a time,
no folder that looks finished while it mixes two runs. (Refusals are cases of the bad-input matrix,
tests/bad_cases_output.py.)"""
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
    `first_stage.test` (its own metrics)."""
    first = _first_stage_named_test(tmp_path)
    out = tmp_path / "out"
    recipe = _recipe(tmp_path, tiny_model_dir, tiny_dataset, out, extra=f", first_stage: {first}")
    done = run_cli("ssft.train", [str(recipe)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    qrels = load_dataset(str(tiny_dataset)).qrels("test")
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"test", "first_stage.test"}
    assert metrics["first_stage.test"] == pytest.approx(evaluate_run(qrels, read_run(first), METRICS)[0])
    assert metrics["first_stage.test"]["RR@10"] == pytest.approx(1 / 6)  # the relevant document ranked last
    assert metrics["test"] == pytest.approx(evaluate_run(qrels, read_run(out / "run.test.trec"), METRICS)[0])
    assert (out / "run.first_stage.test.test.trec").is_file()

    rerank_out = tmp_path / "rerank"
    again = run_cli("ssft.rerank", [str(out), "--data", str(tiny_dataset), "--first-stage", str(first), "--split", "test",
                                    "--output", str(rerank_out), "--depth", "6", "--metrics", ",".join(METRICS)], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    reranked = json.loads((rerank_out / "metrics.json").read_text())
    assert set(reranked) == {"test", "first_stage.test"}
    assert reranked["test"] == pytest.approx(evaluate_run(qrels, read_run(rerank_out / "run.trec"), METRICS)[0])
    assert reranked["first_stage.test"] == metrics["first_stage.test"]


def test_overwrite_removes_only_what_ssft_wrote(tmp_path, tiny_dataset, tiny_model_dir):
    """A finished run, a file the user put beside its outputs: --overwrite trains again and keeps the file; the
    manifest names the tool and what it writes."""
    out = tmp_path / "out"
    recipe = _recipe(tmp_path, tiny_model_dir, tiny_dataset, out)
    assert run_cli("ssft.train", [str(recipe)], cwd=tmp_path).returncode == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["tool"] == "ssft-train" and "metrics.json" in manifest["outputs"]
    (out / "notes.txt").write_text("my notes\n")
    (out / "analysis").mkdir()
    (out / "analysis" / "plot.png").write_bytes(b"\x89PNG")
    before = (out / "metrics.json").stat().st_mtime_ns
    again = run_cli("ssft.train", [str(recipe), "--overwrite"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "notes.txt").read_text() == "my notes\n"
    assert (out / "analysis" / "plot.png").read_bytes() == b"\x89PNG"
    assert (out / "metrics.json").stat().st_mtime_ns != before
    refused = run_cli("ssft.train", [str(recipe)], cwd=tmp_path)  # finished: refused without --overwrite
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
    first = start_cli("ssft.train", [str(recipe)], cwd=tmp_path)
    deadline = time.time() + 120
    while not (out / ".ssft.lock").exists() and first.exitcode is None and time.time() < deadline:
        time.sleep(0.01)
    second = run_cli("ssft.train", [str(recipe)], cwd=tmp_path)
    first.join(300)
    assert first.exitcode == 0
    if (out / "metrics.json").is_file() and "holds a finished run" in second.stderr:
        pytest.skip("the first run finished before the second started")  # a very fast machine
    assert second.returncode == 2, second.stderr[-2000:]
    assert "in use by another ssft-train process" in second.stderr.strip().splitlines()[-1]


def test_an_interrupted_rerank_leaves_no_finished_looking_folder(tmp_path, tiny_dataset, tiny_model_dir, monkeypatch):
    """ssft-rerank --overwrite onto an earlier result, interrupted after writing its run files: the old
    metrics.json is gone (it would describe another model's run); the next --overwrite finishes."""
    import ssft.eval.rerank
    import ssft.rerank

    out = tmp_path / "out"
    recipe = _recipe(tmp_path, tiny_model_dir, tiny_dataset, out)
    assert run_cli("ssft.train", [str(recipe)], cwd=tmp_path).returncode == 0
    rerank_out = tmp_path / "rerank"
    argv = [str(out), "--data", str(tiny_dataset), "--first-stage", "bm25", "--split", "test", "--output", str(rerank_out),
            "--depth", "6"]
    assert ssft.rerank.main(argv) == 0
    assert (rerank_out / "metrics.json").is_file()
    real = ssft.eval.rerank.rerank_and_report

    def interrupted(**kwargs):
        real(**kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(ssft.eval.rerank, "rerank_and_report", interrupted)
    assert ssft.rerank.main([*argv, "--overwrite"]) == 130
    assert not (rerank_out / "metrics.json").exists()
    assert (rerank_out / "run.test.trec").is_file()  # the new run, unfinished
    monkeypatch.setattr(ssft.eval.rerank, "rerank_and_report", real)
    assert ssft.rerank.main(argv) == 0  # unfinished: no --overwrite needed
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
    from tests.test_reliability import _kill_at

    data = write_synthetic_beir(tmp_path / "beir", queries=60, docs=80)
    out = tmp_path / "out"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {{name: {tiny_model_dir}, max_length: 48, head_learning_rate: null}}\n"
                      f"adapter: {{method: lora, r: 4}}\ndata: {{dataset: {data}, num_negatives: 2, negatives_depth: 10}}\n"
                      f"eval: {{depth: 10}}\ntraining: {{output_dir: {out}, per_device_train_batch_size: 2, max_steps: 40, "
                      f"learning_rate: 1.0e-3, save_strategy: steps, save_steps: 5, logging_steps: 1}}\n")
    _kill_at([str(recipe)], out / "checkpoint-5" / "ssft_checkpoint.json", cwd=tmp_path)
    lower = [str(recipe), "training.learning_rate=1e-4"]
    refused = run_cli("ssft.train", lower, cwd=tmp_path)
    assert refused.returncode == 2 and "--resume-with-changes" in refused.stderr.strip().splitlines()[-1]
    done = run_cli("ssft.train", [*lower, "--resume-with-changes"], cwd=tmp_path)
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
