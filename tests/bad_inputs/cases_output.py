"""The bad-input matrix: output folders, locks and ssft-rerank's --output; the same output-folder
contract for ssft-export, ssft-mine, ssft-encode, ssft-ambiguity and ssft-sweep: never the source (the run, its
model/, a parent holding it, the dataset), never what another tool or a user wrote, one writer at a time. Case
format: see tests/bad_inputs/cases_base.py. Every case here must leave the folder it names exactly as it was (and the
matrix checks that nothing else on disk changed)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from filelock import FileLock

from tests.bad_inputs.cases_encode import _dense_ranker
from tests.bad_inputs.world import World, _other_recipe_checkpoints, _train

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


# ---------------------------------------------------------------- the contract for every command that writes


def _run_folder(w: World, where: Path | None = None) -> Path:
    """A finished ssft-train run folder (model/, metrics.json, run_info.json, recipe.yaml, its manifest)."""
    run = where or w.root / "run"
    shutil.copytree(w.ranker, run / "model")
    (run / "metrics.json").write_text('{"test": {"nDCG@10": 0.5}}\n')
    (run / "run_info.json").write_text("{}\n")
    (run / "recipe.yaml").write_text("seed: 1\n")
    _manifest(run, "ssft-train")
    return run


def _unfinished_run(w: World, locked: bool = False) -> Path:
    """A training folder killed (or still running: ``locked``) before it saved model/: checkpoints, no model."""
    run = w.root / "killed"
    (run / "checkpoint-4").mkdir(parents=True)
    (run / "checkpoint-4" / "ssft_checkpoint.json").write_text('{"global_step": 4, "loss_sum": 1.0}\n')
    (run / "recipe.yaml").write_text("seed: 1\n")
    _manifest(run, "ssft-train")
    if locked:
        _hold_lock(run)
    return run


def _export(run: str | Path, output: str | Path, *extra: str) -> list[str]:
    return [str(run), "--output", str(output), *extra]


def _export_onto_run(w: World) -> list[str]:
    run = _run_folder(w)
    return _export(run, run, "--overwrite")


def _export_onto_its_model(w: World) -> list[str]:
    run = _run_folder(w)
    return _export(run, run / "model", "--overwrite")


def _export_model_onto_its_run(w: World) -> list[str]:
    """The model folder given, its run folder (whose metrics and recipe go into the card) as --output."""
    run = _run_folder(w)
    return _export(run / "model", run, "--overwrite")


def _export_onto_a_parent(w: World) -> list[str]:
    """A folder holding the run, a sibling run and a user's notes."""
    project = w.root / "project"
    run = _run_folder(w, project / "run-a")
    _run_folder(w, project / "run-b")
    (project / "notes.md").write_text("# what I tried\n")
    return _export(run, project, "--overwrite")


def _export_into_the_run(w: World) -> list[str]:
    run = _run_folder(w)
    return _export(run, run / "export")


def _export_onto_a_train_run(w: World) -> list[str]:
    _run_folder(w, w.out)
    return _export(w.ranker, w.out, "--overwrite")


def _user_folder(w: World, folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "thesis.tex").write_text("\\documentclass{article}\n")
    return folder


def _export_through_a_link(w: World, target: str) -> list[str]:
    """--output is a symbolic link: to a user's folder (followed: its content refuses it), to the run being exported
    (followed: the source is refused), or to nothing."""
    run = _run_folder(w)
    to = {"user": lambda: _user_folder(w, w.root / "elsewhere"), "run": lambda: run,
          "nothing": lambda: w.root / "gone"}[target]()
    w.out.symlink_to(to, target_is_directory=True)
    return _export(run, w.out, "--overwrite")


def _earlier_export(w: World, locked: bool = False) -> list[str]:
    w.out.mkdir()
    (w.out / ".ssft-outputs.json").write_text(json.dumps({"tool": "ssft-export", "outputs": ["config.json"]}) + "\n")
    (w.out / "config.json").write_text("{}\n")
    if locked:
        _hold_lock(w.out)
    return _export(w.ranker, w.out, *([] if not locked else ["--overwrite"]))


def _rerank_into_the_run(w: World) -> list[str]:
    run = _run_folder(w)
    return w.rerank(run_dir=run)[:-3] + [str(run / "rerank"), "--depth", "6"]


