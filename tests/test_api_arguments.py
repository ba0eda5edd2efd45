"""The Python API's arguments: every entry point checks them with the code the CLI uses, and a wrong value or type is
one ``SsftError`` naming the argument (never a raw TypeError, never a silent wrong result); no API call changes the
state of a ranker the caller passed in."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import ssft
from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.core import precision as precisions
from ssft.core.errors import SsftError

QUERY = "vitamin d bones"
DOCUMENTS = ["coffee consumption and liver disease", "Vitamin D vitamin d and bone health in adults",
             "sleep duration and memory"]


@pytest.fixture(scope="module")
def saved(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("api-arguments")
    folders = {}
    for arch in ("cross", "dense", "colbert"):
        cfg = ModelConfig(architecture=arch, name=str(tiny_model_dir), max_length=48, query_max_length=16)
        folders[arch] = root / arch
        MODELS.get(arch).build(cfg, "full", {}).save(folders[arch])
    return folders


@pytest.fixture(scope="module")
def cross(saved):
    return ssft.load(saved["cross"], precision="fp32")


@pytest.fixture(scope="module")
def dense(saved):
    return ssft.load(saved["dense"], precision="fp32")


# ---------------------------------------------------------------- the ranker's inference methods
def test_rank_refuses_a_dict_of_documents_instead_of_ranking_its_keys(cross):
    with pytest.raises(SsftError, match="rank: documents is a dict"):
        cross.rank(QUERY, {"d1": DOCUMENTS[0], "d2": DOCUMENTS[1]})


def test_a_generator_of_texts_is_read_once_not_as_nothing(cross, dense):
    assert len(cross.rank(QUERY, (d for d in DOCUMENTS))) == len(DOCUMENTS)
    assert cross.rank(QUERY, (d for d in DOCUMENTS)) == cross.rank(QUERY, DOCUMENTS)
    encoded = dense.encode_query(q for q in [QUERY, "coffee"])
    assert encoded.shape[0] == 2
    np.testing.assert_allclose(encoded, dense.encode_query([QUERY, "coffee"]), atol=1e-6)


def test_a_candidate_run_whose_value_is_a_string_is_refused(cross):
    with pytest.raises(SsftError, match="candidates of query 'q1' are one string"):
        cross.rank({"q1": QUERY}, {"q1": "d1"}, corpus={"d1": "x", "d": "y", "1": "z"})
    # a dict of id -> score and a list of ids still rank
    ranked = cross.rank({"q1": QUERY}, {"q1": {"d1": 2.0, "d2": 1.0}}, corpus={"d1": "x", "d2": "y"})
    assert set(ranked["q1"]) == {"d1", "d2"}


@pytest.mark.parametrize("call, culprit", [
    (lambda m, d: m.rank(QUERY, None), "rank: documents"),
    (lambda m, d: m.rank(None, DOCUMENTS), "rank: the query"),
    (lambda m, d: m.predict(None), "predict: pairs"),
    (lambda m, d: m.predict([(QUERY, "bad \ud800 text")]), "predict: pair 0: document"),
    (lambda m, d: m.rank("bad \ud800", DOCUMENTS), "rank: query"),
    (lambda m, d: m.rank(QUERY, [DOCUMENTS[0], 5]), "rank: documents: expected a list of strings, item 1"),
    (lambda m, d: m.rank(QUERY, DOCUMENTS, top_k="2"), "top_k"),
    (lambda m, d: m.predict([(QUERY, DOCUMENTS[0])], batch_size=None), "batch_size"),
    (lambda m, d: d.encode_query(None), "encode_query"),
    (lambda m, d: d.encode_document([DOCUMENTS[0], "\udfff"]), "encode_document: item 1"),
], ids=["rank-None", "rank-query-None", "predict-None", "predict-surrogate", "rank-query-surrogate",
        "rank-number-document", "top_k-string", "batch_size-None", "encode_query-None", "encode_document-surrogate"])
def test_a_wrong_type_is_one_ssft_error_naming_the_argument(cross, dense, call, culprit):
    with pytest.raises(SsftError) as err:
        call(cross, dense)
    assert culprit in str(err.value) and "\n" not in str(err.value)


def test_top_k_takes_a_numpy_integer(cross):
    assert cross.rank(QUERY, DOCUMENTS, top_k=np.int64(1)) == cross.rank(QUERY, DOCUMENTS, top_k=1)
    with pytest.raises(SsftError, match="top_k"):
        cross.rank(QUERY, DOCUMENTS, top_k=True)


# ---------------------------------------------------------------- int8 calibration
@pytest.mark.parametrize("calibration, culprit", [
    ([1, 2, 3], "calibration: item 0"),
    ([("a", "b", "c")], "calibration: item 0"),
    ([("a", None)], "calibration: item 0: document"),
    ("one text", "as a list"),
    ([], "calibration needs"),
])
def test_int8_without_a_usable_calibration_item_is_an_error(saved, calibration, culprit):
    pytest.importorskip("openvino")
    with pytest.raises(SsftError) as err:
        ssft.load(saved["dense"], precision="int8", calibration=calibration)
    assert culprit in str(err.value)


# ---------------------------------------------------------------- the caller's ranker is never switched
def _state(ranker) -> tuple:
    return (precisions.served_as(ranker), precisions.model_precision(ranker.backbone),
            [type(b.serving).__name__ for b in ranker.modules() if hasattr(b, "bf16_weights")])


def test_evaluate_and_retrieve_leave_the_callers_ranker_as_it_was(saved, tiny_dataset):
    dense = ssft.load(saved["dense"], precision="fp32")
    before, vectors = _state(dense), dense.encode_document(DOCUMENTS)
    ssft.retrieve(dense, str(tiny_dataset), depth=6, precision="bf16")
    ssft.evaluate(dense, str(tiny_dataset), depth=6, precision="bf16", backend="torch")
    assert _state(dense) == before
    np.testing.assert_array_equal(dense.encode_document(DOCUMENTS), vectors)
    pytest.importorskip("openvino")
    ssft.evaluate(dense, str(tiny_dataset), depth=6, precision="fp32", backend="openvino")
    assert _state(dense) == before
    np.testing.assert_array_equal(dense.encode_document(DOCUMENTS), vectors)


def test_load_of_a_served_ranker_serves_a_copy_at_the_precision_asked(saved):
    pytest.importorskip("openvino")
    int8 = ssft.load(saved["cross"], precision="int8", calibration=[(QUERY, d) for d in DOCUMENTS])
    assert precisions.served_as(int8) == "openvino:int8"
    fp32 = ssft.load(int8, precision="fp32")
    assert precisions.served_as(fp32) == "fp32" and fp32 is not int8
    assert all(b.serving is None for b in fp32.modules() if hasattr(b, "bf16_weights"))
    assert precisions.served_as(int8) == "openvino:int8"  # the one passed in still serves as it did
    reference = ssft.load(saved["cross"], precision="fp32")
    pairs = [(QUERY, d) for d in DOCUMENTS]
    np.testing.assert_allclose(fp32.predict(pairs), reference.predict(pairs), atol=1e-6)


# ---------------------------------------------------------------- ssft.evaluate / encode / export arguments
@pytest.mark.parametrize("kwargs, culprit", [
    ({"dataset": None}, "dataset"),
    ({"depth": "5"}, "depth"),
    ({"depth": 0}, "depth"),
    ({"first_stage": None}, "first_stage"),
    ({"metrics": [5]}, "metrics"),
    ({"split": None}, "split"),
    ({"output": 3}, "output"),
])
def test_evaluate_refuses_wrong_arguments_in_one_line(saved, tiny_dataset, kwargs, culprit):
    args = {"dataset": str(tiny_dataset), **kwargs}
    dataset = args.pop("dataset")
    with pytest.raises(SsftError) as err:
        ssft.evaluate(saved["cross"], dataset, **args)
    assert culprit in str(err.value) and "\n" not in str(err.value)


def test_evaluate_on_several_datasets_refuses_a_metric_that_is_not_a_name(saved, tiny_dataset):
    with pytest.raises(SsftError, match="metrics"):
        ssft.evaluate(saved["cross"], [str(tiny_dataset)], metrics=[None])
    with pytest.raises(SsftError, match="depth"):
        ssft.evaluate(saved["cross"], [str(tiny_dataset)], depth="5")


def test_output_none_is_refused_where_a_function_must_write(saved, tiny_dataset, tmp_path, monkeypatch):
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    with pytest.raises(SsftError, match="output"):
        ssft.encode(saved["dense"], str(tiny_dataset), output=None)
    with pytest.raises(SsftError, match="output"):
        ssft.export(saved["dense"], None)
    assert os.listdir(tmp_path / "cwd") == []


def test_load_of_an_unfinished_run_says_it_is_unfinished(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "recipe.yaml").write_text("model: {}\n")
    with pytest.raises(SsftError, match="unfinished ssft-train run"):
        ssft.load(run)
    with pytest.raises(SsftError, match="model: expected a loaded ranker"):
        ssft.load(None)


# ---------------------------------------------------------------- bf16 weights of a module holding inference tensors
def test_bf16_weights_take_inference_tensors():
    """A prefix / prompt table first built while serving (under torch.inference_mode) is an inference tensor, which
    has no version counter: the bf16 copies' fingerprint must still be taken, at a later validation too."""
    module = torch.nn.Linear(4, 4)
    with torch.inference_mode():
        table = torch.ones(2, 4)
    module.register_buffer("table", table)
    weights = precisions.BF16Weights()
    first = weights.tensors(module)
    assert first["target.table"].dtype == torch.bfloat16
    assert weights.tensors(module) is first  # unchanged weights: the same copies
    with torch.no_grad():
        module.weight.add_(1.0)
    assert weights.tensors(module) is not first


