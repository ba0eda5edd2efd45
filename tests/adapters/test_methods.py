"""Every fine-tuning method on a tiny random BERT: trainable set, gradient flow, frozen weights, save/load."""
import re

import pytest
import torch

from ssft.adapters import count_parameters
from ssft.config.recipe import ModelConfig
from ssft.models.cross import CrossEncoder
from tests.helpers import assert_save_load_round_trip

METHODS = ["full", "lora", "lora++", "prefix", "prompt"]

# what each method may train inside the backbone (the ranker head is always trainable)
EXPECTED_TRAINABLE = {
    "full": r"backbone\.model\.(embeddings|encoder)\..*",
    "lora": r"backbone\.model\.base_model\.model\.encoder\.layer\.\d\.attention\.self\.(query|value)\.lora_[AB]\.default\.weight",
    "lora++": r"backbone\.model\.base_model\.model\.encoder\.layer\.\d\.attention\.(self\.(query|value)|output\.dense)"
              r"\.lora_[AB]\.default\.weight",
    "prefix": r"backbone\.model\.prompt_encoder\.default\.embedding\.weight",
    "prompt": r"backbone\.model\.prompt_encoder\.default\.embedding\.weight",
}


def build(tiny_model_dir, method, **options):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="cross", name=str(tiny_model_dir), max_length=48)
    return CrossEncoder.build(cfg, method, options)


def batch(ranker, n=4):
    queries = ["vitamin d", "statins and cholesterol", "fish oil", "coffee"][:n]
    docs = ["bone health and vitamin d in adults", "statins lower ldl", "omega three fatty acids", "liver disease"][:n]
    return ranker.tokenize(queries, docs)


@pytest.mark.parametrize("method", METHODS)
def test_trainable_parameters_are_exactly_the_methods(tiny_model_dir, method):
    ranker = build(tiny_model_dir, method)
    trainable = {n for n, p in ranker.named_parameters() if p.requires_grad}
    head = {n for n in trainable if not n.startswith("backbone.")}  # the ranker head (head: classifier: pooler + linear)
    assert {"head.weight", "head.bias", "pooler.weight", "pooler.bias"} == head
    pattern = re.compile(EXPECTED_TRAINABLE[method])
    backbone_trainable = trainable - head
    assert backbone_trainable, "the method trains nothing in the backbone"
    assert all(pattern.fullmatch(n) for n in backbone_trainable), sorted(backbone_trainable)[:5]
    if method == "full":
        assert all(p.requires_grad for p in ranker.parameters())
    else:  # every pretrained weight is frozen
        assert not any(p.requires_grad for n, p in ranker.named_parameters()
                       if "lora_" not in n and "prompt_encoder" not in n and n.startswith("backbone."))
    n_trainable, n_total = count_parameters(ranker)
    assert n_trainable == sum(p.numel() for n, p in ranker.named_parameters() if p.requires_grad)


def test_lora_parameter_counts_follow_rank(tiny_model_dir):
    # hidden 32, 2 layers, r=4: each adapted 32x32 projection adds r*(32+32) = 256
    lora = build(tiny_model_dir, "lora", r=4)
    lora_pp = build(tiny_model_dir, "lora++", r=4)
    count = lambda m: sum(p.numel() for n, p in m.named_parameters() if "lora_" in n)  # noqa: E731
    assert count(lora) == 2 * 2 * 256
    assert count(lora_pp) == 2 * 3 * 256


