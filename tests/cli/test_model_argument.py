"""Every command that takes a model takes what ``ssft.load`` takes -- a run folder, a saved model folder, a checkpoint
by folder or hub id -- through one resolver (``ssft.api.model_input``), with one help text; a name not found is one
line, with a close name where there is one. And the smaller command-line consistencies: ssft-mine's positional model,
ssft-ambiguity's --data, ssft-rerank's --queries FILE / --average-over, ssft-eval without --output and its n/a for a
metric deeper than --depth."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS

SERVING = {"ssft-rerank": "ssft.cli.rerank", "ssft-retrieve": "ssft.cli.retrieve", "ssft-encode": "ssft.cli.encode",
           "ssft-latency": "ssft.cli.latency", "ssft-export": "ssft.cli.export", "ssft-eval": "ssft.cli.eval",
           "ssft-mine": "ssft.cli.mine"}


@pytest.fixture(scope="module")
def saved_dense(tiny_model_dir, tmp_path_factory) -> Path:
    """A saved ssft dense model (no run around it) on the tiny BERT."""
    folder = tmp_path_factory.mktemp("saved") / "dense"
    cfg = ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=32, query_max_length=12)
    MODELS.get("dense").build(cfg, "full", {}).save(folder)
    return folder


def _argv(name: str, model: str, data: Path, out: Path) -> list[str]:
    """A small successful call of each command on the tiny dataset."""
    return {
        "ssft-rerank": [model, "--data", str(data), "--first-stage", "bm25", "--split", "test", "--output", str(out),
                        "--depth", "6", "--precision", "fp32"],
        "ssft-retrieve": [model, "--data", str(data), "--split", "test", "--output", str(out), "--depth", "3",
                          "--precision", "fp32"],
        "ssft-encode": [model, "--data", str(data), "--output", str(out), "--precision", "fp32"],
        "ssft-latency": [model, "--data", str(data), "--batch-sizes", "2", "--repeats", "1", "--max-queries", "2",
                         "--precision", "fp32", "--output", str(out)],
        "ssft-export": [model, "--output", str(out)],
        "ssft-eval": [model, "--datasets", str(data), "--depth", "6", "--precision", "fp32", "--output", str(out)],
        "ssft-mine": [model, "--data", str(data), "--split", "train", "--depth", "6", "--output", str(out / "m.jsonl")],
    }[name]


_WRITES = {"ssft-rerank": "metrics.json", "ssft-retrieve": "metrics.json", "ssft-encode": "index.faiss",
           "ssft-latency": "latency.json", "ssft-export": "modules.json", "ssft-eval": "eval.json",
           "ssft-mine": "m.jsonl"}


@pytest.mark.parametrize("name", sorted(SERVING))
@pytest.mark.parametrize("kind", ["saved-model", "checkpoint"])
def test_every_model_command_takes_a_saved_model_and_a_checkpoint(name, kind, saved_dense, tiny_model_dir,
                                                                   tiny_dataset, tmp_path):
    """A saved ssft model folder, and a checkpoint folder ssft imports (a plain transformers BERT: a dense model)."""
    model = saved_dense if kind == "saved-model" else tiny_model_dir
    out = tmp_path / "out"
    main = importlib.import_module(SERVING[name]).main
    assert main(_argv(name, str(model), tiny_dataset, out)) == 0
    assert (out / _WRITES[name]).is_file()


@pytest.mark.parametrize("name", sorted(SERVING))
def test_every_model_command_has_one_help_for_its_model(name, capsys):
    from ssft.cli._common import MODEL_HELP

    with pytest.raises(SystemExit):
        importlib.import_module(SERVING[name]).main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert " ".join(MODEL_HELP.split()) in text
    assert "hub id" in text and "run folder" in text


def test_a_hub_id_reranks_offline(tiny_dataset, tmp_path):
    """The short name of a pip-shipped model (all-MiniLM-L6-v2) reranks as ssft.load's model does."""
    import ssft
    from ssft.cli.rerank import main

    assert main(["all-MiniLM-L6-v2", "--data", str(tiny_dataset), "--first-stage", "bm25", "--split", "test",
                 "--output", str(tmp_path / "cli"), "--depth", "6", "--precision", "fp32"]) == 0
    cli = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    api = ssft.evaluate(ssft.load("sentence-transformers/all-MiniLM-L6-v2", precision="fp32"), str(tiny_dataset),
                        depth=6, precision="fp32")
    assert cli == api