def _rerank_overwrite_holding_the_first_stage(w: World) -> list[str]:
    """An earlier ssft-rerank result that also holds the first-stage file named like one of its outputs
    (run.bm25.trec): --overwrite would clear it."""
    _manifest(w.out, "ssft-rerank")
    (w.out / "metrics.json").write_text("{}\n")
    first = w.out / "run.bm25.trec"
    first.write_text("q6 Q0 d5 1 2.0 bm25\nq5 Q0 d6 1 1.5 bm25\n")
    return w.rerank("--overwrite", first_stage=str(first))


def _retrieve_into_its_index(w: World) -> list[str]:
    index = w.root / "index"
    _manifest(index, "ssft-encode")
    return [str(_dense_ranker(w)), "--data", str(w.data), "--split", "test", "--output", str(index),
            "--index-dir", str(index), "--overwrite"]


def _mine(w: World, output: Path, *extra: str) -> list[str]:
    return ["--data", str(w.data), "--bm25", "--output", str(output), *extra]


def _mine_over(w: World, files: dict[str, str]) -> list[str]:
    """ssft-mine --overwrite onto out/mined.jsonl when out/ holds ``files`` (none written by ssft-mine)."""
    w.out.mkdir()
    for name, text in files.items():
        (w.out / name).write_text(text)
    return _mine(w, w.out / "mined.jsonl", "--overwrite")


def _mine_locked(w: World) -> list[str]:
    w.out.mkdir()
    for lock in _HELD:
        lock.release()
    _HELD.clear()
    lock = FileLock(str(w.out / ".mined.jsonl.ssft.lock"), timeout=0)
    lock.acquire()
    _HELD.append(lock)
    return _mine(w, w.out / "mined.jsonl")


LABELS_HEADER = "query_id\ttext\twords\tlemma\tsenses\tconfidence\tlabel\n"  # what ssft-ambiguity writes


def _ambiguity(w: World, out: Path, *extra: str, content: str | None = None) -> list[str]:
    if content is not None:
        out.write_text(content)
    return ["--data", str(w.data), "--split", "test", "--output", str(out), *extra]


def _encode(w: World, output: Path, model: Path | None = None) -> list[str]:
    return [str(model or _dense_ranker(w)), "--data", str(w.data), "--output", str(output)]


def _encode_into_its_run(w: World) -> list[str]:
    run = w.root / "dense-run"
    shutil.copytree(_dense_ranker(w), run / "model")
    (run / "recipe.yaml").write_text("seed: 1\n")
    return _encode(w, run / "index", run)


def _encode_locked(w: World) -> list[str]:
    _manifest(w.out, "ssft-encode")
    (w.out / "encode.json").write_text("{}\n")
    _hold_lock(w.out)
    return _encode(w, w.out)


def _encode_through_a_link(w: World) -> list[str]:
    w.out.symlink_to(_user_folder(w, w.root / "elsewhere"), target_is_directory=True)
    return _encode(w, w.out)


def _sweep(w: World, root: Path | str, extra: str = "") -> list[str]:
    w.recipe()
    return [str(w.file("grid.yaml", f"recipe: recipe.yaml\noutput_root: {root}\ngrid: {{seed: [1]}}\n{extra}"))]


def _sweep_locked(w: World) -> list[str]:
    _manifest(w.out, "ssft-sweep")
    (w.out / "runs").mkdir()
    _hold_lock(w.out)
    return _sweep(w, w.out)


