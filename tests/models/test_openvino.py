"""The OpenVINO backend on tiny random models: every architecture scores as torch fp32 within float tolerance; the
``--format openvino`` export is found where sentence-transformers' OpenVINO loader looks and, run through
sentence-transformers' own modules, scores as ssft; int8 calibration runs offline, ranks close to fp32 and is
reproducible; bad backends are one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from ssft.adapters.backbone import Backbone
from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.core import precision as precisions
from ssft.core.errors import SsftError
from ssft.models import load_ranker
from ssft.models.interop.export import merged_encoder
from ssft.pipeline.export import export_run
from tests.helpers import move_trainable_weights, save_tiny_bert

ov = pytest.importorskip("openvino")
from ssft.models.interop import openvino as backend  # noqa: E402 -- only with openvino installed

QUERIES = ["what is a bone", "coffee and the heart", "iron in the diet!"]
DOCUMENTS = ["bones are hard tissue, made of calcium.", "coffee raises blood pressure a little; tea less so.",
             "red meat, beans and spinach hold iron. " + " ".join(["a long document cut at max_length:"] * 30)]
# (architecture, method, model options): every exportable architecture, one tower and two (semi-Siamese LoRA merged
# per tower; a separate document model)
CASES = [("cross", "lora", {"head": "classifier"}), ("cross", "full", {"head": "cls_linear"}),
         ("cross", "full", {"head": "dual_pooled"}),
         ("twin", "ss_lora", {"scorer": "cosine", "pooling": "cls"}), ("dense", "lora", {"projection_dim": 24}),
         ("dense", "full", {"document_name": "B", "projection_dim": 16}), ("colbert", "full", {"colbert_dim": 16}),
         ("colbert", "ss_lora", {"colbert_dim": 16})]
FP32_TOL = 1e-4


@pytest.fixture(scope="module")
def towers(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ov-towers")
    # one layer each: conversion traces every layer, and one holds every operation a converted encoder has
    return save_tiny_bert(root / "a", layers=1, seed=0), save_tiny_bert(root / "b", hidden_size=48, layers=1, seed=1)


def build(towers, architecture: str, method: str, options: dict):
    torch.manual_seed(0)
    options = {k: (str(towers[1]) if v == "B" else v) for k, v in options.items()}
    cfg = ModelConfig(architecture=architecture, name=str(towers[0]), max_length=48, query_max_length=12, **options)
    ranker = MODELS.get(architecture).build(cfg, method, {"r": 4} if "lora" in method else {})
    move_trainable_weights(ranker)
    return ranker.eval().requires_grad_(False)


def scores(ranker) -> np.ndarray:
    return ranker.predict(list(zip(QUERIES, DOCUMENTS)))


class Counting:
    """Wraps a backbone's OpenVINO encoder and counts its calls (the scores came from OpenVINO, not torch)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __call__(self, *args):
        self.calls += 1
        return self.inner(*args)

    def __getattr__(self, name):  # what the encoder declares (first_token)
        return getattr(self.inner, name)


@pytest.mark.parametrize("architecture,method,options", CASES)
def test_openvino_scores_equal_torch_fp32(towers, architecture, method, options):
    ranker = build(towers, architecture, method, options)
    want = scores(ranker)
    backend.serve_openvino(ranker, "fp32")
    engines = [m for m in ranker.modules() if isinstance(m, Backbone)]
    assert engines and all(isinstance(m.serving, backend.OpenVINOEncoder) for m in engines)
    # a [CLS] head gets the first token's state only (BERT's pooler of head: classifier run in the graph, the last
    # linear layer in float32 torch); other heads every token's
    first_only = architecture == "cross" and options.get("head") != "dual_pooled"
    assert all(m.serving.first_token == first_only for m in engines)
    assert all(m.serving.pooled == (first_only and options.get("head") == "classifier") for m in engines)
    for m in engines:
        m.serving = Counting(m.serving)
    got = scores(ranker)
    # (a frozen separate document tower may serve its documents from the embedding cache, keyed by backend too)
    assert sum(m.serving.calls for m in engines) > 0
    np.testing.assert_allclose(got, want, atol=FP32_TOL, rtol=FP32_TOL)
    assert ranker.serving_backend == "openvino:fp32"
    if ranker.bi_encoder:  # the public encode path as well
        torch_model = build(towers, architecture, method, options)
        for got_v, want_v in zip(ranker.encode_document(DOCUMENTS), torch_model.encode_document(DOCUMENTS)):
            np.testing.assert_allclose(got_v, want_v, atol=FP32_TOL)