@pytest.mark.parametrize("name", ["ssft-rerank", "ssft-retrieve", "ssft-encode", "ssft-latency", "ssft-export",
                                  "ssft-eval", "ssft-mine"])
def test_a_mistyped_name_is_one_line_with_a_close_name(name, tiny_dataset, tmp_path, capsys):
    main = importlib.import_module(SERVING[name]).main
    out = tmp_path / "out"
    assert main(_argv(name, "all-MiniLM-L6-v3", tiny_dataset, out)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}: error: model 'all-MiniLM-L6-v3' not found"), lines
    assert lines[0].endswith("(did you mean 'all-MiniLM-L6-v2'?)")
    assert not out.exists()


def test_a_missing_folder_is_named_with_a_close_one(saved_dense, tiny_dataset, tmp_path, capsys):
    from ssft.cli.rerank import main

    typo = saved_dense.parent / "dens"
    assert main(_argv("ssft-rerank", str(typo), tiny_dataset, tmp_path / "out")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"ssft-rerank: error: model not found: {typo}: no such folder (a run folder, a saved ssft model or "
                    f"a checkpoint folder) (did you mean '{saved_dense}'?)")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(_argv("ssft-rerank", str(empty), tiny_dataset, tmp_path / "out")) == 2
    assert "not a run folder or saved ssft model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_output_inside_an_imported_checkpoint_is_refused(tiny_model_dir, tiny_dataset, tmp_path, capsys):
    import shutil

    from ssft.cli.encode import main

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, checkpoint)
    assert main(_argv("ssft-encode", str(checkpoint), tiny_dataset, checkpoint / "index")) == 2
    assert "--output: " in capsys.readouterr().err and not (checkpoint / "index").exists()


def test_an_exported_checkpoint_loads_as_the_checkpoint_does(tiny_model_dir, tmp_path):
    """ssft-export of a checkpoint (no training run): written in the format sentence-transformers loads, scoring as
    the checkpoint scores in ssft."""
    import numpy as np

    import ssft

    info = ssft.export(str(tiny_model_dir), tmp_path / "export")
    assert info["format"] == "sentence-transformers" and (tmp_path / "export" / "modules.json").is_file()
    before = ssft.load(str(tiny_model_dir), precision="fp32").encode_query(["vitamin d"])
    after = ssft.load(tmp_path / "export", precision="fp32").encode_query(["vitamin d"])
    np.testing.assert_allclose(after, before, atol=1e-5)


# ---------------------------------------------------------------- ssft-mine: the model is positional
def test_mine_takes_the_model_first_and_the_old_flag_with_a_line(saved_dense, tiny_dataset, tmp_path, capsys):
    from ssft.cli.mine import main

    base = ["--data", str(tiny_dataset), "--split", "train", "--depth", "6"]
    assert main([str(saved_dense), *base, "--output", str(tmp_path / "a.jsonl")]) == 0
    capsys.readouterr()
    assert main([*base, "--model", str(saved_dense), "--output", str(tmp_path / "b.jsonl")]) == 0
    err = capsys.readouterr().err
    assert "ssft-mine: deprecated: --model MODEL is now the positional model" in err
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    for argv, culprit in (([*base, "--output", str(tmp_path / "c.jsonl")], "name one miner"),
                          ([str(saved_dense), "--bm25", *base, "--output", str(tmp_path / "c.jsonl")], "name one miner"),
                          ([str(saved_dense), "--model", str(saved_dense), *base, "--output", str(tmp_path / "c.jsonl")],
                           "give the model once")):
        assert main(argv) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("ssft-mine: error: ") and culprit in line
    assert not (tmp_path / "c.jsonl").exists()


