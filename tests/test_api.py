"""The public API (``import ssft``): lazy and fast to import; train from a dict recipe; load / rank / predict / encode
for every architecture, scoring what ssft-rerank scores; a sentence-transformers checkpoint ranks as
sentence-transformers ranks; evaluate / export / mine on the tiny dataset, a loaded ranker accepted where a path is."""
from __future__ import annotations

import ast
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ssft
from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset
from ssft.training.prediction import prediction_trainer

QUERY = "vitamin d bones"
DOCUMENTS = ["coffee consumption and liver disease", "Vitamin D vitamin d and bone health in adults",
             "sleep duration and memory", "statin drugs lower cholesterol and heart risk"]
ARCHITECTURES = {"cross": ("lora", {"r": 4}), "twin": ("full", {}), "colbert": ("full", {}), "dense": ("full", {})}


@pytest.fixture(scope="module")
def saved_models(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """One saved ranker folder per architecture on the tiny BERT (its head / projection weights random)."""
    root = tmp_path_factory.mktemp("api-models")
    folders = {}
    for arch, (method, options) in ARCHITECTURES.items():
        cfg = ModelConfig(architecture=arch, name=str(tiny_model_dir), max_length=48, query_max_length=16)
        folders[arch] = root / arch
        MODELS.get(arch).build(cfg, method, options).save(folders[arch])
    return folders


def test_import_ssft_is_fast_and_imports_no_torch():
    code = ("import sys, time; t = time.perf_counter(); import ssft; t = time.perf_counter() - t; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'; "
            "assert callable(ssft.__getattr__); print(t)")
    times = []
    for _ in range(5):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        times.append(float(result.stdout))
    assert statistics.median(times) < 1.0, times


def test_the_api_names_are_documented_and_listed():
    for name in ("train", "load", "evaluate", "retrieve", "encode", "export", "mine", "Run", "Ranker"):
        assert name in ssft.__all__ and name in dir(ssft)
        assert getattr(ssft, name).__doc__, name
    assert "rank" in ssft.load.__doc__
    with pytest.raises(AttributeError):
        ssft.no_such_name  # noqa: B018


def test_old_paths_still_work():
    """ssft.train is the API function and the module of earlier releases at once."""
    import inspect

    from ssft.pipeline.run import run_recipe
    from ssft.train import run_recipe as old  # the old path, on purpose

    assert old is run_recipe and ssft.train.run_recipe is run_recipe and callable(ssft.train)
    assert callable(ssft.retrieve) and ssft.retrieve.main is not None
    assert "overrides" in inspect.signature(ssft.train).parameters


@pytest.mark.parametrize("old, new", [("ssft.recipe", "ssft.config.recipe"), ("ssft.registry", "ssft.config.registry"),
                                      ("ssft.trainer", "ssft.training"), ("ssft.rerank", "ssft.cli.rerank"),
                                      ("ssft.sweep", "ssft.pipeline.sweep")])
def test_old_module_paths_warn_and_name_the_new_home(old, new):
    """Code written against earlier releases still imports, told where the name lives now (a fresh interpreter:
    a module warns once, when first imported)."""
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", f"import {old}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "DeprecationWarning" in done.stderr and new in done.stderr.splitlines()[-1]


def test_the_project_imports_no_old_module_path():
    """ruff's TID251 refuses ssft.recipe / registry / trainer / rerank / sweep; ssft.train and ssft.retrieve are also
    the API functions (an attribute ban would flag ``ssft.train(...)``), so their imports are checked here."""
    root = Path(__file__).resolve().parents[1]
    found = []
    for path in [*root.glob("ssft/**/*.py"), *root.glob("tests/**/*.py"), *root.glob("benchmarks/**/*.py")]:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(name in ("ssft.train", "ssft.retrieve") for name in names) and "on purpose" not in lines[node.lineno - 1]:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == [], found


def test_train_from_a_dict_recipe(tmp_path, tiny_dataset, tiny_model_dir):
    recipe = {"model": {"name": str(tiny_model_dir), "max_length": 48},
              "adapter": {"method": "lora", "r": 4},
              "data": {"dataset": str(tiny_dataset), "num_negatives": 2, "negatives_depth": 6},
              "eval": {"depth": 6},
              "training": {"output_dir": str(tmp_path / "run"), "num_train_epochs": 2, "per_device_train_batch_size": 2}}
    run = ssft.train(recipe, {"training.num_train_epochs": 1, "training.learning_rate": 1e-3})
    assert isinstance(run, ssft.Run) and run.output_dir == tmp_path / "run"
    assert run.metrics == json.loads((run.output_dir / "metrics.json").read_text())
    assert "nDCG@10" in run.metrics["test"]
    assert run.recipe.training["num_train_epochs"] == 1 and run.recipe.training["learning_rate"] == 1e-3
    assert run.info == json.loads((run.output_dir / "run_info.json").read_text())
    assert isinstance(run.model, ssft.Ranker) and run.model is run.model
    # the model scores the test split as the run did: reranking BM25 again gives the run's row
    again = ssft.evaluate(run.model, str(tiny_dataset), split="test", first_stage="bm25", depth=6, precision="fp32")
    assert again["test"]["nDCG@10"] == pytest.approx(run.metrics["test"]["nDCG@10"], abs=1e-6)
    with pytest.raises(SsftError, match="training.nonsense_key|nonsense_key"):
        ssft.train(recipe, {"training.nonsense_key": 1})
    with pytest.raises(SsftError, match="dict of dotted recipe paths"):
        ssft.train(recipe, ["training.num_train_epochs=1"])


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_predict_scores_what_ssft_rerank_scores(arch, saved_models, tiny_dataset):
    model = ssft.load(saved_models[arch], precision="fp32")
    assert isinstance(model, ssft.Ranker) and not model.training
    dataset = load_dataset(str(tiny_dataset))
    run = {q: {d: 1.0 for d in dataset.corpus} for q in ("q1", "q2", "q5")}
    pairs = PairDataset(run, 10, dataset)
    expected = prediction_trainer(model, 4, None, "fp32").score(pairs)
    got = model.predict([(dataset.queries[q], dataset.corpus[d].full_text) for q, d in pairs.pairs], batch_size=5)
    assert got.dtype == np.float32 and got.shape == (len(pairs.pairs),)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_rank_sorts_predict_scores_best_first(arch, saved_models):
    model = ssft.load(saved_models[arch], precision="fp32")
    scores = model.predict([(QUERY, d) for d in DOCUMENTS])
    ranked = model.rank(QUERY, DOCUMENTS)
    assert [r["corpus_id"] for r in ranked] == sorted(range(len(DOCUMENTS)), key=lambda i: (-scores[i], i))
    assert all(set(r) == {"corpus_id", "score"} and isinstance(r["score"], float) for r in ranked)
    np.testing.assert_allclose([r["score"] for r in ranked], sorted(scores, reverse=True), atol=1e-5)
    assert model.rank(QUERY, DOCUMENTS, top_k=2) == ranked[:2]
    assert model.rank(QUERY, []) == []
    with pytest.raises(SsftError, match="list of strings"):
        model.rank(QUERY, "one document")
    with pytest.raises(SsftError, match="top_k"):
        model.rank(QUERY, DOCUMENTS, top_k=0)


@pytest.mark.parametrize("arch", ["twin", "colbert", "dense"])
def test_bi_encoders_encode_to_numpy_in_input_order(arch, saved_models):
    model = ssft.load(saved_models[arch], precision="fp32")
    one_by_one = [model.encode_document([d]) for d in DOCUMENTS]
    batched = model.encode_document(DOCUMENTS, batch_size=3)
    queries = model.encode_query([QUERY, "coffee"])
    if arch == "colbert":  # one (tokens, dim) array per text
        assert isinstance(batched, list) and len(batched) == len(DOCUMENTS) and len(queries) == 2
        for single, item in zip(one_by_one, batched):
            np.testing.assert_allclose(single[0], item, atol=1e-5)
    else:
        assert isinstance(batched, np.ndarray) and batched.shape[0] == len(DOCUMENTS) and queries.shape[0] == 2
        np.testing.assert_allclose(np.concatenate(one_by_one), batched, atol=1e-5)


def test_a_cross_encoder_has_no_embeddings(saved_models):
    model = ssft.load(saved_models["cross"])
    for method in (model.encode_query, model.encode_document):
        with pytest.raises(SsftError, match="scores \\(query, document\\) pairs together"):
            method(["a text"])


def test_load_refuses_a_missing_model_in_one_line(tmp_path):
    with pytest.raises(SsftError) as err:
        ssft.load(tmp_path / "nothing-here")
    assert "\n" not in str(err.value)
    with pytest.raises(SsftError, match="precision"):
        ssft.load(tmp_path, precision="fp8")


def test_a_sentence_transformers_model_ranks_as_sentence_transformers_does():
    st = pytest.importorskip("sentence_transformers")
    from ssft.core.hub import resolve_model

    folder = resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    model = ssft.load("sentence-transformers/all-MiniLM-L6-v2", precision="fp32")
    assert model.architecture == "dense"
    reference = st.SentenceTransformer(str(folder), device="cpu")
    query = "which vitamin keeps bones healthy"
    similarity = reference.similarity(reference.encode([query]), reference.encode(DOCUMENTS))[0].numpy()
    ranked = model.rank(query, DOCUMENTS)
    assert [r["corpus_id"] for r in ranked] == list(np.argsort(-similarity, kind="stable"))
    np.testing.assert_allclose(model.encode_query([query])[0], reference.encode([query])[0], atol=1e-4)


def test_evaluate_with_a_loaded_ranker_matches_the_cli(saved_models, tiny_dataset, tmp_path):
    from ssft.cli.rerank import main

    assert main([str(saved_models["cross"]), "--data", str(tiny_dataset), "--first-stage", "bm25", "--split", "test",
                 "--output", str(tmp_path / "cli"), "--depth", "6", "--precision", "fp32"]) == 0
    cli = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    model = ssft.load(saved_models["cross"], precision="fp32")
    in_memory = ssft.evaluate(model, str(tiny_dataset), split="test", first_stage="bm25", depth=6, precision="fp32")
    assert in_memory == cli
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli", "tiny"]  # without output nothing is written
    written = ssft.evaluate(saved_models["cross"], str(tiny_dataset), depth=6, precision="fp32",
                            output=tmp_path / "api")
    assert written == cli and json.loads((tmp_path / "api" / "metrics.json").read_text()) == cli
    with pytest.raises(SsftError, match="full retrieval needs a dense or a ColBERT model"):
        ssft.evaluate(model, str(tiny_dataset), first_stage="full")


def test_retrieve_and_encode_with_a_dense_model(saved_models, tiny_dataset, tmp_path):
    model = ssft.load(saved_models["dense"], precision="fp32")
    results = ssft.retrieve(model, str(tiny_dataset), split="test", depth=6, precision="fp32")
    assert set(results) == {"test"} and "R@100" in results["test"]
    encoded = ssft.encode(saved_models["dense"], str(tiny_dataset), output=tmp_path / "index", precision="fp32")
    assert encoded["index"]["vectors"] == 6 and (tmp_path / "index" / "index.faiss").is_file()
    from_index = ssft.retrieve(saved_models["dense"], str(tiny_dataset), depth=6, index_dir=tmp_path / "index")
    assert from_index["test"]["R@100"] == pytest.approx(results["test"]["R@100"])


def test_export_and_mine(saved_models, tiny_dataset, tmp_path):
    info = ssft.export(saved_models["dense"], tmp_path / "export")
    assert info["format"] == "sentence-transformers" and (tmp_path / "export" / "modules.json").is_file()
    from tests.helpers import write_synthetic_beir

    data = str(write_synthetic_beir(tmp_path / "syn"))
    mined = ssft.mine(data, tmp_path / "mined.jsonl", split="train", depth=20, num_negatives=5)
    rows = [json.loads(line) for line in (tmp_path / "mined.jsonl").read_text().splitlines()]
    assert mined["rows"] == len(rows) > 0 and mined["miner"] == "bm25"
    assert json.loads((tmp_path / "mined.mining.json").read_text())["tool"] == "ssft-mine"
    dense = ssft.load(saved_models["dense"], precision="fp32")
    again = ssft.mine(data, tmp_path / "dense.jsonl", model=dense, depth=20)
    assert again["rows"] > 0 and again["miner"].startswith("dense")


def test_evaluate_on_several_datasets_gives_the_multi_dataset_table(saved_models, tiny_dataset):
    result = ssft.evaluate(saved_models["cross"], [str(tiny_dataset)], split="test", depth=6, precision="fp32")
    assert isinstance(result, dict) and result
    assert "nDCG@10" in json.dumps(result)
