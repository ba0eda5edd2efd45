"""The bad-input matrix: every case runs a real CLI (ssft-train, ssft-rerank, ssft-sweep) as its own process on
tiny fixtures and must end in a one-line ``<prog>: error: ...`` naming the culprit, exit code 2, no traceback, and
nothing written outside the output folder (the working directory, the inputs, the cache and $HOME are compared
before and after). Most cases fork from a preloaded process (tests/cli_runner.py); those marked ``real`` start
``python -m`` for real."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_runner import run_cli

PROGS = {"ssft.train": "ssft-train", "ssft.rerank": "ssft-rerank", "ssft.sweep": "ssft-sweep"}


@pytest.fixture(scope="module")
def saved_ranker(tiny_model_dir, tmp_path_factory) -> Path:
    """A saved LoRA cross-encoder folder on the tiny BERT (untrained: the rerank cases only need one to load)."""
    from ssft.models.cross import CrossEncoder
    from ssft.recipe import ModelConfig

    path = tmp_path_factory.mktemp("ranker") / "model"
    CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 4}).save(path)
    return path


@dataclass
class World:
    root: Path
    cwd: Path  # the CLI's working directory: must stay empty
    data: Path  # tiny BEIR folder (a case may damage it)
    model: Path  # tiny BERT folder
    ranker: Path  # a copy of a saved ranker folder (a case may damage it)
    out: Path  # the output folder of the run

    def recipe(self, extra: str = "", name: str = "recipe.yaml") -> Path:
        """A recipe that trains fine (a case breaks one thing in it or in its inputs)."""
        path = self.root / name
        path.write_text(f"model: {{name: {self.model}, max_length: 48}}\nadapter: {{method: lora, r: 4}}\n"
                        f"data: {{dataset: {self.data}, num_negatives: 2, negatives_depth: 6}}\neval: {{depth: 6}}\n"
                        f"training: {{output_dir: {self.out}, num_train_epochs: 1, per_device_train_batch_size: 2}}\n" + extra)
        return path

    def file(self, name: str, content: str | bytes) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return path

    def run_file(self, rows: list[str]) -> Path:
        return self.file("first.trec", "".join(r + "\n" for r in rows))

    def rerank(self, *extra: str, run_dir: Path | None = None, first_stage: str = "bm25") -> list[str]:
        args = [str(run_dir or self.ranker), "--data", str(self.data), "--first-stage", first_stage, "--split", "test",
                "--output", str(self.out), "--depth", "6"]
        return args + list(extra)

    def grid(self, text: str) -> Path:
        return self.file("grid.yaml", text.replace("OUT", str(self.out)))


def _train(w: World, *overrides: str, extra: str = "") -> list[str]:
    return [str(w.recipe(extra)), *overrides]


def _finished_run(w: World) -> list[str]:
    w.out.mkdir()
    (w.out / "metrics.json").write_text("{}\n")
    return _train(w)


def _other_recipe_checkpoints(w: World) -> list[str]:
    import yaml

    from ssft.recipe import load_recipe

    recipe = w.recipe()
    (w.out / "checkpoint-4").mkdir(parents=True)
    (w.out / "checkpoint-4" / "ssft_checkpoint.json").write_text('{"global_step": 4, "loss_sum": 1.0}\n')
    (w.out / "recipe.yaml").write_text(yaml.safe_dump(load_recipe(recipe, ["seed=7"]).to_dict(), sort_keys=False))
    return [str(recipe)]


def _corrupt_checkpoint(w: World) -> list[str]:
    import yaml

    from ssft.recipe import load_recipe

    recipe = w.recipe()
    checkpoint = w.out / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    shutil.copytree(w.ranker, checkpoint / "ranker")
    _truncate(checkpoint / "ranker" / "adapter" / "adapter_model.safetensors")
    (checkpoint / "ssft_checkpoint.json").write_text('{"global_step": 4, "loss_sum": 1.0}\n')
    (w.out / "recipe.yaml").write_text(yaml.safe_dump(load_recipe(recipe).to_dict(), sort_keys=False))
    return [str(recipe)]


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _model_without_config(w: World) -> list[str]:
    (w.root / "empty-model").mkdir()
    return _train(w, f"model.name={w.root / 'empty-model'}")


def _corrupt_base_model(w: World) -> list[str]:
    broken = w.root / "broken-model"
    shutil.copytree(w.model, broken)
    _truncate(broken / "model.safetensors")
    return _train(w, f"model.name={broken}")


def _append(path: Path, text: str) -> None:
    with open(path, "a", newline="") as fh:
        fh.write(text)


def _bad_corpus(w: World) -> list[str]:
    _append(w.data / "corpus.jsonl", '{"_id": "d7", "text": \n')
    return _train(w)


def _truncated_qrels(w: World) -> list[str]:
    _append(w.data / "qrels" / "train.tsv", "q5\td")
    return _train(w)


def _qrels_bad_score(w: World) -> list[str]:
    _append(w.data / "qrels" / "train.tsv", "q5\td6\tyes\r\n")
    return _train(w)


def _rerank_no_model(w: World) -> list[str]:
    run = w.root / "killed-run"
    (run / "checkpoint-2").mkdir(parents=True)
    return w.rerank(run_dir=run)


def _rerank_corrupt_weights(w: World) -> list[str]:
    _truncate(w.ranker / "ranker.safetensors")
    return w.rerank()


def _rerank_spec(w: World, text: str) -> list[str]:
    (w.ranker / "ssft_model.json").write_text(text)
    return w.rerank()


def _rerank_no_adapter(w: World) -> list[str]:
    shutil.rmtree(w.ranker / "adapter")
    return w.rerank()


RUN_ROWS_OK = ["q6 Q0 d5 1 2.0 bm25", "q5 Q0 d6 1 1.5 bm25"]

# (id, CLI module, argv builder, culprit the message must name[, real interpreter])
CASES = [
    # ---- ssft-train: the recipe file and overrides
    ("train-recipe-missing", "ssft.train", lambda w: [str(w.root / "nope.yaml")], "recipe file not found"),
    ("train-recipe-is-a-list", "ssft.train", lambda w: [str(w.file("list.yaml", "- model\n- data\n"))],
     "a recipe must be a mapping of sections, got list", "real"),
    ("train-recipe-malformed", "ssft.train", lambda w: [str(w.file("bad.yaml", "model: [\n"))], "malformed YAML"),
    ("train-recipe-not-utf8", "ssft.train", lambda w: [str(w.file("bin.yaml", b"\xff\xfe\x00model"))], "not a UTF-8 text file"),
    ("train-unknown-section", "ssft.train", lambda w: _train(w, extra="modle: {name: x}\n"), "unknown section 'modle'"),
    ("train-unknown-model-key", "ssft.train", lambda w: _train(w, "model.nmae=x"), "unknown key 'nmae'"),
    ("train-seed-not-int", "ssft.train", lambda w: _train(w, "seed=abc"), "seed: expected an integer"),
    ("train-override-no-equals", "ssft.train", lambda w: _train(w, "training.learning_rate"), "expected key=value"),
    ("train-override-empty-key", "ssft.train", lambda w: _train(w, "=3"), "empty key"),
    ("train-override-into-value", "ssft.train", lambda w: _train(w, "model.name.x=1"), "'model.name' is not a section"),
    ("train-unknown-training-key", "ssft.train", lambda w: _train(w, "training.learnig_rate=1"), "training.learnig_rate"),
    ("train-training-wrong-type", "ssft.train", lambda w: _train(w, "training.learning_rate=fast"), "training.learning_rate: expected a number"),
    ("train-training-bad-value", "ssft.train", lambda w: _train(w, "training.lr_scheduler_type=bogus"), "training:"),
    ("train-unknown-method", "ssft.train", lambda w: _train(w, "adapter.method=lorra"), "unknown fine-tuning method 'lorra'"),
    ("train-unknown-adapter-option", "ssft.train", lambda w: _train(w, "adapter.rank=4"), "unknown option 'rank'"),
    ("train-unknown-loss", "ssft.train", lambda w: _train(w, "loss=hinge"), "unknown loss 'hinge'"),
    ("train-unknown-metric", "ssft.train", lambda w: _train(w, "eval.metrics=[nDCG@x]"), "unknown metric 'nDCG@x'"),
    ("train-hybrid-with-epochs", "ssft.train",
     lambda w: _train(w, "adapter={method: hybrid, first: hidden_prefix, second: lora}"), "training.num_train_epochs"),
    ("train-semi-siamese-on-cross", "ssft.train", lambda w: _train(w, "adapter.method=ss_lora"), "needs a bi-encoder"),
    # ---- model names and folders
    ("train-model-unknown-offline", "ssft.train", lambda w: _train(w, "model.name=nobody/no-such-model"),
     "model 'nobody/no-such-model' not found"),
    ("train-model-folder-missing", "ssft.train", lambda w: _train(w, f"model.name={w.root / 'gone'}"), "not found"),
    ("train-model-without-config", "ssft.train", _model_without_config, "has no config.json"),
    ("train-model-corrupt-weights", "ssft.train", _corrupt_base_model, "could not be loaded"),
    # ---- dataset files
    ("train-dataset-missing", "ssft.train", lambda w: _train(w, f"data.dataset={w.root / 'nodata'}"), "not found"),
    ("train-corpus-bad-json", "ssft.train", _bad_corpus, "corpus.jsonl:7: invalid JSON"),
    ("train-qrels-truncated", "ssft.train", _truncated_qrels, "train.tsv:6: expected 'query-id<TAB>corpus-id<TAB>score'"),
    ("train-qrels-bad-score", "ssft.train", _qrels_bad_score, "train.tsv:6: score 'yes' is not a number"),
    ("train-split-missing", "ssft.train", lambda w: _train(w, "data.test_split=heldout"), "no split 'heldout'"),
    # ---- run files
    ("train-run-file-missing", "ssft.train", lambda w: _train(w, f"eval.first_stage={w.root / 'none.trec'}"), "run file not found"),
    ("train-run-file-bad-score", "ssft.train",
     lambda w: _train(w, f"eval.first_stage={w.run_file(['q6 Q0 d5 1 high bm25'])}"), "first.trec:1: score 'high' is not a number"),
    ("train-run-file-columns", "ssft.train",
     lambda w: _train(w, f"eval.first_stage={w.run_file([RUN_ROWS_OK[0], 'q5 d6 1.5'])}"), "first.trec:2: expected 6 columns"),
    # ---- output folders and checkpoints
    ("train-finished-run", "ssft.train", _finished_run, "holds a finished run (metrics.json); pass --overwrite"),
    ("train-checkpoints-other-recipe", "ssft.train", _other_recipe_checkpoints, "checkpoints of a different recipe (seed differs)"),
    ("train-checkpoint-corrupt", "ssft.train", _corrupt_checkpoint, "checkpoint-4/ranker: the saved model cannot be loaded"),
    # ---- command line
    ("train-no-arguments", "ssft.train", lambda w: [], "required: recipe"),
    ("train-unknown-flag", "ssft.train", lambda w: _train(w, "--bogus"), "unrecognized arguments: --bogus"),
    # ---- ssft-rerank
    ("rerank-run-folder-missing", "ssft.rerank", lambda w: w.rerank(run_dir=w.root / "no-run"), "run folder not found"),
    ("rerank-run-without-model", "ssft.rerank", _rerank_no_model, "no trained model"),
    ("rerank-corrupt-weights", "ssft.rerank", _rerank_corrupt_weights, "the saved model cannot be loaded"),
    ("rerank-spec-not-json", "ssft.rerank", lambda w: _rerank_spec(w, "{architecture: cross"), "ssft_model.json: invalid JSON"),
    ("rerank-spec-unknown-architecture", "ssft.rerank",
     lambda w: _rerank_spec(w, json.dumps({"architecture": "tower", "base_model": "x", "method": "lora"})),
     "unknown model architecture 'tower'"),
    ("rerank-adapter-missing", "ssft.rerank", _rerank_no_adapter, "no adapter/ or backbone/ folder"),
    ("rerank-unknown-metric", "ssft.rerank", lambda w: w.rerank("--metrics", "nDCG@10,MAP@x"), "unknown metric 'MAP@x'"),
    ("rerank-run-file-bad-score", "ssft.rerank",
     lambda w: w.rerank(first_stage=str(w.run_file([RUN_ROWS_OK[0], "q5 Q0 d6 2 n/a bm25"]))), "first.trec:2: score 'n/a' is not a number"),
    ("rerank-split-missing", "ssft.rerank", lambda w: [a if a != "test" else "heldout" for a in w.rerank()], "no split 'heldout'"),
    ("rerank-depth-zero", "ssft.rerank", lambda w: w.rerank("--depth", "0"), "--depth must be >= 1"),
    ("rerank-missing-data-flag", "ssft.rerank", lambda w: [str(w.ranker), "--split", "test", "--first-stage", "bm25",
                                                           "--output", str(w.out)], "required: --data", "real"),
    # ---- ssft-sweep
    ("sweep-grid-missing", "ssft.sweep", lambda w: [str(w.root / "grid.yaml")], "grid file not found"),
    ("sweep-grid-is-a-list", "ssft.sweep", lambda w: [str(w.grid("- recipe.yaml\n"))], "expected a mapping"),
    ("sweep-unknown-key", "ssft.sweep", lambda w: [str(w.grid("recipe: recipe.yaml\noutput_root: OUT\ngird: {}\n"))], "unknown key 'gird'"),
    ("sweep-value-not-a-list", "ssft.sweep",
     lambda w: (w.recipe(), [str(w.grid("recipe: recipe.yaml\noutput_root: OUT\ngrid: {seed: 1}\n"))])[1],
     "grid.seed: expected a non-empty list"),
    ("sweep-base-recipe-missing", "ssft.sweep",
     lambda w: [str(w.grid("recipe: missing.yaml\noutput_root: OUT\n"))], "base recipe not found", "real"),
    ("sweep-bad-grid-value", "ssft.sweep",
     lambda w: (w.recipe(), [str(w.grid("recipe: recipe.yaml\noutput_root: OUT\ngrid: {adapter.method: [lora, lorra]}\n"))])[1],
     "unknown fine-tuning method 'lorra'"),
    ("sweep-folds-k", "ssft.sweep",
     lambda w: (w.recipe(), [str(w.grid("recipe: recipe.yaml\noutput_root: OUT\nfolds: {k: 2}\n"))])[1], "folds.k: must be"),
]


def _snapshot(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` except ``skip`` and below: relative path -> (size, mtime_ns)."""
    found = {}
    for path in root.rglob("*"):
        if path == skip or skip in path.parents:
            continue
        stat = path.lstat()
        found[str(path.relative_to(root))] = (stat.st_size if path.is_file() else 0, stat.st_mtime_ns)
    return found


