"""The export's model card: built with huggingface_hub's own tooling, parsed back by it (offline); model-index holds
the model's own results only; datasets as hub ids; a load snippet naming the repository when pushed; hyper-parameters,
precision, versions and citations; numbers rounded to 4 digits."""
from __future__ import annotations

import json

import pytest
import yaml
from huggingface_hub import ModelCard, metadata_load
from huggingface_hub.repocard_data import model_index_to_eval_results

from ssft.models.interop.card import PLACEHOLDER, dataset_hub_id, model_card

SPEC = {"architecture": "cross", "method": "lora", "base_model": "sentence-transformers/all-MiniLM-L6-v2"}
INFO = {"format": "cross-encoder", "library": "sentence-transformers", "loader": "CrossEncoder",
        "notes": ["head cls_linear exported through the pooler"]}
RECIPE = {"seed": 42, "model": {"architecture": "cross", "name": "sentence-transformers/all-MiniLM-L6-v2"},
          "adapter": {"method": "lora", "r": 16, "alpha": 32}, "loss": "listwise_ce",
          "data": {"dataset": "nfcorpus", "train_split": "train", "test_split": "test", "max_train_queries": 400},
          "eval": {"first_stage": "bm25", "depth": 20}, "training": {"num_train_epochs": 2, "learning_rate": 1.0e-3}}
METRICS = {"test": {"nDCG@10": 0.24238765432101234, "RR@10": 0.41}, "bm25": {"nDCG@10": 0.3064, "RR@10": 0.5},
           "test+bm25": {"nDCG@10": 0.3095, "RR@10": 0.52}}
RUN_INFO = {"split": "test", "queries": 323, "depth": 20, "first_stage": "bm25", "interpolation_alpha": 0.55,
            "precision": "bf16", "scoring": {"precision": "bf16", "rows": ["test", "test+bm25"]},
            "training_precision": "bf16", "trainable_parameters": 1234, "total_parameters": 22000000,
            "best_validation": {"metric": "nDCG@10", "value": 0.2, "epoch": 2.0}, "train_seconds": 915.3,
            "versions": {"ssft": "0.9.0", "torch": "2.9.0"}}


def _saved(tmp_path, repo_id=None, **changes):
    args = {"spec": SPEC, "info": INFO, "recipe": RECIPE, "metrics": METRICS, "repo_id": repo_id, "run_info": RUN_INFO,
            **changes}
    card, skipped = model_card(**args)
    path = tmp_path / "README.md"
    card.save(path)
    return path, skipped


def test_the_card_parses_back_and_lists_only_the_models_own_rows(tmp_path):
    path, skipped = _saved(tmp_path)
    assert skipped == []
    card = ModelCard.load(path)  # a local file: nothing fetched
    meta = metadata_load(path)
    assert meta["datasets"] == ["BeIR/nfcorpus"] and meta["base_model"] == SPEC["base_model"]
    assert meta["library_name"] == "sentence-transformers" and {"ssft", "lora", "cross"} <= set(meta["tags"])
    name, results = model_index_to_eval_results(meta["model-index"])
    assert name == "ssft-cross-lora"
    assert {(r.metric_type, r.metric_value) for r in results} == {("nDCG@10", 0.2424), ("RR@10", 0.41)}
    assert {r.dataset_type for r in results} == {"BeIR/nfcorpus"} and {r.dataset_split for r in results} == {"test"}
    assert [(r.metric_type, r.metric_value) for r in card.data.eval_results] == [(r.metric_type, r.metric_value)
                                                                               for r in results]
    index_text = yaml.safe_dump(meta["model-index"])
    assert "0.3064" not in index_text and "0.3095" not in index_text  # BM25's and the interpolation's values
    assert all("bm25" not in f"{r.dataset_name} {r.dataset_config} {r.metric_name}" for r in results)
    # the reference rows stay in the text, labelled, rounded to 4 digits
    assert "| bm25 | first stage (reference) | 0.3064 | 0.5000 |" in card.text
    assert "| test+bm25 | this model interpolated with the first stage, weight 0.55 tuned on validation (reference)" \
        in card.text
    assert "0.24238765" not in path.read_text() and "| test | this model | 0.2424 | 0.4100 |" in card.text


def test_the_card_says_how_it_was_trained_scored_and_what_to_cite(tmp_path):
    path, _ = _saved(tmp_path)
    text = ModelCard.load(path).text
    assert f'CrossEncoder("{PLACEHOLDER}")' in text and "is a placeholder: replace it" in text
    assert "| `adapter.r` | 16 |" in text and "| `training.learning_rate` | 0.001 |" in text
    assert "Method `lora`, loss `listwise_ce`." in text
    assert "ssft computed the results above in bf16" in text and "the exported weights are fp32" in text
    assert "not measured for this export" in text  # the difference bf16 -> fp32 is stated as unmeasured
    assert "| torch | 2.9.0 |" in text and "| transformers | not recorded |" in text
    assert "@inproceedings{jung2022semisiamese" in text and "10.1145/3485447.3511978" in text


def test_a_pushed_card_loads_by_its_repository_id(tmp_path):
    path, _ = _saved(tmp_path, repo_id="me/ranker")
    card = ModelCard.load(path)
    assert 'CrossEncoder("me/ranker")' in card.text and PLACEHOLDER not in card.text
    assert model_index_to_eval_results(card.data.to_dict()["model-index"])[0] == "me/ranker"


def test_a_local_dataset_is_named_in_the_text_only(tmp_path):
    local = tmp_path / "mydata"
    local.mkdir()
    recipe = {**RECIPE, "data": {**RECIPE["data"], "dataset": str(local)}}
    path, _ = _saved(tmp_path, recipe=recipe)
    meta = metadata_load(path)
    assert "datasets" not in meta
    assert str(local) in ModelCard.load(path).text
    assert {r.dataset_name for r in model_index_to_eval_results(meta["model-index"])[1]} == {str(local)}


@pytest.mark.parametrize("name, hub_id", [("nfcorpus", "BeIR/nfcorpus"), ("scifact", "BeIR/scifact"),
                                          ("BeIR/fiqa", "BeIR/fiqa"), ("irds:beir/nfcorpus/test", None),
                                          ("./nfcorpus", None), ("my-own-set", None), (None, None)])
def test_dataset_hub_ids(name, hub_id):
    assert dataset_hub_id(name) == hub_id


def test_an_exported_run_has_a_card_without_first_stage_rows(tmp_path, tiny_model_dir):
    """Through ssft-export: a saved run folder with metrics.json, recipe.yaml and run_info.json."""
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder
    from ssft.pipeline.export import export_run

    run = tmp_path / "run"
    CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "full", {}).save(run / "model")
    (run / "metrics.json").write_text(json.dumps(METRICS))
    (run / "recipe.yaml").write_text(yaml.safe_dump(RECIPE))
    (run / "run_info.json").write_text(json.dumps(RUN_INFO))
    export_run(run, tmp_path / "export")
    meta = metadata_load(tmp_path / "export" / "README.md")
    _, results = model_index_to_eval_results(meta["model-index"])
    assert sorted(r.metric_type for r in results) == ["RR@10", "nDCG@10"]
    assert all("bm25" not in f"{r.dataset_name} {r.dataset_config} {r.metric_name}" for r in results)
    assert "the exported weights are fp32" in ModelCard.load(tmp_path / "export" / "README.md").text