CONTRACT_CASES = [
    # ---- ssft-export: never the run being exported, a folder around it or inside it, '.', '' or '..'
    ("export-overwrite-onto-the-run", "ssft.cli.export", _export_onto_run, "is the run folder being exported"),
    ("export-overwrite-onto-its-model", "ssft.cli.export", _export_onto_its_model, "is the model folder being exported"),
    ("export-model-overwrite-onto-its-run", "ssft.cli.export", _export_model_onto_its_run,
     "is the run folder being exported"),
    ("export-overwrite-onto-a-parent", "ssft.cli.export", _export_onto_a_parent, "holds the run folder being exported"),
    ("export-into-the-run", "ssft.cli.export", _export_into_the_run, "lies inside the run folder being exported"),
    ("export-overwrite-dot", "ssft.cli.export", lambda w: _export(w.ranker, ".", "--overwrite"),
     "--output: . is the current folder"),
    ("export-overwrite-empty", "ssft.cli.export", lambda w: _export(w.ranker, "", "--overwrite"), "an empty path"),
    ("export-overwrite-dotdot", "ssft.cli.export", lambda w: _export(w.ranker, "..", "--overwrite"), "--output: .. holds"),
    ("export-overwrite-root", "ssft.cli.export", lambda w: _export(w.ranker, "/", "--overwrite"), "--output: / holds"),
    ("export-overwrite-user-folder", "ssft.cli.export", lambda w: (_user_folder(w, w.out), _export(w.ranker, w.out,
                                                                                                   "--overwrite"))[1],
     "is not empty and holds no ssft-export output (it holds thesis.tex)"),
    ("export-overwrite-dataset", "ssft.cli.export", lambda w: _export(w.ranker, w.data, "--overwrite"),
     "holds no ssft-export output (it holds corpus.jsonl"),
    ("export-overwrite-train-run", "ssft.cli.export", _export_onto_a_train_run, "holds the outputs of ssft-train"),
    ("export-earlier-without-overwrite", "ssft.cli.export", _earlier_export, "not empty; pass --overwrite"),
    ("export-output-locked", "ssft.cli.export", lambda w: _earlier_export(w, locked=True),
     "in use by another ssft-export process"),
    ("export-output-link-to-user-folder", "ssft.cli.export", lambda w: _export_through_a_link(w, "user"),
     "holds no ssft-export output (it holds thesis.tex)"),
    ("export-output-link-to-the-run", "ssft.cli.export", lambda w: _export_through_a_link(w, "run"),
     "is the run folder being exported"),
    ("export-output-dangling-link", "ssft.cli.export", lambda w: _export_through_a_link(w, "nothing"),
     "is a symbolic link to"),
    ("export-unfinished-run", "ssft.cli.export", lambda w: _export(_unfinished_run(w), w.out),
     "unfinished ssft-train run (checkpoints but no model/): it stopped before the end (killed or failed); run the "
     "same ssft-train command again"),
    ("export-run-still-training", "ssft.cli.export", lambda w: _export(_unfinished_run(w, locked=True), w.out),
     "ssft-train is still training in"),
    # ---- ssft-rerank / ssft-retrieve / ssft-encode: an unfinished run, and never into what they read
    ("rerank-run-still-training", "ssft.cli.rerank", lambda w: w.rerank(run_dir=_unfinished_run(w, locked=True)),
     "ssft-train is still training in"),
    ("encode-unfinished-run", "ssft.cli.encode", lambda w: _encode(w, w.out, _unfinished_run(w)),
     "run the same ssft-train command again"),
    ("rerank-output-inside-the-run", "ssft.cli.rerank", _rerank_into_the_run, "lies inside the run folder being read"),
    ("rerank-output-inside-the-dataset", "ssft.cli.rerank", lambda w: w.rerank()[:-3] + [str(w.data / "rerank"), "--depth", "6"],
     "lies inside the dataset folder being read"),
    ("rerank-overwrite-holding-the-first-stage", "ssft.cli.rerank", _rerank_overwrite_holding_the_first_stage,
     "holds the first-stage run file being read"),
    ("retrieve-output-is-its-index", "ssft.cli.retrieve", _retrieve_into_its_index, "is the index folder being read"),
    ("rerank-output-empty", "ssft.cli.rerank", lambda w: w.rerank()[:-3] + ["", "--depth", "6"], "an empty path"),
    # ---- ssft-mine: never into the dataset being mined, never a file it did not write
    ("mine-overwrite-a-dataset-file", "ssft.cli.mine", lambda w: _mine(w, w.data / "queries.jsonl", "--overwrite"),
     "lies inside the dataset folder being mined"),
    ("mine-output-inside-the-dataset", "ssft.cli.mine", lambda w: _mine(w, w.data / "mined.jsonl"),
     "lies inside the dataset folder being mined"),
    ("mine-overwrite-a-user-file", "ssft.cli.mine", lambda w: _mine_over(w, {"mined.jsonl": '{"mine": 1}\n'}),
     "mined.jsonl exists and ssft-mine did not write it (no mined.mining.json beside it)"),
    ("mine-overwrite-a-user-info-file", "ssft.cli.mine",
     lambda w: _mine_over(w, {"mined.jsonl": "{}\n", "mined.mining.json": '{"notes": "mine"}\n'}),
     "mined.mining.json does not name ssft-mine"),
    ("mine-output-locked", "ssft.cli.mine", _mine_locked, "is being written by another ssft-mine process"),
    ("mine-output-is-a-folder", "ssft.cli.mine", lambda w: (w.out.mkdir(), (w.out / "x.jsonl").mkdir(),
                                                          _mine(w, w.out / "x.jsonl"))[2], "is a folder, not a file"),
    # ---- ssft-ambiguity --output: never a file it did not write, never inside the dataset
    ("ambiguity-out-over-a-user-file", "ssft.cli.ambiguity",
     lambda w: _ambiguity(w, w.root / "labels.tsv", "--overwrite", content="my,own,table\n"),
     "labels.tsv exists and ssft-ambiguity did not write it"),
    ("ambiguity-out-inside-the-dataset", "ssft.cli.ambiguity",
     lambda w: _ambiguity(w, w.data / "qrels" / "test.tsv", "--overwrite"), "lies inside the dataset folder being classified"),
    ("ambiguity-out-earlier-without-overwrite", "ssft.cli.ambiguity",
     lambda w: _ambiguity(w, w.root / "labels.tsv", content=LABELS_HEADER + "q1\tx\t1\tx\t2\t\tambiguous\n"),
     "labels.tsv exists; pass --overwrite"),
    # ---- ssft-encode --output: the folder rule, a lock
    ("encode-output-train-run", "ssft.cli.encode", lambda w: (_run_folder(w, w.out), _encode(w, w.out))[1],
     "holds the outputs of ssft-train"),
    ("encode-output-inside-the-dataset", "ssft.cli.encode", lambda w: _encode(w, w.data / "index"),
     "lies inside the dataset folder being encoded"),
    ("encode-output-inside-its-run", "ssft.cli.encode", _encode_into_its_run, "lies inside the run folder being read"),
    ("encode-output-locked", "ssft.cli.encode", _encode_locked, "in use by another ssft-encode process"),
    ("encode-output-link-to-user-folder", "ssft.cli.encode", _encode_through_a_link,
     "is not empty and holds no ssft-encode output (it holds thesis.tex)"),
    # ---- ssft-sweep: its output root and results file
    ("sweep-root-is-the-dataset", "ssft.cli.sweep", lambda w: _sweep(w, w.data), "is the dataset folder the sweep trains on"),
    ("sweep-root-user-folder", "ssft.cli.sweep", lambda w: (_user_folder(w, w.out), _sweep(w, w.out))[1],
     "holds no ssft-sweep output (it holds thesis.tex)"),
    ("sweep-results-user-file", "ssft.cli.sweep",
     lambda w: (w.file("table.csv", "a,b\n1,2\n"), _sweep(w, w.out, f"results: {w.root / 'table.csv'}\n"))[1],
     "table.csv exists and is no ssft-sweep results file"),
    ("sweep-root-locked", "ssft.cli.sweep", _sweep_locked, "in use by another ssft-sweep process"),
]