@pytest.mark.parametrize("method", METHODS)
def test_gradients_reach_trainable_and_frozen_weights_stay(tiny_model_dir, method):
    ranker = build(tiny_model_dir, method)
    ranker.train()
    frozen_before = {n: p.detach().clone() for n, p in ranker.named_parameters() if not p.requires_grad}
    trainable_before = {n: p.detach().clone() for n, p in ranker.named_parameters() if p.requires_grad}
    optimizer = torch.optim.AdamW([p for p in ranker.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):  # LoRA's A gets gradient only once B is non-zero: two steps
        optimizer.zero_grad()
        scores = ranker(**batch(ranker))
        loss = (scores * torch.tensor([1.0, -2.0, 3.0, -4.0])).sum()
        loss.backward()
        optimizer.step()
    for n, p in ranker.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reached {n}"
            assert not torch.equal(p.detach(), trainable_before[n]), f"{n} did not change"
        else:
            assert p.grad is None
            assert torch.equal(p.detach(), frozen_before[n]), f"frozen {n} changed"


@pytest.mark.parametrize("method", ["prefix", "prompt"])
def test_prompt_learning_changes_output_and_keeps_padding_masked(tiny_model_dir, method):
    """Regression guard for prefix tuning breaking with transformers upgrades (DESIGN.md pitfalls)."""
    ranker = build(tiny_model_dir, method).eval()
    inputs = batch(ranker, 2)
    with torch.no_grad():
        with_prefix = ranker(**inputs)
        embedding = ranker.backbone.model.prompt_encoder.default.embedding.weight
        embedding.add_(torch.randn_like(embedding))
        changed = ranker(**inputs)
    assert not torch.allclose(with_prefix, changed), "the prefix does not reach the output"
    # extra padding must not change a pair's score
    one = {k: v[:1] for k, v in inputs.items()}
    padded = {k: torch.cat([v[:1], torch.zeros_like(v[:1, :5])], dim=1) for k, v in inputs.items()}
    with torch.no_grad():
        assert torch.allclose(ranker(**one), ranker(**padded), atol=1e-5)


@pytest.mark.parametrize("method", ["prefix", "prompt", "lora"])
def test_segment_ids_reach_the_model(tiny_model_dir, method):
    """PEFT's own prompt-learning forward drops token_type_ids; ssft's must keep them."""
    ranker = build(tiny_model_dir, method).eval()
    inputs = batch(ranker, 2)
    with torch.no_grad():
        a = ranker(**inputs)
        b = ranker(**{**inputs, "token_type_ids": torch.zeros_like(inputs["token_type_ids"])})
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("method", METHODS)
def test_save_load_gives_identical_scores(tiny_model_dir, tmp_path, method):
    ranker = build(tiny_model_dir, method)
    assert_save_load_round_trip(ranker, tmp_path / "m", ["vitamin d", "statins and cholesterol", "fish oil", "coffee"],
                                ["bone health and vitamin d in adults", "statins lower ldl", "omega three fatty acids",
                                 "liver disease"])
    expected_folder = "backbone" if method == "full" else "adapter"
    assert (tmp_path / "m" / expected_folder).is_dir()


@pytest.mark.parametrize("method", ["lora", "lora++", "prefix", "prompt"])
def test_adapters_load_with_plain_peft(tiny_model_dir, tmp_path, method):
    from peft import PeftModel
    from transformers import AutoModel

    ranker = build(tiny_model_dir, method)
    with torch.no_grad():
        for n, p in ranker.backbone.named_parameters():
            if p.requires_grad:
                p.add_(0.1)
    ranker.save(tmp_path / "m")
    base = AutoModel.from_pretrained(tiny_model_dir, add_pooling_layer=False)
    peft_model = PeftModel.from_pretrained(base, tmp_path / "m" / "adapter")
    ours = {n.removeprefix("backbone.model."): p for n, p in ranker.named_parameters()
            if p.requires_grad and n.startswith("backbone.")}
    theirs = dict(peft_model.named_parameters())
    for name, value in ours.items():
        torch.testing.assert_close(theirs[name], value.detach())


def test_lora_merge_keeps_scores(tiny_model_dir, tmp_path):
    ranker = build(tiny_model_dir, "lora")
    with torch.no_grad():
        for n, p in ranker.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    ranker.eval()
    inputs = batch(ranker)
    with torch.no_grad():
        expected = ranker(**inputs)
        ranker.merge_adapter()
        merged = ranker(**inputs)
    torch.testing.assert_close(merged, expected, atol=1e-5, rtol=1e-4)
    assert not any("lora_" in n for n, _ in ranker.named_parameters())
