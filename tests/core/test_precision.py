"""Inference precision (ssft.core.precision): it reaches the forward of every inference path (bf16 inside the linear
layers under inference, fp32 where not and whenever a gradient is recorded), ``auto`` follows the CPU's flags, the
embedding cache keys differ by precision, int8 really quantises (and stays close), bf16 training runs on a CPU."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn
from transformers import TrainingArguments

from ssft.config.recipe import ModelConfig, recipe_from_dict
from ssft.core import precision
from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset, RankerCollator, TrainingGroups, build_examples
from ssft.losses import PairwiseSoftmaxLoss
from ssft.models.colbert import ColBert
from ssft.models.corpus import corpus_vectors, encode_corpus
from ssft.models.cross import CrossEncoder
from ssft.models.dense import DenseDualEncoder
from ssft.models.embedding_cache import cache_dir, model_fingerprint
from ssft.teachers.cross import load_cross_teacher
from ssft.training.prediction import prediction_trainer
from ssft.training.trainer import RankingTrainer


class LinearDtypes:
    """Records the output dtype of every nn.Linear forward of a model while active."""

    def __init__(self, model: nn.Module):
        self.model, self.seen, self.handles = model, [], []

    def __enter__(self):
        for m in self.model.modules():
            if isinstance(m, nn.Linear):
                self.handles.append(m.register_forward_hook(lambda mod, args, out: self.seen.append(out.dtype)))
        return self.seen

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()


def _cross(tiny_model_dir):
    torch.manual_seed(0)
    return CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "full", {}).eval().requires_grad_(False)


def _dense(tiny_model_dir):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=48)
    return DenseDualEncoder.build(cfg, "full", {}).eval().requires_grad_(False)


def _pairs(ds):
    return PairDataset({q: {d: 1.0 for d in ds.corpus} for q in ("q5", "q6")}, 6, ds)


def test_bf16_reaches_the_linear_layers_only_under_inference(tiny_model_dir):
    ranker = _cross(tiny_model_dir)
    inputs = ranker.tokenize(["vitamin d bones"], ["vitamin d and bone health"])
    with precision.inference(ranker, "bf16"):
        with torch.inference_mode(), LinearDtypes(ranker) as seen:
            scores = ranker(**inputs)
        assert seen and torch.bfloat16 in seen  # the transformer's linear layers ran in bf16
        assert scores.dtype == torch.float32
        with LinearDtypes(ranker) as seen_grad:  # a forward that records gradient is never autocast by it
            ranker(**inputs)
        assert set(seen_grad) == {torch.float32}
    assert precision.model_precision(ranker) == "fp32"  # restored once the block ends
    with torch.inference_mode(), LinearDtypes(ranker) as seen:
        ranker(**inputs)
    assert set(seen) == {torch.float32}


def test_bf16_runs_bf16_copies_of_the_weights_and_follows_a_weight_update(tiny_model_dir):
    """bf16 inference computes with bfloat16 copies of the transformer's weights: the float32 parameters are never
    touched, the result is what a model whose weights are bfloat16 computes, and a weight changed in place (an optimizer
    step) is used at the next call, not a stale copy."""
    ranker = _cross(tiny_model_dir)
    inputs = ranker.tokenize(["vitamin d bones", "iron"], ["vitamin d and bone health", "red meat holds iron"])
    before = {name: p.clone() for name, p in ranker.named_parameters()}

    def bf16_reference() -> torch.Tensor:  # the transformer cast to bfloat16, the head kept float32 (as ssft runs it)
        import copy

        reference = copy.deepcopy(ranker)
        reference.backbone.model.to(torch.bfloat16)
        with torch.inference_mode():
            hidden = reference.backbone._forward(inputs["input_ids"], inputs["attention_mask"],
                                                 inputs.get("token_type_ids"), None)
        return hidden.float()

    with precision.inference(ranker, "bf16"), torch.inference_mode():
        hidden = ranker.backbone(inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids"))
        first = ranker(**inputs)
    assert torch.equal(hidden, bf16_reference())
    assert all(p.dtype == torch.float32 and torch.equal(p, before[name]) for name, p in ranker.named_parameters())
    with torch.no_grad():  # an optimizer step: in place, no forward in between
        for p in ranker.backbone.parameters():
            p.add_(0.05 * torch.randn_like(p))
    with precision.inference(ranker, "bf16"), torch.inference_mode():
        hidden = ranker.backbone(inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids"))
        second = ranker(**inputs)
    assert torch.equal(hidden, bf16_reference()) and not torch.equal(first, second)


def test_prediction_trainer_and_validation_score_in_their_precision(tiny_model_dir, tiny_dataset, tmp_path):
    ds = load_dataset(str(tiny_dataset))
    ranker = _cross(tiny_model_dir)
    pairs = _pairs(ds)
    with LinearDtypes(ranker) as seen:
        bf16 = prediction_trainer(ranker, 8, precision="bf16").score(pairs)
    assert torch.bfloat16 in seen and bf16.dtype == np.float32
    with LinearDtypes(ranker) as seen:
        fp32 = prediction_trainer(ranker, 8, precision="fp32").score(pairs)
    assert set(seen) == {torch.float32}
    # bf16 weights: an 8-bit mantissa along the residual stream, ~1e-2 relative (a garbage score is off by ~1)
    assert np.abs(bf16 - fp32).max() < 0.1 * (np.abs(fp32).max() + 1e-3)
    # validation during training (RankingTrainer.evaluate) goes through the same precision
    ranker.requires_grad_(True)
    examples = build_examples(ds.qrels("train"), list(ds.corpus), None)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, report_to=[],
                             remove_unused_columns=False, use_cpu=True, save_strategy="no", dataloader_pin_memory=False)
    trainer = RankingTrainer(model=ranker, args=args, train_dataset=TrainingGroups(examples, ds, 2), eval_dataset=pairs,
                             data_collator=RankerCollator(ranker), loss=PairwiseSoftmaxLoss(), eval_qrels=ds.qrels("test"),
                             eval_metrics=["nDCG@10"], precision="bf16")
    with LinearDtypes(ranker) as seen:
        trainer.evaluate()
    assert torch.bfloat16 in seen


def test_corpus_encoding_and_teachers_in_their_precision(tiny_model_dir, tiny_dataset):
    ds = load_dataset(str(tiny_dataset))
    dense = _dense(tiny_model_dir)
    texts = [d.full_text for d in ds.corpus.values()]
    with precision.inference(dense, "bf16") as model, LinearDtypes(dense) as seen:
        bf16 = encode_corpus(model, texts)
    assert torch.bfloat16 in seen and bf16.dtype == np.float32
    fp32 = encode_corpus(dense, texts)
    assert np.abs(bf16 - fp32).max() < 0.05
    teacher = load_cross_teacher(str(tiny_model_dir), "cls_sep", 48).set_precision("bf16")
    batch = teacher.tokenize(["vitamin d"], ["vitamin d and bone health"])
    with LinearDtypes(teacher.model) as seen:
        q, d = teacher.pairs(batch["t_p_input_ids"], batch["t_p_attention_mask"], batch["t_p_token_type_ids"])
    assert torch.bfloat16 in seen and q.dtype == torch.float32


def test_auto_follows_the_cpu(monkeypatch):
    precision.cpu_bf16_native.cache_clear()
    monkeypatch.setattr(precision, "onednn_bf16", lambda: True)
    try:
        monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx512f", "avx512bw", "avx512_vnni"})  # AVX-512, no bf16
        assert precision.resolve("auto", "cpu") == "fp32"
        precision.cpu_bf16_native.cache_clear()
        monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx512f", "amx_bf16", "amx_tile"})
        assert precision.resolve("auto", "cpu") == "bf16"
    finally:
        precision.cpu_bf16_native.cache_clear()
    assert precision.resolve("fp32", "cpu") == "fp32" and precision.resolve("int8", "cpu") == "int8"
    with pytest.raises(SsftError, match="int8.*CPU only"):
        precision.resolve("int8", "cuda")
    with pytest.raises(SsftError, match="eval.precision: expected one of auto, fp32, bf16, int8, got 'fp16'"):
        precision.check("fp16", "eval.precision")


def test_int8_quantises_a_copy_and_scores_stay_close(tiny_model_dir, tiny_dataset):
    ds = load_dataset(str(tiny_dataset))
    ranker = _cross(tiny_model_dir)
    quantized = precision.quantize_int8(ranker)
    int8_linear = [m for m in quantized.modules() if type(m).__module__.startswith("torch.ao.nn.quantized.dynamic")]
    assert int8_linear and not any(type(m) is nn.Linear for m in quantized.modules())
    assert any(type(m) is nn.Linear for m in ranker.modules())  # the model itself untouched
    pairs = _pairs(ds)
    fp32 = prediction_trainer(ranker, 8).score(pairs)
    int8 = prediction_trainer(ranker, 8, precision="int8").score(pairs)
    assert not np.array_equal(int8, fp32)  # it did run the quantised copy
    assert np.abs(int8 - fp32).max() < 0.05
    # the representations a quantised encoder gives: close to float32's
    dense = _dense(tiny_model_dir)
    texts = [d.full_text for d in ds.corpus.values()]
    with precision.inference(dense, "int8") as model:
        vectors = encode_corpus(model, texts)
    cosine = (vectors * encode_corpus(dense, texts)).sum(1)  # unit vectors
    assert cosine.min() > 0.98


def test_cache_keys_differ_by_precision(tiny_model_dir, tiny_dataset):
    ds = load_dataset(str(tiny_dataset))
    colbert = ColBert.build(ModelConfig(architecture="colbert", name=str(tiny_model_dir), max_length=48), "full", {})
    colbert.eval().requires_grad_(False)
    keys = {model_fingerprint(colbert)}
    with precision.inference(colbert, "bf16") as model:
        keys.add(model_fingerprint(model))
    with precision.inference(colbert, "int8") as model:
        keys.add(model_fingerprint(model))
    assert len(keys) == 3
    # and the on-disk cache keeps the dense corpus vectors of each precision apart
    dense = _dense(tiny_model_dir)
    _, fp32 = corpus_vectors(dense, ds)
    with precision.inference(dense, "bf16") as model:
        _, bf16 = corpus_vectors(model, ds)
    assert len(list(cache_dir().glob("*.safetensors"))) == 2
    assert not np.array_equal(fp32, bf16)


def test_recipe_checks_eval_precision():
    assert recipe_from_dict({"eval": {"precision": "bf16"}}).eval.precision == "bf16"
    with pytest.raises(SsftError, match="eval.precision: expected one of auto, fp32, bf16, int8, got 'half'"):
        recipe_from_dict({"eval": {"precision": "half"}}, source="r.yaml")


def test_training_bf16_alone_trains_in_bf16_on_a_cpu(tiny_model_dir, tiny_dataset, tmp_path):
    """training.bf16 without training.use_cpu: the run's TrainingArguments train on the CPU under bf16 autocast."""
    from ssft.pipeline.folder import train_output_folder
    from ssft.pipeline.run import prepare

    if torch.cuda.is_available():
        pytest.skip("checks the CPU path")
    recipe = recipe_from_dict({"model": {"name": str(tiny_model_dir), "max_length": 48},
                               "data": {"dataset": str(tiny_dataset)},
                               "training": {"output_dir": str(tmp_path / "run"), "bf16": True, "max_steps": 1,
                                            "per_device_train_batch_size": 2}}, source="r.yaml")
    folder = train_output_folder(tmp_path / "run")
    plan = prepare(recipe, folder, overwrite=False, resume_with_changes=False)
    assert plan.args.bf16 and plan.args.use_cpu and plan.args.device.type == "cpu"
    ds = load_dataset(str(tiny_dataset))
    ranker = CrossEncoder.build(recipe.model, "full", {})
    examples = build_examples(ds.qrels("train"), list(ds.corpus), None)
    args = TrainingArguments(**{**plan.training_kwargs, "report_to": [], "save_strategy": "no", "eval_strategy": "no"})
    trainer = RankingTrainer(model=ranker, args=args, train_dataset=TrainingGroups(examples, ds, 2),
                             data_collator=RankerCollator(ranker), loss=PairwiseSoftmaxLoss())
    with LinearDtypes(ranker) as seen:
        trainer.train()
    assert torch.bfloat16 in seen