CASES = [
    # ---- ssft-train: where it may write
    ("train-output-is-a-file", "ssft.cli.train", _output_is_file, "is a file, not a folder"),
    ("train-output-project-folder", "ssft.cli.train", _project_folder, "is not empty and holds no ssft-train output"),
    ("train-output-inside-the-dataset", "ssft.cli.train", lambda w: _train(w, f"training.output_dir={w.data / 'runs' / 'a'}"),
     "lies inside the dataset folder the run trains on"),
    ("train-output-inside-the-model", "ssft.cli.train", lambda w: _train(w, f"training.output_dir={w.model / 'run'}"),
     "lies inside the model folder (model.name)"),
    ("train-output-holds-the-train-file", "ssft.cli.train",
     lambda w: _train(w, f"data.train={w.file('rows/train.jsonl', '{}')}", f"training.output_dir={w.root / 'rows'}"),
     "holds data.train"),
    ("train-output-dataset-folder", "ssft.cli.train", lambda w: _train(w, f"training.output_dir={w.data}"),
     "is the dataset folder the run trains on"),
    ("train-output-root", "ssft.cli.train", lambda w: _train(w, "training.output_dir=/"),
     "training.output_dir: / holds the dataset"),
    ("train-output-foreign-file", "ssft.cli.train", _foreign_file, "(it holds notes.txt)"),
    ("train-overwrite-foreign-file", "ssft.cli.train", lambda w: _foreign_file(w, "--overwrite"),
     "--overwrite removes only what ssft wrote"),
    ("train-overwrite-run-with-user-file", "ssft.cli.train", _run_folder_with_user_file_and_overwrite, "(it holds thesis.tex)"),
    ("train-output-of-rerank", "ssft.cli.train", lambda w: _other_tool(w, "ssft-rerank", _train),
     "holds the outputs of ssft-rerank"),
    ("train-output-locked", "ssft.cli.train", lambda w: _locked_run(w, _train), "in use by another ssft-train process"),
    ("train-output-damaged-manifest", "ssft.cli.train", lambda w: _damaged_manifest(w, _train), "damaged ssft manifest"),
    ("train-output-unwritable", "ssft.cli.train", lambda w: _train(w, "training.output_dir=/proc/ssft-out"),
     "training.output_dir: cannot write to /proc"),
    ("train-overwrite-and-resume-with-changes", "ssft.cli.train", lambda w: _train(w, "--overwrite", "--resume-with-changes"),
     "pass one of them"),
    ("train-resume-with-changes-other-key", "ssft.cli.train", _resume_changes_other_key,
     "checkpoints of a different recipe (seed differs)"),
    # ---- ssft-rerank --output
    ("rerank-output-is-a-file", "ssft.cli.rerank", _rerank_output_is_file, "--output: "),
    ("rerank-output-finished", "ssft.cli.rerank", _rerank_finished,
     "holds a finished ssft-rerank result (metrics.json), so it is not empty; pass --overwrite"),
    ("rerank-output-training-run", "ssft.cli.rerank", lambda w: _rerank_onto_training_run(w, manifest=True),
     "holds the outputs of ssft-train"),
    ("rerank-output-old-training-run", "ssft.cli.rerank", lambda w: _rerank_onto_training_run(w, manifest=False),
     "is not empty and holds no ssft-rerank output"),
    ("rerank-output-foreign-overwrite", "ssft.cli.rerank", _rerank_foreign, "(it holds data.csv)"),
    ("rerank-output-locked", "ssft.cli.rerank", lambda w: _locked_run(w, lambda w: w.rerank()),
     "in use by another ssft-rerank process"),
    ("rerank-output-damaged-manifest", "ssft.cli.rerank", lambda w: _damaged_manifest(w, lambda w: w.rerank()),
     "damaged ssft manifest"),
    ("rerank-batch-size-zero", "ssft.cli.rerank", lambda w: w.rerank("--batch-size", "0"), "--batch-size must be >= 1"),
    ("rerank-precision-unknown", "ssft.cli.rerank", lambda w: w.rerank("--precision", "fp16"),
     "--precision: expected one of auto, fp32, bf16, int8, got 'fp16'"),
    # ---- ssft-retrieve --output: the same rule
    ("retrieve-output-training-run", "ssft.cli.retrieve", lambda w: (_rerank_onto_training_run(w, manifest=True),
     w.retrieve())[1],
     "holds the outputs of ssft-train"),
    ("retrieve-output-finished", "ssft.cli.retrieve", lambda w: (_manifest(w.out, "ssft-retrieve"),
                                                            (w.out / "metrics.json").write_text("{}\n"), w.retrieve())[2],
     "holds a finished ssft-retrieve result (metrics.json), so it is not empty; pass --overwrite"),
    ("retrieve-output-of-rerank", "ssft.cli.retrieve", lambda w: _other_tool(w, "ssft-rerank",
     lambda w: w.retrieve("--overwrite")),
     "holds the outputs of ssft-rerank"),
    ("retrieve-batch-size-zero", "ssft.cli.retrieve", lambda w: w.retrieve("--batch-size", "0"), "--batch-size must be >= 1"),
    ("rerank-output-unwritable", "ssft.cli.rerank", lambda w: [*w.rerank()[:-3], "/proc/ssft-out", "--depth", "6"],
     "--output: cannot write to /proc"),
    *CONTRACT_CASES,
]
