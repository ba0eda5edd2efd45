"""Semi-Siamese wiring (001 §3.3, Appendix A–B) on tiny random bi-encoders: which modules each tower uses,
gradients per tower within one step, requires_grad kept across tower switches, save/load."""
import pytest
import torch

from ssft.config.recipe import ModelConfig
from ssft.core.errors import SsftError
from ssft.models.colbert import ColBert
from ssft.models.cross import CrossEncoder
from ssft.models.twin import TwinBert
from tests.helpers import assert_save_load_round_trip

QUERIES = ["vitamin d", "statins and cholesterol", "fish oil", "coffee"]
DOCS = ["bone health and vitamin d in adults", "statins lower ldl", "omega three fatty acids", "liver disease"]


def build(tiny_model_dir, method, cls=TwinBert, **options):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture=cls.architecture, name=str(tiny_model_dir), max_length=48, query_max_length=16)
    model = cls.build(cfg, method, options)
    # LoRA B and the cosine-started combiner's output layer start at zero (what feeds them would get no gradient at the
    # first step): move them off their init
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n or n.startswith("combiner.out."):
                p.normal_(0, 0.1)
    return model


def group_of(name: str) -> str:
    """shared / query / document / backbone / ranker for a parameter name."""
    if name.startswith("backbone.hidden_prefix."):
        rest = name.removeprefix("backbone.hidden_prefix.")
        if rest.startswith("tower_mlps."):
            return rest.split(".")[1]
        return "shared"  # the source and the common MLPs
    if name.startswith("backbone."):
        parts = name.split(".")
        for i, part in enumerate(parts[:-1]):
            if part.startswith("lora_"):
                return parts[i + 1].removesuffix("_tower")  # PEFT adapter: shared / query_tower / document_tower
        return "backbone"
    return "ranker"


def grads_by_group(model, loss) -> dict[str, set[str]]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    got: dict[str, set[str]] = {}
    for n, p in model.named_parameters():
        if p.grad is not None and p.grad.abs().sum() > 0:
            got.setdefault(group_of(n), set()).add(n)
    return got


SHARED_MODULES = ["attention.self.key", "output.dense", "intermediate.dense"]  # every other linear layer of BERT
SS_METHODS = [("ss_lora", {"sharing": "hetero_value"}), ("ss_lora", {"sharing": "hetero_query"}),
              ("ss_lora", {"sharing": "none"}), ("ss_lora", {"sharing": "hetero_value", "shared_modules": SHARED_MODULES}),
              ("ss_lora", {"sharing": "none", "shared_modules": ["intermediate.dense"]}),
              ("ss_hidden_prefix", {"sharing": "average"}),
              ("ss_hidden_prefix", {"sharing": "concat", "length": 6, "common_length": 2}),
              ("ss_hidden_prefix", {"sharing": "none"})]


@pytest.mark.parametrize("method,options", SS_METHODS)
def test_each_tower_trains_its_own_modules_and_shared_ones(tiny_model_dir, method, options):
    model = build(tiny_model_dir, method, **options).train()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    groups = {group_of(n) for n in trainable}
    # the prefix source is always shared
    has_shared = options["sharing"] != "none" or method == "ss_hidden_prefix" or "shared_modules" in options
    assert groups == {"query", "document", "ranker"} | ({"shared"} if has_shared else set())
    # query tower alone: query-specific + shared, nothing document-specific, no backbone weight
    q = model.encode_queries(QUERIES)
    got = grads_by_group(model, q.vectors.pow(2).sum())
    assert set(got) == {"query"} | ({"shared"} if has_shared else set())
    d = model.encode_documents(DOCS)
    got = grads_by_group(model, d.vectors.pow(2).sum())
    assert set(got) == {"document"} | ({"shared"} if has_shared else set())
    # one training step through forward (query tower, then document tower, then backward): everything trainable
    # gets a gradient, every tower-specific parameter included, and nothing else does
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    scores = model(**model.tokenize(QUERIES, DOCS))
    loss = (scores * torch.tensor([1.0, -2.0, 3.0, -4.0])).sum()
    got = grads_by_group(model, loss)
    assert set().union(*got.values()) == trainable
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable, "a tower switch changed requires_grad"
    optimizer.step()
    for n, p in model.named_parameters():
        if n not in trainable:
            assert p.grad is None and torch.equal(p.detach(), before[n]), f"frozen {n} changed"