def test_latency_cli_records_its_precision(tiny_model_dir, tiny_dataset, tmp_path):
    import json

    from ssft.cli.latency import main as latency_main

    _dense(tiny_model_dir).save(tmp_path / "run" / "model")
    assert latency_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--repeats", "1", "--batch-sizes", "2",
                         "--precision", "bf16", "--output", str(tmp_path / "lat")]) == 0
    assert json.loads((tmp_path / "lat" / "latency.json").read_text())[0]["precision"] == "bf16"


@pytest.mark.parametrize("architecture, prec, train_bf16", [("cross", "int8", False), ("dense", "bf16", False),
                                                             ("cross", "int8", True), ("cross", "fp32", True)])
def test_a_run_validates_tests_and_records_in_its_precision(architecture, prec, train_bf16, tiny_model_dir, tiny_dataset,
                                                             tmp_path, monkeypatch):
    """Every evaluation of a run (validation during training, the test split) computes at eval.precision — also in
    a bf16 training run, whose prepared model accelerate wraps in a bf16 autocast (int8 layers then got bf16
    activations and failed; fp32 was scored in bf16)."""
    import json
    from contextlib import contextmanager

    from ssft.pipeline.run import run_recipe

    recipe = recipe_from_dict({"model": {"architecture": architecture, "name": str(tiny_model_dir), "max_length": 48},
                               "data": {"dataset": str(tiny_dataset)}, "eval": {"precision": prec, "depth": 6},
                               "loss": {"name": "contrastive"} if architecture == "dense" else {},
                               "training": {"output_dir": str(tmp_path / "run"), "max_steps": 2, "report_to": [],
                                            "per_device_train_batch_size": 2, "bf16": train_bf16}}, source="r.yaml")
    asked: list = []
    seen: list = []
    real = precision.inference

    @contextmanager
    def watched(model, p):
        asked.append(p)
        with real(model, p) as running, LinearDtypes(running) as dtypes:
            yield running
        seen.extend(dtypes)

    # every evaluation (validation during training, the test split) runs through ssft.core.precision.inference
    monkeypatch.setattr(precision, "inference", watched)
    tensorboard_before = os.environ.get("TENSORBOARD_LOGGING_DIR")
    results = run_recipe(recipe)
    # the run pointed TensorBoard at its own logs/ while it ran; a process started after it must not inherit that
    assert os.environ.get("TENSORBOARD_LOGGING_DIR") == tensorboard_before
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert info["precision"] == prec and "test" in results
    assert info["training_precision"] == ("bf16" if train_bf16 else "fp32")
    assert len(asked) >= 2 and set(asked) == {prec}
    if prec != "int8":  # a quantised layer is not an nn.Linear any more
        assert seen and set(seen) == {torch.bfloat16 if prec == "bf16" else torch.float32}