def test_matrix_is_large_enough():
    assert len(CASES) >= 30
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(case, tmp_path, tiny_dataset, tiny_model_dir, saved_ranker):
    name, module, build, culprit = case[:4]
    real = len(case) > 4 and case[4] == "real"
    root = tmp_path / "world"
    root.mkdir()
    world = World(root=root, cwd=root / "cwd", data=root / "data", model=tiny_model_dir, ranker=root / "ranker",
                  out=root / "out")
    world.cwd.mkdir()
    (root / "home").mkdir()
    (root / "cache").mkdir()
    shutil.copytree(tiny_dataset, world.data)
    shutil.copytree(saved_ranker, world.ranker)
    argv = build(world)
    before = _snapshot(root, world.out)
    out_before = _snapshot(world.out, world.out / "-") if world.out.exists() else None
    env = {"HOME": root / "home", "SSFT_CACHE": root / "cache", "SSFT_DATA_HOME": root / "cache" / "no-data-home",
           "HF_HUB_OFFLINE": "1"}
    result = run_cli(module, argv, cwd=world.cwd, env=env, real=real)

    prog = PROGS[module]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert lines and lines[-1].startswith(f"{prog}: error: "), result.stderr[-3000:]
    assert culprit in lines[-1], lines[-1]
    errors = [line for line in lines if line.startswith(f"{prog}: error")]
    assert len(errors) == 1, result.stderr
    # nothing written outside the output folder: cwd, inputs, cache and home as they were
    assert _snapshot(root, world.out) == before
    assert not list(world.cwd.iterdir())
    if out_before is None:
        assert not world.out.exists(), sorted(str(p) for p in world.out.rglob("*"))
    elif name != "train-checkpoint-corrupt":  # a resume attempt may log into its own output folder
        assert _snapshot(world.out, world.out / "-") == out_before