def test_ss_lora_hetero_value_layout(tiny_model_dir):
    """Shared LoRA on W^q, query- and document-specific LoRA on W^v (001 §3.3.2)."""
    model = build(tiny_model_dir, "ss_lora")
    names = [n for n, _ in model.named_parameters() if "lora_A" in n]
    for layer in range(2):
        prefix = f"backbone.model.base_model.model.encoder.layer.{layer}.attention.self"
        assert f"{prefix}.query.lora_A.shared.weight" in names
        assert f"{prefix}.value.lora_A.query_tower.weight" in names and f"{prefix}.value.lora_A.document_tower.weight" in names
    assert not any(".query.lora_A.query_tower" in n or ".value.lora_A.shared" in n for n in names)
    assert len(names) == 2 * 3


def test_ss_lora_shared_modules_layout(tiny_model_dir):
    """shared_modules: the shared adapter also on every other linear layer; the towers differ on W^v only."""
    model = build(tiny_model_dir, "ss_lora", shared_modules=SHARED_MODULES)
    names = [n for n, _ in model.named_parameters() if "lora_A" in n]
    for layer in range(2):
        prefix = f"backbone.model.base_model.model.encoder.layer.{layer}"
        for module in ["attention.self.query", "attention.self.key", "attention.output.dense", "intermediate.dense",
                       "output.dense"]:
            assert f"{prefix}.{module}.lora_A.shared.weight" in names, module
        assert f"{prefix}.attention.self.value.lora_A.query_tower.weight" in names
    assert not any(".value.lora_A.shared" in n or "pooler" in n for n in names)
    assert len(names) == 2 * (5 + 2)
    with pytest.raises(SsftError, match="shared_modules: 'attention.self.keys' matches no linear layer"):
        build(tiny_model_dir, "ss_lora", shared_modules=["attention.self.keys"])
    with pytest.raises(SsftError, match="shared_modules"):
        build(tiny_model_dir, "ss_lora", shared_modules=[])


def test_towers_differ_on_the_same_text(tiny_model_dir):
    model = build(tiny_model_dir, "ss_lora").eval()
    batch = model.tokenize_queries(QUERIES)
    with torch.no_grad():
        as_query = model.backbone(batch["input_ids"], batch["attention_mask"], tower="query")
        as_doc = model.backbone(batch["input_ids"], batch["attention_mask"], tower="document")
        again = model.backbone(batch["input_ids"], batch["attention_mask"], tower="query")
    assert not torch.allclose(as_query, as_doc)
    torch.testing.assert_close(as_query, again)


def test_ss_prefix_variants_follow_the_equations(tiny_model_dir):
    average = build(tiny_model_dir, "ss_hidden_prefix", length=4).backbone.hidden_prefix
    with torch.no_grad():
        p_q, p_d = average("query"), average("document")
        common = torch.stack([mlp(average.source) for mlp in average.mlps])
        own_q = torch.stack([mlp(average.source) for mlp in average.tower_mlps["query"]])
    torch.testing.assert_close(p_q, common + own_q)  # Eq. 4
    assert p_q.shape == (2, 4, 32) and not torch.allclose(p_q, p_d)
    concat = build(tiny_model_dir, "ss_hidden_prefix", sharing="concat", length=6, common_length=2).backbone.hidden_prefix
    with torch.no_grad():
        c_q, c_d = concat("query"), concat("document")
    torch.testing.assert_close(c_q[:, 4:], c_d[:, 4:])  # Eq. 6–7: the last common_length positions are common
    assert not torch.allclose(c_q[:, :4], c_d[:, :4])
    none = build(tiny_model_dir, "ss_hidden_prefix", sharing="none", length=4, mlp_dim=8).backbone.hidden_prefix
    assert none.mlps is None  # Eq. 8–9: no common generator, the source is still shared
    per_mlp = 32 * 8 + 8 + 8 * 32 + 32
    assert sum(p.numel() for p in none.parameters()) == 4 * 32 + 2 * 2 * per_mlp