@pytest.mark.parametrize("method", ["lora", "ss_lora"])
def test_int8_scores_a_model_with_an_unmerged_lora_adapter(method, tiny_model_dir, tiny_dataset):
    """A LoRA run loaded for serving keeps its adapter unmerged: int8 quantises the base layers and leaves
    lora_A / lora_B in float32 (PEFT's forward reads their weight dtype; quantised, it failed)."""
    ds = load_dataset(str(tiny_dataset))
    torch.manual_seed(0)
    if method == "lora":
        ranker = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 4})
    else:
        ranker = DenseDualEncoder.build(ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=48),
                                        "ss_lora", {"r": 4})
    for name, p in ranker.named_parameters():  # a trained adapter: lora_B no longer zero
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    ranker.eval().requires_grad_(False)
    quantized = precision.quantize_int8(ranker)
    lora = [n for n, m in quantized.named_modules() if ".lora_" in n and type(m) is nn.Linear]
    base = [n for n, m in quantized.named_modules() if n.endswith("base_layer")
            and type(m).__module__.startswith("torch.ao.nn.quantized.dynamic")]
    assert lora and base
    if method == "lora":
        pairs = _pairs(ds)
        fp32 = prediction_trainer(ranker, 8).score(pairs)
        int8 = prediction_trainer(ranker, 8, precision="int8").score(pairs)
        assert not np.array_equal(int8, fp32) and np.abs(int8 - fp32).max() < 0.05
    else:
        texts = [d.full_text for d in ds.corpus.values()]
        with precision.inference(ranker, "int8") as model:
            vectors = encode_corpus(model, texts)
        assert (vectors * encode_corpus(ranker, texts)).sum(1).min() > 0.98