def test_bf16_hint_scores_close_to_fp32(towers):
    ranker = build(towers, "cross", "lora", {"head": "classifier"})
    want = scores(ranker)
    backend.serve_openvino(ranker, "bf16")
    assert ranker.serving_backend == "openvino:bf16"
    np.testing.assert_allclose(scores(ranker), want, atol=0.05 * float(np.abs(want).max()) + 1e-3)


def test_int8_calibration_runs_offline_and_ranks_close_to_fp32(towers, monkeypatch):
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("int8 calibration tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    rng = np.random.default_rng(0)
    words = "bone iron heart coffee tea calcium blood pressure diet meat beans spinach tissue hard long short".split()
    documents = [" ".join(rng.choice(words, size=int(rng.integers(5, 30)))) for _ in range(60)]
    pairs = [(QUERIES[i % 3], d) for i, d in enumerate(documents)]
    ranker = build(towers, "cross", "lora", {"head": "classifier"})
    want = ranker.predict(pairs)
    backend.serve_openvino(ranker, "int8", calibration=pairs)
    assert ranker.serving_backend == "openvino:int8"
    got = ranker.predict(pairs)
    assert not np.allclose(got, want, atol=1e-6)  # quantised: not the float graph
    assert spearmanr(got, want).statistic > 0.9
    dense = build(towers, "dense", "lora", {"projection_dim": 24})
    want = dense.encode_document(documents)
    import ssft

    # int8 with no backend named serves on OpenVINO; lone texts calibrate (a bi-encoder's documents)
    dense = ssft.load(dense, precision="int8", calibration=documents)
    assert dense.serving_backend == "openvino:int8"
    got = dense.encode_document(documents)
    cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() > 0.98


def test_int8_calibration_is_reproducible_and_its_draw_follows_the_seed(towers, monkeypatch):
    """The same calibration items and seed quantise to the same scores, bit for bit; more items than
    ``CALIBRATION_SIZE`` are drawn by the seed, so another seed calibrates on another sample (another fingerprint)."""
    monkeypatch.setattr(backend, "CALIBRATION_SIZE", 8)
    rng = np.random.default_rng(1)
    words = "bone iron heart coffee tea calcium blood pressure diet meat beans spinach tissue".split()
    pairs = [(QUERIES[i % 3], " ".join(rng.choice(words, size=int(rng.integers(4, 30))))) for i in range(40)]

    def served(seed: int):
        ranker = backend.serve_openvino(build(towers, "cross", "lora", {"head": "classifier"}), "int8",
                                        calibration=pairs, seed=seed)
        return ranker.predict(pairs), precisions.calibration_of(ranker)

    first, first_sample = served(0)
    again, again_sample = served(0)
    other, other_sample = served(1)
    np.testing.assert_array_equal(again, first)
    assert again_sample == first_sample
    assert other_sample != first_sample
    assert not np.array_equal(other, first)  # another sample, other quantisation ranges


def _quantized_matmuls(model) -> list[str]:
    """The MatMuls of an OpenVINO graph whose activations NNCF quantises (a FakeQuantize on an input)."""
    return [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"
            and any(op.input_value(i).get_node().get_type_name() == "FakeQuantize" for i in range(2))]


def test_int8_keeps_a_cross_encoders_attention_query_and_key_in_float(towers, monkeypatch):
    pairs = [(QUERIES[i % 3], f"{DOCUMENTS[i % 3]} {i}") for i in range(24)]
    ranker = build(towers, "cross", "lora", {"head": "classifier"})
    backbone = ranker.backbone
    model = backend.convert(backend.Graph(merged_encoder(backbone, None)))
    found = backend.attention_score_projections(model)
    assert [name.split("/")[0].rsplit(".", 1)[-1] for name in found] == ["query", "key"]  # one layer, not the values
    assert backend.attention_score_projections(model, [-1]) == found == backend.attention_score_projections(model, [0])
    inputs = [i for items in backend.calibration_inputs(ranker, pairs)[id(backbone)].values() for i in items]
    everything = _quantized_matmuls(backend.quantize(model, inputs))
    assert set(found) < set(everything) and len(everything) == 6  # q, k, v, attention output, the two FFN layers
    for layers in ([0], "all"):  # the layer named, or every layer
        kept = _quantized_matmuls(backend.quantize(model, inputs, float_attention_layers=layers))
        assert sorted(kept) == sorted(set(everything) - set(found))
    # serving: the layers the ranker declares decide (a cross-encoder keeps every layer's, a bi-encoder none)
    asked = []
    quantize = backend.quantize
    monkeypatch.setattr(backend, "quantize", lambda m, i, float_attention_layers=(): (
        asked.append(float_attention_layers), quantize(m, i, float_attention_layers))[1])
    backend.serve_openvino(ranker, "int8", calibration=pairs)
    dense = build(towers, "dense", "lora", {"projection_dim": 24})
    backend.serve_openvino(dense, "int8", calibration=[d for _, d in pairs])
    assert asked == ["all", ()]
    assert ranker.int8_float_attention_layers == "all" and dense.int8_float_attention_layers == ()
    object.__setattr__(ranker, "int8_float_attention_layers", (0, -1))  # a ranker naming some layers: those
    assert backend._float_attention_layers(ranker) == {id(backbone): (-1, 0)}


def test_attention_score_projections_of_chosen_layers(tmp_path):
    three = save_tiny_bert(tmp_path / "three", layers=3, seed=0)
    ranker = build((three, three), "cross", "lora", {"head": "classifier"})
    encoder = backend.convert(backend.Graph(merged_encoder(ranker.backbone, None)))
    every = backend.attention_score_projections(encoder)
    layer = [int(name.split("layer.")[1].split(".")[0]) for name in every]
    assert layer == [0, 0, 1, 1, 2, 2]  # query and key of each layer, in order
    assert backend.attention_score_projections(encoder, [0, -1]) == every[:2] + every[4:]
    assert backend.attention_score_projections(encoder, [1, 7]) == every[2:4]  # a layer the model lacks: none
    assert backend.attention_score_projections(encoder, []) == []


def test_int8_needs_calibration_and_pairs_for_a_cross_encoder(towers):
    ranker = build(towers, "cross", "lora", {"head": "classifier"})
    with pytest.raises(SsftError, match="calibration needs texts"):
        backend.serve_openvino(ranker, "int8")
    with pytest.raises(SsftError, match="give calibration pairs"):
        backend.serve_openvino(ranker, "int8", calibration=["a lone text"])


def test_backend_choices_and_refusals(towers, monkeypatch):
    import argparse

    from ssft.cli._common import backend_value

    with pytest.raises(SsftError, match=r"^--backend: expected one of auto, torch, openvino, got 'onnx'$"):
        backend.check_backend("onnx")
    # the serving commands default to auto, whatever the precision
    assert [backend_value(argparse.Namespace(backend=b, precision=p))
            for b, p in ((None, "int8"), (None, None), ("torch", "bf16"), ("openvino", None))] == [
        "auto", "auto", "torch", "openvino"]
    ranker = build(towers, "cross", "lora", {"head": "classifier"})
    assert backend.resolve_backend("auto", ranker) == "openvino"  # a job of unknown size
    assert backend.resolve_backend("torch", ranker) == "torch"
    # auto converts only for a job that repays the conversion: AUTO_MIN_INPUTS_PER_THREAD inputs per torch thread
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    assert backend.auto_min_inputs() == 3 * backend.AUTO_MIN_INPUTS_PER_THREAD
    assert backend.resolve_backend("auto", ranker, inputs=backend.auto_min_inputs() - 1) == "torch"
    assert backend.resolve_backend("auto", ranker, inputs=backend.auto_min_inputs()) == "openvino"
    # int8 is OpenVINO's calibrated int8 only: auto takes it to openvino at any size, torch is refused in one line
    assert backend.resolve_backend("auto", ranker, inputs=1, precision="int8") == "openvino"
    with pytest.raises(SsftError, match=r"^--backend: torch with precision int8: int8 runs on OpenVINO"):
        backend.resolve_backend("torch", ranker, precision="int8")
    monkeypatch.setattr(backend, "available", lambda: False)
    assert backend.resolve_backend("auto", ranker) == "torch"  # not installed: auto stays on torch
    monkeypatch.undo()
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="cross", name=str(towers[0]), max_length=48, query_max_length=12)
    prompt = MODELS.get("cross").build(cfg, "prompt", {})
    assert backend.resolve_backend("auto", prompt) == "torch"  # auto never picks what cannot convert
    with pytest.raises(SsftError, match="method 'prompt' cannot run on OpenVINO"):
        backend.resolve_backend("openvino", prompt)
    # int8 asked of a method that cannot convert names what the user gave (--precision), never a --backend they did not
    with pytest.raises(SsftError, match=r"^--precision int8: int8 serves on OpenVINO only, and method 'prompt' cannot "
                                        r"run on OpenVINO.*; serve it at fp32 or bf16 on torch$"):
        backend.resolve_backend("auto", prompt, precision="int8")