def test_semi_siamese_needs_a_tower(tiny_model_dir):
    cross = build(tiny_model_dir, "ss_lora", cls=CrossEncoder)
    with pytest.raises(SsftError, match="needs a bi-encoder"):
        cross(**cross.tokenize(QUERIES[:1], DOCS[:1]))
    with pytest.raises(SsftError, match="sharing"):
        build(tiny_model_dir, "ss_lora", sharing="hetero_key")
    from ssft.config.recipe import recipe_from_dict

    with pytest.raises(SsftError, match="needs a bi-encoder"):
        recipe_from_dict({"model": {"architecture": "cross"}, "adapter": {"method": "ss_lora"}})
    recipe_from_dict({"model": {"architecture": "colbert"}, "adapter": {"method": "ss_hidden_prefix", "sharing": "concat"}})


@pytest.mark.parametrize("method,options", [("ss_lora", {"sharing": "hetero_value"}), ("ss_lora", {"sharing": "none"}),
                                            ("ss_lora", {"sharing": "none", "shared_modules": SHARED_MODULES}),
                                            ("ss_hidden_prefix", {"sharing": "concat", "length": 6, "common_length": 2})])
def test_save_load_gives_identical_scores(tiny_model_dir, tmp_path, method, options):
    model = build(tiny_model_dir, method, cls=ColBert, **options)
    assert_save_load_round_trip(model, tmp_path / "m", QUERIES, DOCS)
    if method == "ss_lora":  # every named adapter saved in PEFT's layout, none of them empty
        from safetensors.torch import load_file

        names = ["query_tower", "document_tower"] + (["shared"] if options["sharing"] != "none" or "shared_modules"
                                                      in options else [])
        for name in names:
            assert load_file(tmp_path / "m" / "adapter" / name / "adapter_model.safetensors"), name


@pytest.mark.parametrize("method, options", [
    ("ss_lora", {"r": 2, "sharing": "hetero_value"}),
    ("ss_lora", {"r": 2, "sharing": "none"}),
    ("ss_lora", {"r": 2, "sharing": "hetero_value", "shared_modules": SHARED_MODULES}),
    ("ss_hidden_prefix", {"length": 3, "mlp_dim": 8, "sharing": "average"}),
    ("ss_hidden_prefix", {"length": 3, "mlp_dim": 8, "sharing": "none"}),
    ("lora", {"r": 2}),
])
def test_trainable_parameters_per_tower(tiny_model_dir, method, options):
    """The per-tower counts add up to the trainable total and agree with the parameter groups by name."""
    from ssft.adapters import count_parameters
    from ssft.adapters.semi_siamese import tower_parameter_counts

    model = build(tiny_model_dir, method, ColBert, **options)
    counts = tower_parameter_counts(model)
    expected = {"shared": 0, "query": 0, "document": 0, "head": 0}
    for n, p in model.named_parameters():
        if p.requires_grad:
            group = {"ranker": "head", "default": "shared", "backbone": "shared"}.get(group_of(n), group_of(n))
            expected[group] += p.numel()
    assert {k: counts[k] for k in expected} == expected
    assert counts["shared"] + counts["query"] + counts["document"] + counts["head"] == count_parameters(model)[0]
    assert counts["query_tower"] == counts["shared"] + counts["query"]
    if method.startswith("ss_"):
        assert counts["query"] == counts["document"] > 0  # symmetric towers
        # the prefix source is always shared
        assert (counts["shared"] > 0) == (options["sharing"] != "none" or method == "ss_hidden_prefix")
    else:
        assert counts["query"] == counts["document"] == 0 and counts["shared"] > 0