# ---------------------------------------------------------------- ssft-ambiguity: --data, as everywhere else
def test_ambiguity_takes_data_and_refuses_the_positional_dataset(tiny_dataset, tmp_path, capsys):
    from ssft.cli.ambiguity import main

    assert main([str(tiny_dataset), "--split", "test"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"ssft-ambiguity: error: the dataset is named by --data: ssft-ambiguity --data {tiny_dataset} ... " \
                   f"(see --help)"
    assert main(["--split", "test"]) == 2
    assert "required: --data" in capsys.readouterr().err


# ---------------------------------------------------------------- ssft-rerank: --queries FILE, --average-over
def test_rerank_queries_is_a_file_and_average_over_the_scope(saved_dense, tiny_dataset, tmp_path, capsys):
    from ssft.cli.rerank import main

    base = [str(saved_dense), "--data", str(tiny_dataset), "--first-stage", "bm25", "--depth", "6"]
    assert main([*base, "--split", "test", "--average-over", "run", "--output", str(tmp_path / "new")]) == 0
    capsys.readouterr()
    assert main([*base, "--split", "test", "--queries", "run", "--output", str(tmp_path / "old")]) == 0
    assert "ssft-rerank: deprecated: --queries run is now --average-over run" in capsys.readouterr().err
    assert json.loads((tmp_path / "new" / "metrics.json").read_text()) == \
        json.loads((tmp_path / "old" / "metrics.json").read_text())
    queries = tmp_path / "mine.txt"
    queries.write_text("coffee and the liver\n")
    for argv, culprit in (([*base, "--split", "test", "--queries", str(queries)], "is ranked without --split"),
                          ([*base, "--average-over", "run"], "--average-over: metrics are averaged with --split only"),
                          ([*base, "--average-over", "all"], "argument --average-over: invalid choice")):
        assert main([*argv, "--output", str(tmp_path / "bad")]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert culprit in line, line
    assert not (tmp_path / "bad").exists()
    assert main([*base, "--queries", str(queries), "--output", str(tmp_path / "own")]) == 0
    assert (tmp_path / "own" / "run.trec").read_text().startswith("1 Q0 ")


# ---------------------------------------------------------------- ssft-eval: --output optional; n/a beyond --depth
def test_eval_without_output_prints_and_writes_nothing(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch, capsys):
    from ssft.cli.eval import main

    monkeypatch.chdir(tmp_path)
    assert main([str(tiny_model_dir), "--datasets", str(tiny_dataset), "--depth", "6", "--precision", "fp32"]) == 0
    out = capsys.readouterr().out
    assert "| mean |" in out and "nothing written (no --output)" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]


def test_a_metric_deeper_than_the_depth_is_not_computed_nor_tested(tiny_model_dir, tiny_dataset):
    """At --depth 3, R@100 of the model's 3 documents beside BM25's 100 would measure the depth: n/a, not tested."""
    from ssft.pipeline.evaluate import beyond_depth, evaluate_datasets, markdown_table

    assert beyond_depth(["nDCG@10", "R@100", "P@3", "RR"], 3) == ["nDCG@10", "R@100"]
    result = evaluate_datasets(str(tiny_model_dir), [str(tiny_dataset)], depth=3, precision="fp32",
                               metrics=["P@3", "R@100"])
    (row,) = result["datasets"]
    assert row["model"]["R@100"] is None and row["bm25"]["R@100"] is not None
    assert row["significance"]["R@100"] == {"pvalue": None, "statistic": None, "mark": ""}
    assert row["model"]["P@3"] is not None and result["mean"]["model"]["R@100"] is None
    assert list(result["not_computed"]) == ["R@100"]
    table = markdown_table(result)
    assert " n/a |" in table and "n/a: R@100 not computed" in table and "--depth 100" in table
    deep = evaluate_datasets(str(tiny_model_dir), [str(tiny_dataset)], depth=100, precision="fp32",
                             metrics=["R@100"])
    assert deep["not_computed"] == {} and deep["datasets"][0]["model"]["R@100"] is not None
