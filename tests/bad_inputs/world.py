"""The bad-input matrix's world: tiny fixtures a case may damage, and helpers that build a CLI's argv.
The cases live in tests/bad_inputs/cases_*.py (one file per area); tests/bad_inputs/test_matrix.py runs them all."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

PROGS = {"ssft.cli.train": "ssft-train", "ssft.cli.rerank": "ssft-rerank", "ssft.cli.sweep": "ssft-sweep",
         "ssft.cli.retrieve": "ssft-retrieve",
         "ssft.cli.export": "ssft-export", "ssft.cli.mine": "ssft-mine", "ssft.cli.encode": "ssft-encode",
         "ssft.cli.ambiguity": "ssft-ambiguity"}


@pytest.fixture(scope="module")
def saved_ranker(tiny_model_dir, tmp_path_factory) -> Path:
    """A saved LoRA cross-encoder folder on the tiny BERT (untrained: the rerank cases only need one to load)."""
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

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

    def retrieve(self, *extra: str) -> list[str]:
        return [str(self.ranker), "--data", str(self.data), "--split", "test", "--output", str(self.out), *extra]

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

    from ssft.config.recipe import load_recipe

    recipe = w.recipe()
    (w.out / "checkpoint-4").mkdir(parents=True)
    (w.out / "checkpoint-4" / "ssft_checkpoint.json").write_text('{"global_step": 4, "loss_sum": 1.0}\n')
    (w.out / "recipe.yaml").write_text(yaml.safe_dump(load_recipe(recipe, ["seed=7"]).to_dict(), sort_keys=False))
    return [str(recipe)]


def _corrupt_checkpoint(w: World) -> list[str]:
    import yaml

    from ssft.config.recipe import load_recipe

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


def _export_prefix_model(w: World) -> list[str]:
    """ssft-export of a saved PEFT prefix-tuning cross-encoder (a method no standard forward holds)."""
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    CrossEncoder.build(ModelConfig(name=str(w.model), max_length=48), "prefix", {"num_virtual_tokens": 2}).save(
        w.root / "prefix-model")
    return [str(w.root / "prefix-model"), "--output", str(w.out)]


def _export_over_a_folder(w: World) -> list[str]:
    w.out.mkdir()
    (w.out / "mine.txt").write_text("a user's file\n")
    return [str(w.ranker), "--output", str(w.out)]

