"""ssft.adapters.cpu_kernels: oneDNN linear / linear+GELU for CPU inference — same outputs as the plain forward,
used only where no gradient is recorded, reading weights changed in place, and out of the way of training."""
from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from ssft.adapters import cpu_kernels
from ssft.adapters.cpu_kernels import _DenseGeluForward, _LinearForward, remove_cpu_kernels, use_cpu_kernels
from ssft.core import precision
from tests.helpers import needs_torch_bf16

pytestmark = pytest.mark.skipif(not cpu_kernels.available(), reason="this torch build has no oneDNN linear kernels")


def tiny_bert(seed: int = 0, hidden_act: str = "gelu"):
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=64, hidden_act=hidden_act)
    return BertModel(config, add_pooling_layer=False).eval()


def inputs(batch: int = 4, length: int = 40, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 120, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 27:] = 0  # padding in one row
    return ids, mask


def hidden(model, ids, mask):
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state


def test_inference_output_matches_the_plain_forward():
    model = tiny_bert()
    ids, mask = inputs()
    expected = hidden(model, ids, mask)
    patched = use_cpu_kernels(model)
    # 2 layers x (query, key, value, attention output, output dense, intermediate dense) + 2 dense+GELU blocks
    assert patched == 2 * 6 + 2
    kinds = [type(m.__dict__["forward"]) for m in model.modules() if "forward" in m.__dict__]
    assert kinds.count(_DenseGeluForward) == 2 and kinds.count(_LinearForward) == 12
    got = hidden(model, ids, mask)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert use_cpu_kernels(model) == 0  # idempotent


def test_the_fast_path_is_really_taken_under_inference_and_not_under_grad(monkeypatch):
    model = tiny_bert()
    use_cpu_kernels(model)
    ids, mask = inputs()
    calls = []
    real = cpu_kernels._linear
    monkeypatch.setattr(cpu_kernels, "_linear", lambda *a: calls.append(a[2]) or real(*a))
    hidden(model, ids, mask)
    assert calls.count("gelu") == 2 and calls.count("none") == 2 * 5
    calls.clear()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    assert len(calls) == 12
    calls.clear()
    model.train()
    model(input_ids=ids, attention_mask=mask).last_hidden_state.sum().backward()
    for p in model.parameters():  # frozen layers too: with grad mode on, never the fast path
        p.requires_grad_(False)
    model(input_ids=ids, attention_mask=mask)
    assert calls == []  # training: the original forward, every time


def test_training_gradients_are_those_of_the_plain_model():
    ids, mask = inputs()
    grads = []
    for install in (False, True):
        model = tiny_bert()
        if install:
            use_cpu_kernels(model)
        model.train()
        torch.manual_seed(3)  # same dropout masks
        model(input_ids=ids, attention_mask=mask).last_hidden_state.pow(2).mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=0, atol=0)


def test_weights_changed_in_place_are_used():
    model = tiny_bert()
    use_cpu_kernels(model)
    ids, mask = inputs()
    hidden(model, ids, mask)
    with torch.no_grad():  # what an optimizer step between two evaluations, or a LoRA merge (.data +=), does
        for i, p in enumerate(model.parameters()):
            if i % 2:
                p.add_(0.01 * torch.randn_like(p))
            else:
                p.data += 0.01 * torch.randn_like(p)
    reference = copy.deepcopy(model)
    remove_cpu_kernels(reference)
    expected = hidden(reference, ids, mask)
    torch.testing.assert_close(hidden(model, ids, mask), expected, rtol=1e-5, atol=1e-5)


def test_autocast_and_other_dtypes_take_the_original_forward(monkeypatch):
    model = tiny_bert()
    ids, mask = inputs()
    reference = copy.deepcopy(model)
    use_cpu_kernels(model)
    calls = []
    real = cpu_kernels._linear
    monkeypatch.setattr(cpu_kernels, "_linear", lambda *a: calls.append(a[2]) or real(*a))
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        expected = reference(input_ids=ids, attention_mask=mask).last_hidden_state
    assert calls == []  # autocast decides the precision, as without the kernels
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    layer = nn.Linear(4, 3).double()
    use_cpu_kernels(layer)
    with torch.inference_mode():
        assert layer(torch.ones(2, 4, dtype=torch.float64)).dtype == torch.float64
    assert calls == []


@needs_torch_bf16
def test_a_bf16_model_takes_the_fast_path_and_computes_as_its_plain_forward(monkeypatch):
    """ssft's bf16 inference runs bf16 weights (ssft.core.precision.BF16Weights): the fused kernels serve it too."""
    model = tiny_bert().to(torch.bfloat16)
    ids, mask = inputs(length=64)
    expected = hidden(model, ids, mask).float()
    use_cpu_kernels(model)
    calls = []
    real = cpu_kernels._linear
    monkeypatch.setattr(cpu_kernels, "_linear", lambda *a: calls.append(a[2]) or real(*a))
    got = hidden(model, ids, mask)
    assert got.dtype == torch.bfloat16 and calls.count("gelu") == 2 and calls.count("none") == 2 * 5
    # bf16 rounding of the two summation orders: a few units of bf16's 8-bit mantissa
    torch.testing.assert_close(got.float(), expected, rtol=0, atol=0.1)
    assert (got.float() - expected).abs().mean() < 0.01
    layer = nn.Linear(4, 3).to(torch.bfloat16)  # mixed dtypes: the original forward decides
    use_cpu_kernels(layer)
    calls.clear()
    with torch.inference_mode(), pytest.raises(RuntimeError):
        layer(torch.ones(200, 4))
    assert calls == []


