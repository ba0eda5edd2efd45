"""The bad-input matrix: output folders, locks and ssft-rerank's --output (issue 16). Case format: see
tests/bad_cases_base.py. Every case here must leave the folder it names exactly as it was."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from filelock import FileLock

from tests.bad_input_world import World, _other_recipe_checkpoints, _train

_HELD: list[FileLock] = []  # locks a case holds while its CLI runs (released when the next case starts)


def _manifest(folder: Path, tool: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".ssft-outputs.json").write_text(json.dumps({"tool": tool, "outputs": ["metrics.json"]}) + "\n")


def _hold_lock(folder: Path) -> None:
    """Another process is writing ``folder``: this (the test's) process holds its lock file."""
    for lock in _HELD:
        lock.release()
    _HELD.clear()
    lock = FileLock(str(folder / ".ssft.lock"), timeout=0)
    lock.acquire()
    _HELD.append(lock)


def _output_is_file(w: World) -> list[str]:
    w.out.parent.mkdir(parents=True, exist_ok=True)
    w.out.write_text("not a folder\n")
    return _train(w)


def _project_folder(w: World) -> list[str]:
    project = w.root / "project"
    project.mkdir()
    (project / "README.md").write_text("# my project\n")
    (project / "recipe.yaml").write_text("seed: 1\n")
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return _train(w, f"training.output_dir={project}")


def _foreign_file(w: World, *flags: str) -> list[str]:
    w.out.mkdir()
    (w.out / "notes.txt").write_text("mine\n")
    return _train(w, *flags)


def _run_folder_with_user_file_and_overwrite(w: World) -> list[str]:
    """A folder without a manifest that holds an ssft run plus a file ssft never writes: --overwrite is no licence
    to delete it."""
    w.out.mkdir()
    (w.out / "metrics.json").write_text("{}\n")
    (w.out / "thesis.tex").write_text("\\documentclass{article}\n")
    return _train(w, "--overwrite")


def _other_tool(w: World, tool: str, args) -> list[str]:
    _manifest(w.out, tool)
    (w.out / "metrics.json").write_text("{}\n")
    return args(w)


def _locked_run(w: World, args) -> list[str]:
    _manifest(w.out, "ssft-train" if args is _train else "ssft-rerank")
    _hold_lock(w.out)
    return args(w)


def _damaged_manifest(w: World, args) -> list[str]:
    w.out.mkdir()
    (w.out / ".ssft-outputs.json").write_text('{"tool": ')
    return args(w)


def _resume_changes_other_key(w: World) -> list[str]:
    argv = _other_recipe_checkpoints(w)  # checkpoints of the same recipe with another seed
    return argv + ["--resume-with-changes"]


def _rerank_onto_training_run(w: World, manifest: bool) -> list[str]:
    """--output is a finished training run's folder (with or without a manifest, i.e. written before manifests)."""
    shutil.copytree(w.ranker, w.out / "model")
    for name in ("metrics.json", "run_info.json"):
        (w.out / name).write_text("{}\n")
    (w.out / "recipe.yaml").write_text("seed: 1\n")
    if manifest:
        _manifest(w.out, "ssft-train")
    return w.rerank()


def _rerank_finished(w: World, *extra: str) -> list[str]:
    _manifest(w.out, "ssft-rerank")
    (w.out / "metrics.json").write_text('{"test": {}}\n')
    (w.out / "run.trec").write_text("q6 Q0 d5 1 2.0 ssft\n")
    return w.rerank(*extra)


def _rerank_output_is_file(w: World) -> list[str]:
    w.out.write_text("x\n")
    return w.rerank()


def _rerank_foreign(w: World) -> list[str]:
    w.out.mkdir()
    (w.out / "data.csv").write_text("a,b\n")
    return w.rerank("--overwrite")


CASES = [
    # ---- ssft-train: where it may write
    ("train-output-is-a-file", "ssft.train", _output_is_file, "is a file, not a folder"),
    ("train-output-project-folder", "ssft.train", _project_folder, "is not empty and is no ssft-train output folder"),
    ("train-output-dataset-folder", "ssft.train", lambda w: _train(w, f"training.output_dir={w.data}"),
     "is not empty and is no ssft-train output folder (it holds corpus.jsonl"),
    ("train-output-root", "ssft.train", lambda w: _train(w, "training.output_dir=/"), "training.output_dir: / is not empty"),
    ("train-output-foreign-file", "ssft.train", _foreign_file, "(it holds notes.txt)"),
    ("train-overwrite-foreign-file", "ssft.train", lambda w: _foreign_file(w, "--overwrite"),
     "--overwrite removes only what ssft wrote"),
    ("train-overwrite-run-with-user-file", "ssft.train", _run_folder_with_user_file_and_overwrite, "(it holds thesis.tex)"),
    ("train-output-of-rerank", "ssft.train", lambda w: _other_tool(w, "ssft-rerank", _train),
     "holds the outputs of ssft-rerank"),
    ("train-output-locked", "ssft.train", lambda w: _locked_run(w, _train), "in use by another ssft-train process"),
    ("train-output-damaged-manifest", "ssft.train", lambda w: _damaged_manifest(w, _train), "damaged ssft manifest"),
    ("train-output-unwritable", "ssft.train", lambda w: _train(w, "training.output_dir=/proc/ssft-out"),
     "training.output_dir: cannot write to /proc"),
    ("train-overwrite-and-resume-with-changes", "ssft.train", lambda w: _train(w, "--overwrite", "--resume-with-changes"),
     "pass one of them"),
    ("train-resume-with-changes-other-key", "ssft.train", _resume_changes_other_key,
     "checkpoints of a different recipe (seed differs)"),
    # ---- ssft-rerank --output
    ("rerank-output-is-a-file", "ssft.rerank", _rerank_output_is_file, "--output: "),
    ("rerank-output-finished", "ssft.rerank", _rerank_finished,
     "holds a finished ssft-rerank result (metrics.json); pass --overwrite"),
    ("rerank-output-training-run", "ssft.rerank", lambda w: _rerank_onto_training_run(w, manifest=True),
     "holds the outputs of ssft-train"),
    ("rerank-output-old-training-run", "ssft.rerank", lambda w: _rerank_onto_training_run(w, manifest=False),
     "is no ssft-rerank output folder"),
    ("rerank-output-foreign-overwrite", "ssft.rerank", _rerank_foreign, "(it holds data.csv)"),
    ("rerank-output-locked", "ssft.rerank", lambda w: _locked_run(w, lambda w: w.rerank()),
     "in use by another ssft-rerank process"),
    ("rerank-output-damaged-manifest", "ssft.rerank", lambda w: _damaged_manifest(w, lambda w: w.rerank()),
     "damaged ssft manifest"),
    ("rerank-batch-size-zero", "ssft.rerank", lambda w: w.rerank("--batch-size", "0"), "--batch-size must be >= 1"),
    ("rerank-precision-unknown", "ssft.rerank", lambda w: w.rerank("--precision", "fp16"),
     "--precision: expected one of auto, fp32, bf16, int8, got 'fp16'"),
    # ---- ssft-retrieve --output: the same rule
    ("retrieve-output-training-run", "ssft.retrieve", lambda w: (_rerank_onto_training_run(w, manifest=True), w.retrieve())[1],
     "holds the outputs of ssft-train"),
    ("retrieve-output-finished", "ssft.retrieve", lambda w: (_manifest(w.out, "ssft-retrieve"),
                                                            (w.out / "metrics.json").write_text("{}\n"), w.retrieve())[2],
     "holds a finished ssft-retrieve result (metrics.json); pass --overwrite"),
    ("retrieve-output-of-rerank", "ssft.retrieve", lambda w: _other_tool(w, "ssft-rerank", lambda w: w.retrieve("--overwrite")),
     "holds the outputs of ssft-rerank"),
    ("retrieve-batch-size-zero", "ssft.retrieve", lambda w: w.retrieve("--batch-size", "0"), "--batch-size must be >= 1"),
    ("rerank-output-unwritable", "ssft.rerank", lambda w: [*w.rerank()[:-3], "/proc/ssft-out", "--depth", "6"],
     "--output: cannot write to /proc"),
]