def test_serve_returns_the_backend_and_unserve_puts_the_model_back_on_torch(towers):
    ranker = build(towers, "twin", "ss_lora", {"scorer": "cosine", "pooling": "cls"})
    want = scores(ranker)
    small, chosen, torch_side = backend.serve(ranker, "auto", "fp32", inputs=1)  # too small a job: torch
    assert (chosen, torch_side, getattr(small, "serving_backend", None)) == ("torch", "fp32", None)
    served, chosen, torch_side = backend.serve(ranker, "auto", "bf16", inputs=None)
    assert (chosen, torch_side, served.serving_backend) == ("openvino", "fp32", "openvino:bf16")
    assert all(b.serving is not None for b in served.modules() if isinstance(b, Backbone))
    backend.unserve(served)
    assert not hasattr(served, "serving_backend")
    assert all(b.serving is None for b in served.modules() if isinstance(b, Backbone))
    np.testing.assert_allclose(scores(served), want, atol=1e-6)  # torch again, weights untouched


def test_load_with_backend_openvino(towers, tmp_path):
    import ssft

    ranker = build(towers, "dense", "lora", {"projection_dim": 24})
    want = scores(ranker)
    ranker.save(tmp_path / "model")
    served = ssft.load(tmp_path / "model", precision="fp32", backend="openvino")
    assert served.serving_backend == "openvino:fp32"
    np.testing.assert_allclose(scores(served), want, atol=FP32_TOL)
    with pytest.raises(SsftError, match="^backend: expected one of"):
        ssft.load(tmp_path / "model", backend="tensorrt")