def test_a_ranking_without_qrels_is_not_replaced_by_a_split_rerank(saved, tiny_dataset, tmp_path):
    from ssft.cli.rerank import main

    out = tmp_path / "ranked"
    assert main([str(saved["cross"]), "--data", str(tiny_dataset), "--first-stage", "bm25", "--output", str(out),
                 "--depth", "6", "--precision", "fp32"]) == 0
    ranked = (out / "run.trec").read_bytes()
    assert not (out / "metrics.json").exists()
    code = main([str(saved["cross"]), "--data", str(tiny_dataset), "--first-stage", "bm25", "--split", "test",
                 "--output", str(out), "--depth", "6", "--precision", "fp32"])
    assert code != 0
    assert (out / "run.trec").read_bytes() == ranked and not (out / "metrics.json").exists()
    # with --overwrite it is replaced, and the result is complete
    assert main([str(saved["cross"]), "--data", str(tiny_dataset), "--first-stage", "bm25", "--split", "test",
                 "--output", str(out), "--depth", "6", "--precision", "fp32", "--overwrite"]) == 0
    assert "test" in json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("call, culprit", [
    (lambda m, d, o: ssft.retrieve(m, None), "dataset"),
    (lambda m, d, o: ssft.retrieve(m, d, depth="5"), "depth"),
    (lambda m, d, o: ssft.retrieve(m, d, batch_size="8"), "batch-size"),
    (lambda m, d, o: ssft.encode(m, None, output=o), "dataset"),
    (lambda m, d, o: ssft.encode(m, d, output=o, shard_size="10"), "shard-size"),
    (lambda m, d, o: ssft.mine(None, o / "mined.jsonl"), "dataset"),
    (lambda m, d, o: ssft.mine(d, o / "mined.jsonl", depth="5"), "depth"),
    (lambda m, d, o: ssft.evaluate(None, d), "model"),
    (lambda m, d, o: ssft.load(5), "model"),
    (lambda m, d, o: ssft.train(None), "recipe"),
], ids=["retrieve-dataset-None", "retrieve-depth-str", "retrieve-batch-str", "encode-dataset-None",
        "encode-shard-str", "mine-dataset-None", "mine-depth-str", "evaluate-model-None", "load-int", "train-None"])
def test_every_entry_point_refuses_a_wrong_type_in_one_line(saved, tiny_dataset, tmp_path, call, culprit):
    with pytest.raises(SsftError) as err:
        call(saved["dense"], str(tiny_dataset), tmp_path / "out")
    assert culprit in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