def test_bf16_takes_the_original_forward_where_onednn_has_no_bf16(monkeypatch):
    """On a CPU without AVX-512 (an AVX2-only AMD EPYC) oneDNN refuses bf16 inner products while torch's own bf16
    linear still runs: a bf16 model asked for there computes as its plain forward instead of failing."""
    model = tiny_bert().to(torch.bfloat16)
    ids, mask = inputs(length=64)
    expected = hidden(model, ids, mask)
    use_cpu_kernels(model)
    monkeypatch.setattr(precision, "onednn_bf16", lambda: False)
    calls = []
    real = cpu_kernels._linear
    monkeypatch.setattr(cpu_kernels, "_linear", lambda *a: calls.append(a[2]) or real(*a))
    torch.testing.assert_close(hidden(model, ids, mask), expected, rtol=0, atol=0)
    assert calls == []
    fp32 = tiny_bert()
    use_cpu_kernels(fp32)
    hidden(fp32, ids, mask)
    assert calls.count("gelu") == 2  # float32 keeps the fast path


def test_tanh_gelu_is_not_fused():
    model = tiny_bert(hidden_act="gelu_new")
    assert use_cpu_kernels(model) == 2 * 6  # the linear layers only
    ids, mask = inputs()
    reference = copy.deepcopy(model)
    remove_cpu_kernels(reference)
    torch.testing.assert_close(hidden(model, ids, mask), hidden(reference, ids, mask), rtol=1e-5, atol=1e-5)


def test_state_dict_copy_pickle_and_removal():
    model = tiny_bert()
    keys = list(model.state_dict())
    use_cpu_kernels(model)
    ids, mask = inputs()
    expected = hidden(model, ids, mask)
    assert list(model.state_dict()) == keys
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        forward = clone.encoder.layer[0].attention.self.query.__dict__["forward"]
        assert forward.module is clone.encoder.layer[0].attention.self.query  # bound to the copy, not the original
        torch.testing.assert_close(hidden(clone, ids, mask), expected)
    assert remove_cpu_kernels(model) == 14
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_small_calls_take_the_original_forward(monkeypatch):
    """A single short query (fewer than MIN_ROWS tokens) is faster through PyTorch's kernels."""
    model = tiny_bert()
    use_cpu_kernels(model)
    calls = []
    real = cpu_kernels._linear
    monkeypatch.setattr(cpu_kernels, "_linear", lambda *a: calls.append(a[2]) or real(*a))
    assert 40 < cpu_kernels.MIN_ROWS <= 4 * 40
    hidden(model, *inputs(batch=1, length=40))
    assert calls == []
    hidden(model, *inputs(batch=4, length=40))
    assert len(calls) == 12


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("SSFT_CPU_KERNELS", "0")
    assert not cpu_kernels.available()
    assert use_cpu_kernels(tiny_bert()) == 0


def test_rankers_install_it_on_their_first_inference_and_score_alike(tiny_model_dir, monkeypatch):
    """A cross-encoder scores the same pairs alike with and without the kernels; training forwards never install."""
    monkeypatch.setattr(cpu_kernels, "MIN_ROWS", 1)  # two short pairs: take the fast path all the same
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS

    ranker = MODELS.get("cross").build(ModelConfig(architecture="cross", name=str(tiny_model_dir), max_length=32), "lora", {})
    batch = ranker.tokenize(["vitamin d bone", "statin heart"], ["vitamin d helps bone health", "fish oil and the heart"])
    ranker.train()
    ranker(**batch).sum().backward()
    assert not ranker.backbone.cpu_kernels_installed
    ranker.eval()
    reference = copy.deepcopy(ranker)
    remove_cpu_kernels(reference)
    reference.backbone.cpu_kernels_installed = True  # keep the reference on the plain forward
    with torch.inference_mode():
        got = ranker(**batch)
        expected = reference(**batch)
    assert ranker.backbone.cpu_kernels_installed
    assert any(isinstance(m.__dict__.get("forward"), _LinearForward) for m in ranker.backbone.modules())
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["mpnet", "distilbert", "roberta"])
def test_other_encoder_families_give_the_same_outputs(family):
    """MPNet (relative position bias; dense + GELU block like BERT's), DistilBERT (lin1 / GELU / lin2: linear
    layers only) and RoBERTa through the kernels give the outputs of their plain forward."""
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=120, max_position_embeddings=66)
    if family == "mpnet":
        model = transformers.MPNetModel(transformers.MPNetConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                                 intermediate_size=64, **common), add_pooling_layer=False)
    elif family == "distilbert":
        model = transformers.DistilBertModel(transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                                                           **common))
    else:
        model = transformers.RobertaModel(transformers.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                                     intermediate_size=64, **common), add_pooling_layer=False)
    model.eval()
    ids, mask = inputs()
    expected = hidden(model, ids, mask)
    fused = 0 if family == "distilbert" else 2
    assert use_cpu_kernels(model) == 2 * 6 + fused
    torch.testing.assert_close(hidden(model, ids, mask), expected, rtol=1e-5, atol=1e-5)