# ---------------------------------------------------------------- the export, through sentence-transformers


class _IR(torch.nn.Module):
    """An OpenVINO IR in place of a sentence-transformers Transformer's model: what its OpenVINO backend
    (optimum-intel's OVModelFor*) does — the IR's inputs fed by name, its named output returned."""

    def __init__(self, path: Path, output: str):
        super().__init__()
        model = ov.Core().read_model(str(path))
        self.names = [i.get_any_name() for i in model.inputs]
        self.compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        self.output = output

    def forward(self, **features):
        result = self.compiled({n: features[n].cpu().numpy() for n in self.names})
        return {self.output: torch.from_numpy(np.array(result[self.output]))}


def with_openvino(model, folder: Path):
    """``model`` (a sentence-transformers model loaded from ``folder``) with every Transformer module's model replaced
    by the IR sentence-transformers' OpenVINO loader finds for it (its own ``backend_should_export``)."""
    from sentence_transformers.backend.utils import backend_should_export
    from sentence_transformers.base.modules.transformer import Transformer

    router = folder / "router_config.json"
    structure = json.loads(router.read_text())["structure"] if router.is_file() else {}
    replaced = 0
    for name, module in model.named_modules():
        if not isinstance(module, Transformer):
            continue
        parts = name.split(".")  # "0" at the root; "0.sub_modules.<route>.<i>" inside a Router
        sub = folder / structure[parts[2]][int(parts[3])] if structure else folder
        export, kwargs = backend_should_export(sub, True, {}, backend.IR_FILE, "openvino*.xml", "OpenVINO")
        assert export is False and kwargs == {"subfolder": "openvino", "file_name": backend.IR_FILE}, (sub, kwargs)
        output = "logits" if module.transformer_task == "sequence-classification" else "last_hidden_state"
        config = module.model.config  # what sentence-transformers reads of its model beside the forward
        module.model = _IR(sub / kwargs["subfolder"] / kwargs["file_name"], output)
        module.model.config = config
        replaced += 1
    assert replaced
    return model


