"""001's hidden-state prefix (Eq. 2–3) on a tiny random BERT cross-encoder."""
import pytest
import torch

from ssft.adapters import count_parameters
from ssft.adapters.hidden_prefix import HiddenPrefix
from ssft.config.recipe import ModelConfig
from ssft.core.errors import SsftError
from ssft.models import load_ranker
from ssft.models.cross import CrossEncoder
from tests.helpers import assert_save_load_round_trip

QUERIES = ["vitamin d", "statins and cholesterol", "fish oil", "coffee"]
DOCS = ["bone health and vitamin d in adults", "statins lower ldl", "omega three fatty acids", "liver disease"]


def build(tiny_model_dir, **options):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="cross", name=str(tiny_model_dir), max_length=48)
    return CrossEncoder.build(cfg, "hidden_prefix", options)


def test_trainable_set_is_prefix_and_head(tiny_model_dir):
    ranker = build(tiny_model_dir)
    trainable = {n for n, p in ranker.named_parameters() if p.requires_grad}
    expected = {"head.weight", "head.bias", "pooler.weight", "pooler.bias", "backbone.hidden_prefix.source"}  # head: classifier
    expected |= {f"backbone.hidden_prefix.mlps.{layer}.{i}.{w}" for layer in range(2) for i in (0, 2) for w in ("weight", "bias")}
    assert trainable == expected


@pytest.mark.parametrize("options", [{}, {"length": 4, "source_dim": 8, "mlp_dim": 16}])
def test_parameter_count_matches_formula(tiny_model_dir, options):
    ranker = build(tiny_model_dir, **options)
    length, mlp = options.get("length", 10), options.get("mlp_dim", 256)
    source = options.get("source_dim") or 32  # default: the hidden size
    layers, hidden = 2, 32
    formula = length * source + layers * (source * mlp + mlp + mlp * hidden + hidden)
    assert formula == HiddenPrefix.expected_parameters(layers, hidden, length, source, mlp)
    assert sum(p.numel() for p in ranker.backbone.hidden_prefix.parameters()) == formula
    trainable, _ = count_parameters(ranker)
    assert trainable == formula + hidden * hidden + hidden + hidden + 1  # + the head: pooler (h x h + h) and linear (h + 1)


def test_gradients_reach_source_and_every_layer_mlp_backbone_frozen(tiny_model_dir):
    ranker = build(tiny_model_dir).train()
    frozen_before = {n: p.detach().clone() for n, p in ranker.named_parameters() if not p.requires_grad}
    assert any(n.startswith("backbone.model.encoder") for n in frozen_before)
    optimizer = torch.optim.AdamW([p for p in ranker.parameters() if p.requires_grad], lr=1e-2)
    scores = ranker(**ranker.tokenize(QUERIES, DOCS))
    (scores * torch.tensor([1.0, -2.0, 3.0, -4.0])).sum().backward()
    prefix = ranker.backbone.hidden_prefix
    assert prefix.source.grad is not None and prefix.source.grad.abs().sum() > 0
    for layer, mlp in enumerate(prefix.mlps):
        for name, p in mlp.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reached layer {layer} {name}"
    optimizer.step()
    for n, p in ranker.named_parameters():
        if not p.requires_grad:
            assert p.grad is None
            assert torch.equal(p.detach(), frozen_before[n]), f"frozen {n} changed"


def test_prefix_replaces_hidden_states_at_every_layer(tiny_model_dir):
    """The self-attention input of layer l holds P_l = MLP_l(P') at the prefix positions (Eq. 2), and the
    real tokens after them."""
    ranker = build(tiny_model_dir, length=3).eval()
    seen = []
    layers = ranker.backbone.model.encoder.layer
    handles = [layer.attention.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().clone()))
               for layer in layers]
    inputs = ranker.tokenize(QUERIES[:2], DOCS[:2])
    try:
        with torch.no_grad():
            ranker(**inputs)
            expected = ranker.backbone.hidden_prefix()
    finally:
        for h in handles:
            h.remove()
    assert len(seen) == 2
    for layer, hidden in enumerate(seen):
        assert hidden.shape[1] == inputs["input_ids"].shape[1] + 3
        torch.testing.assert_close(hidden[:, :3], expected[layer].expand(2, -1, -1))
    assert not torch.allclose(seen[1][:, 3:], seen[0][:, 3:])  # real tokens flow on through the layers
    assert not any(layer._forward_pre_hooks for layer in layers), "prefix hooks left behind"


def test_output_changes_with_prefix_and_output_is_aligned(tiny_model_dir):
    ranker = build(tiny_model_dir).eval()
    inputs = ranker.tokenize(QUERIES[:2], DOCS[:2])
    with torch.no_grad():
        hidden = ranker.backbone(**inputs)
        assert hidden.shape[:2] == inputs["input_ids"].shape
        before = ranker(**inputs)
        ranker.backbone.hidden_prefix.source.add_(torch.randn_like(ranker.backbone.hidden_prefix.source))
        after = ranker(**inputs)
    assert not torch.allclose(before, after), "the prefix does not reach the output"


def test_padding_does_not_change_a_score(tiny_model_dir):
    ranker = build(tiny_model_dir).eval()
    inputs = ranker.tokenize(QUERIES[:2], DOCS[:2])
    one = {k: v[:1] for k, v in inputs.items()}
    padded = {k: torch.cat([v[:1], torch.zeros_like(v[:1, :5])], dim=1) for k, v in inputs.items()}
    with torch.no_grad():
        torch.testing.assert_close(ranker(**one), ranker(**padded), atol=1e-5, rtol=1e-5)


def test_segment_ids_reach_the_model(tiny_model_dir):
    ranker = build(tiny_model_dir).eval()
    inputs = ranker.tokenize(QUERIES[:2], DOCS[:2])
    with torch.no_grad():
        a = ranker(**inputs)
        b = ranker(**{**inputs, "token_type_ids": torch.zeros_like(inputs["token_type_ids"])})
    assert not torch.allclose(a, b)


def test_save_load_gives_identical_scores(tiny_model_dir, tmp_path):
    ranker = build(tiny_model_dir, length=5)
    loaded = assert_save_load_round_trip(ranker, tmp_path / "m", QUERIES, DOCS)
    saved = {p.name for p in (tmp_path / "m").iterdir()}
    assert {"hidden_prefix.json", "hidden_prefix.safetensors", "ranker.safetensors"} <= saved
    assert "backbone" not in saved and "adapter" not in saved  # the frozen base is not copied
    assert loaded.backbone.hidden_prefix.length == 5


def test_corrupt_prefix_weights_are_a_clear_error(tiny_model_dir, tmp_path):
    from safetensors.torch import save_file

    build(tiny_model_dir).save(tmp_path / "m")
    save_file({"source": torch.zeros(3, 3)}, tmp_path / "m" / "hidden_prefix.safetensors")
    with pytest.raises(SsftError, match="does not match"):
        load_ranker(tmp_path / "m")


def test_bad_options_are_rejected(tiny_model_dir):
    with pytest.raises(SsftError, match="length"):
        build(tiny_model_dir, length=0)
    with pytest.raises(SsftError, match="unknown option"):
        build(tiny_model_dir, num_virtual_tokens=3)