@pytest.mark.parametrize("architecture,method,options", [c for c in CASES if c[0] != "cross" or c[1] == "lora"])
def test_sentence_transformers_runs_the_openvino_export_as_ssft(towers, tmp_path, architecture, method, options):
    st = pytest.importorskip("sentence_transformers")
    ranker = build(towers, architecture, method, options)
    ranker.save(tmp_path / "model")
    info = export_run(tmp_path / "model", tmp_path / "export", fmt="openvino")
    out = tmp_path / "export"
    assert info["openvino"] and all((out / x).is_file() and (out / x).with_suffix(".bin").is_file() for x in info["openvino"])
    loaded = load_ranker(tmp_path / "model")
    with torch.no_grad():
        want = loaded(**loaded.tokenize(QUERIES, DOCUMENTS)).float()
    if architecture == "cross":
        got = torch.as_tensor(with_openvino(st.CrossEncoder(str(out)), out).predict(list(zip(QUERIES, DOCUMENTS))))
    elif architecture == "colbert":
        model = with_openvino(st.MultiVectorEncoder(str(out)), out)
        q, d = model.encode_query(QUERIES), model.encode_document(DOCUMENTS)
        got = torch.stack([model.similarity([q[i]], [d[i]]).reshape(()) for i in range(len(QUERIES))]).float()
    else:
        model = with_openvino(st.SentenceTransformer(str(out)), out)
        q = model.encode_query(QUERIES, convert_to_tensor=True)
        d = model.encode_document(DOCUMENTS, convert_to_tensor=True)
        got = model.similarity(q, d).diagonal().float() * (getattr(loaded, "score_scale", 1.0) or 1.0)
    assert torch.allclose(got, want, atol=FP32_TOL), (got, want)


def test_latency_cli_times_the_openvino_backend_and_serving_refuses_torch_int8(towers, tiny_dataset, tmp_path, capsys):
    """ssft-latency serves as the other commands do: --backend openvino times the converted encoder (its rows say
    so), --precision int8 alone is OpenVINO's calibrated int8, and torch's dynamic int8 is refused in one line."""
    from ssft.cli.latency import main as latency_main
    from ssft.cli.rerank import main as rerank_main

    build(towers, "dense", "lora", {"projection_dim": 24}).save(tmp_path / "run" / "model")
    common = [str(tmp_path / "run"), "--data", str(tiny_dataset), "--repeats", "1", "--batch-sizes", "2"]
    for flags, want in ((["--backend", "openvino", "--precision", "fp32"], "openvino:fp32"),
                        (["--precision", "int8"], "openvino:int8"), ([], "bf16" if precisions.cpu_bf16_native() else "fp32")):
        out = tmp_path / ("lat" + "".join(flags))
        assert latency_main([*common, *flags, "--output", str(out)]) == 0
        assert {row["precision"] for row in json.loads((out / "latency.json").read_text())} == {want}, flags
    capsys.readouterr()
    assert latency_main([*common, "--backend", "torch", "--precision", "int8"]) != 0
    err = capsys.readouterr().err.strip()  # refused before the model is loaded: one line, nothing else
    assert err.startswith("ssft-latency: error: --backend: torch with precision int8: int8 runs on OpenVINO")
    assert "\n" not in err
    cross = tmp_path / "cross"
    build(towers, "cross", "lora", {"head": "classifier"}).save(cross)
    capsys.readouterr()
    assert rerank_main([str(cross), "--data", str(tiny_dataset), "--first-stage", "bm25", "--split", "test",
                        "--output", str(tmp_path / "rr"), "--backend", "torch", "--precision", "int8"]) != 0
    assert capsys.readouterr().err.strip().startswith("ssft-rerank: error: --backend: torch with precision int8")
    assert not (tmp_path / "rr").exists()  # refused before anything was written
