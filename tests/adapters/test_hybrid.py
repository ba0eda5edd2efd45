"""Sequential / concurrent hybrids of prefix tuning and LoRA (001 Algorithm 1, §5.2) on the tiny model."""
import pytest
import torch
from transformers import TrainerCallback, TrainingArguments

from ssft.adapters.hybrid import HybridOptions
from ssft.config.recipe import ModelConfig, recipe_from_dict
from ssft.config.registry import ADAPTERS
from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset, RankerCollator, TrainingGroups, build_examples
from ssft.losses import PairwiseSoftmaxLoss
from ssft.models.base import load_ranker
from ssft.models.cross import CrossEncoder
from ssft.training.phases import hybrid_modules, set_trainable, train_hybrid

OPTIONS = {"first": {"method": "hidden_prefix", "length": 2, "mlp_dim": 8}, "second": {"method": "lora", "r": 2},
           "first_epochs": 3, "second_epochs": 2}


def build(tiny_model_dir, **overrides):
    torch.manual_seed(0)
    options = {**OPTIONS, **overrides}
    ranker = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "hybrid", options)
    return ranker, ADAPTERS.get("hybrid").config_from(options)


class ScriptedMetric(TrainerCallback):
    """Overwrites the validation metric with scripted values (runs before the best-epoch callback) and records
    the trainable parameters at every evaluation, so the test knows which epoch must be kept."""

    def __init__(self, values):
        self.values = list(values)
        self.snapshots = []
        self.trainable_at_begin = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.trainable_at_begin = sorted(n for n, p in model.named_parameters() if p.requires_grad)

    def on_evaluate(self, args, state, control, metrics=None, model=None, **kwargs):
        metrics["eval_nDCG@10"] = self.values.pop(0)
        self.snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})


def make_factory(ranker, tiny_dataset, tmp_path, scripts):
    from ssft.training.trainer import RankingTrainer

    ds = load_dataset(str(tiny_dataset))
    examples = build_examples(ds.qrels("train"), list(ds.corpus), None)
    pairs = PairDataset({"q5": {d: 1.0 for d in ds.corpus}}, 6, ds)
    made = {}

    def make_trainer(phase, epochs, callbacks):
        args = TrainingArguments(output_dir=str(tmp_path / phase), per_device_train_batch_size=2, learning_rate=5e-2,
                                 num_train_epochs=epochs, eval_strategy="epoch", report_to=[], remove_unused_columns=False,
                                 use_cpu=True, save_strategy="no", dataloader_pin_memory=False, lr_scheduler_type="constant")
        scripted = ScriptedMetric(scripts[phase])
        made[phase] = scripted
        return RankingTrainer(model=ranker, args=args, train_dataset=TrainingGroups(examples, ds, 2), eval_dataset=pairs,
                              data_collator=RankerCollator(ranker), loss=PairwiseSoftmaxLoss(), head_learning_rate=5e-2,
                              eval_qrels=ds.qrels("dev"), eval_metrics=["nDCG@10"], callbacks=[scripted, *callbacks])

    return make_trainer, made, pairs


def names(ranker, module):
    return sorted(n for n, _ in hybrid_modules(ranker)[module])


def test_hybrid_builds_prefix_beside_lora(tiny_model_dir):
    ranker, _ = build(tiny_model_dir)
    groups = hybrid_modules(ranker)
    assert ranker.backbone.is_peft and ranker.backbone.hidden_prefix is not None
    assert groups["prefix"] and groups["lora"] and groups["head"]
    assert all(p.requires_grad for g in groups.values() for _, p in g)
    # the base transformer stays frozen
    assert not any(p.requires_grad for n, p in ranker.named_parameters() if n.startswith("backbone.")
                   and ".lora_" not in n and not n.startswith("backbone.hidden_prefix."))
    set_trainable(ranker, ["lora", "head"])
    assert (sorted(n for n, p in ranker.named_parameters() if p.requires_grad)
            == sorted(names(ranker, "lora") + names(ranker, "head")))


def test_sequential_hybrid_phases_freeze_and_keep_best_epochs(tiny_model_dir, tiny_dataset, tmp_path):
    ranker, config = build(tiny_model_dir)
    # each phase's first value is its epoch 0 (the weights it received);
    # phase 1 best at its 2nd epoch (not the last); phase 2 best at its 1st epoch
    make_trainer, made, _ = make_factory(ranker, tiny_dataset, tmp_path,
                                         {"first": [0.2, 0.5, 0.9, 0.1], "second": [0.7, 0.8, 0.2]})
    phases = train_hybrid(ranker, config, make_trainer)
    assert [(p.name, p.modules, p.epochs) for p in phases] == [("first", ("prefix", "head"), 3), ("second", ("lora", "head"), 2)]
    first, second = made["first"], made["second"]
    # at each phase start exactly the right parameters train
    assert first.trainable_at_begin == sorted(names(ranker, "prefix") + names(ranker, "head"))
    assert second.trainable_at_begin == sorted(names(ranker, "lora") + names(ranker, "head"))
    # and the optimizer of phase 2 holds exactly those
    opt_ids = {id(p) for g in phases[1].trainer.optimizer.param_groups for p in g["params"]}
    assert opt_ids == {id(p) for _, p in hybrid_modules(ranker)["lora"] + hybrid_modules(ranker)["head"]}
    assert phases[0].best.best_epoch == pytest.approx(2) and phases[1].best.best_epoch == pytest.approx(1)
    assert [h["epoch"] for h in phases[0].best.history] == [0, 1, 2, 3]
    params = dict(ranker.named_parameters())
    prefix_names = names(ranker, "prefix")
    # training moved the prefix between epochs 2 and 3, so "best" and "last" differ
    assert any(not torch.equal(first.snapshots[2][n], first.snapshots[3][n]) for n in prefix_names)
    # the prefix holds phase 1's best epoch (epoch 2), not its last, and phase 2 did not change it
    for n in prefix_names:
        assert torch.equal(params[n], first.snapshots[2][n])
        assert torch.equal(second.snapshots[0][n], first.snapshots[2][n])
    # LoRA did not move in phase 1 and holds phase 2's best epoch (epoch 1), not its last
    lora_names = names(ranker, "lora")
    assert all(torch.equal(first.snapshots[3][n], first.snapshots[0][n]) for n in lora_names)
    assert any(not torch.equal(second.snapshots[1][n], second.snapshots[2][n]) for n in lora_names)
    assert all(torch.equal(params[n], second.snapshots[1][n]) for n in lora_names)


def test_a_phase_that_only_hurts_hands_over_what_it_received(tiny_model_dir, tiny_dataset, tmp_path):
    """Phase 2's epoch 0 (phase 1's best) beats both of its epochs: LoRA and the head end as phase 2 received them."""
    ranker, config = build(tiny_model_dir)
    make_trainer, made, _ = make_factory(ranker, tiny_dataset, tmp_path,
                                         {"first": [0.2, 0.5, 0.9, 0.1], "second": [0.95, 0.8, 0.2]})
    phases = train_hybrid(ranker, config, make_trainer)
    second = made["second"]
    assert phases[1].best.best_epoch == 0 and phases[1].best.start_selected and not phases[0].best.start_selected
    params = dict(ranker.named_parameters())
    moved = names(ranker, "lora") + names(ranker, "head")
    assert any(not torch.equal(second.snapshots[0][n], second.snapshots[2][n]) for n in moved)  # phase 2 did train
    assert all(torch.equal(params[n], second.snapshots[0][n]) for n in moved)


def test_concurrent_hybrid_trains_both(tiny_model_dir, tiny_dataset, tmp_path):
    ranker, config = build(tiny_model_dir, mode="concurrent")
    make_trainer, made, _ = make_factory(ranker, tiny_dataset, tmp_path, {"concurrent": [0.1] * 6})
    phases = train_hybrid(ranker, config, make_trainer)
    assert [(p.name, p.epochs) for p in phases] == [("concurrent", 5)]
    assert made["concurrent"].trainable_at_begin == sorted(names(ranker, "prefix") + names(ranker, "lora")
                                                           + names(ranker, "head"))


def test_hybrid_save_load_same_scores(tiny_model_dir, tiny_dataset, tmp_path):
    ranker, config = build(tiny_model_dir, first={"method": "lora", "r": 2},
                           second={"method": "hidden_prefix", "length": 2, "mlp_dim": 8}, first_epochs=1, second_epochs=1)
    make_trainer, _, pairs = make_factory(ranker, tiny_dataset, tmp_path, {"first": [0.0, 0.1], "second": [0.0, 0.2]})
    train_hybrid(ranker, config, make_trainer)  # LoRA -> prefix
    ranker.eval()
    ranker.save(tmp_path / "model")
    assert (tmp_path / "model" / "adapter").is_dir() and (tmp_path / "model" / "hidden_prefix.safetensors").is_file()
    loaded = load_ranker(tmp_path / "model")
    assert loaded.backbone.method == "hybrid" and loaded.backbone.hidden_prefix is not None
    ds = load_dataset(str(tiny_dataset))
    queries = [ds.queries[q] for q, _ in pairs.pairs]
    docs = [ds.corpus[d].full_text for _, d in pairs.pairs]
    with torch.no_grad():
        before = ranker(**ranker.tokenize(queries, docs))
        after = loaded(**loaded.tokenize(queries, docs))
        # the trained LoRA and prefix both matter: dropping the prefix changes the scores
        prefix, loaded.backbone.hidden_prefix = loaded.backbone.hidden_prefix, None
        without_prefix = loaded(**loaded.tokenize(queries, docs))
        loaded.backbone.hidden_prefix = prefix
    assert torch.allclose(before, after, atol=1e-6)
    assert not torch.allclose(after, without_prefix, atol=1e-4)
    assert not loaded.can_merge


@pytest.mark.parametrize("options, message", [
    ({"second": {"method": "lora"}}, r"adapter\.first: missing"),
    ({"first": {"method": "prefix"}, "second": {"method": "lora"}}, r"adapter\.first\.method: expected one of"),
    ({"first": {"method": "lora"}, "second": {"method": "lora++"}}, r"adapter\.second: a hybrid combines"),
    ({"first": {"method": "hidden_prefix", "rank": 2}, "second": {"method": "lora"}}, r"adapter\.first: unknown option 'rank'"),
    ({"first": "hidden_prefix", "second": "lora", "first_epochs": 0}, r"adapter\.first_epochs: must be >= 1"),
    ({"first": "hidden_prefix", "second": "lora", "mode": "parallel"}, r"adapter\.mode: expected one of sequential, concurrent"),
    ({"first": "hidden_prefix", "second": "lora", "epochs": 3}, r"adapter: unknown option 'epochs'"),
])
def test_hybrid_recipe_errors(options, message):
    with pytest.raises(SsftError, match=message):
        recipe_from_dict({"adapter": {"method": "hybrid", **options}}, source="r.yaml")


def test_hybrid_recipe_loads():
    recipe = recipe_from_dict({"adapter": {"method": "hybrid", "first": "hidden_prefix", "second": {"method": "lora", "r": 4},
                                           "first_epochs": 30, "second_epochs": 10}})
    config = ADAPTERS.get("hybrid").config_from(recipe.adapter.options)
    assert isinstance(config, HybridOptions) and config.methods == ("hidden_prefix", "lora") and config.mode == "sequential"


def test_hybrid_recipe_semantic_errors():
    with pytest.raises(SsftError, match=r"adapter\.first\.method: 'ss_hidden_prefix' is semi-Siamese"):
        recipe_from_dict({"adapter": {"method": "hybrid", "first": "ss_hidden_prefix", "second": "lora"}})
    with pytest.raises(SsftError, match=r"training\.num_train_epochs: a hybrid sets its epochs per phase"):
        recipe_from_dict({"adapter": {"method": "hybrid", "first": "hidden_prefix", "second": "lora"},
                          "training": {"num_train_epochs": 3}})
    recipe_from_dict({"model": {"architecture": "twin"},
                      "adapter": {"method": "hybrid", "first": "ss_hidden_prefix", "second": "lora"}})


def test_run_recipe_trains_a_sequential_hybrid_and_rerank_reproduces(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch):
    """ssft-train drives both phases; run_info.json records each phase; ssft-rerank on the saved folder reproduces."""
    import json

    from ssft.cli.rerank import main as rerank_main
    from ssft.config.recipe import load_recipe
    from ssft.pipeline.run import run_recipe

    out = tmp_path / "run"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(out / "logs"))  # run_recipe sets it for the process: undone after
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""
model: {{name: {tiny_model_dir}, max_length: 48}}
adapter: {{method: hybrid, first: {{method: hidden_prefix, length: 2, mlp_dim: 8}}, second: {{method: lora, r: 2}},
          first_epochs: 2, second_epochs: 1}}
data: {{dataset: {tiny_dataset}, num_negatives: 2, negatives: random}}
eval: {{depth: 6, metrics: [nDCG@10]}}
training: {{output_dir: {out}, per_device_train_batch_size: 2, learning_rate: 1.0e-3, report_to: []}}
""")
    metrics = run_recipe(load_recipe(recipe))
    info = json.loads((out / "run_info.json").read_text())
    phases = info["hybrid_phases"]
    assert [(p["phase"], p["modules"], p["epochs"], len(p["validation_history"])) for p in phases] == \
        [("first", ["prefix", "head"], 2, 3), ("second", ["lora", "head"], 1, 2)]  # each phase's epoch 0 included
    assert (out / "model" / "adapter").is_dir() and (out / "model" / "hidden_prefix.safetensors").is_file()
    args = [str(out), "--data", str(tiny_dataset), "--first-stage", str(out / "run.bm25.test.trec"), "--split", "test",
            "--output", str(tmp_path / "rr"), "--depth", "6", "--metrics", "nDCG@10"]
    assert rerank_main(args) == 0
    again = json.loads((tmp_path / "rr" / "metrics.json").read_text())
    assert again["test"]["nDCG@10"] == pytest.approx(metrics["test"]["nDCG@10"], abs=1e-6)


def test_semi_siamese_prefix_hybrid_on_a_twin_bi_encoder(tiny_model_dir, tmp_path):
    """ss_hidden_prefix + lora on TwinBERT: query and document towers get different prefixes; save/load keeps scores."""
    from ssft.models.twin import TwinBert

    torch.manual_seed(0)
    options = {"first": {"method": "ss_hidden_prefix", "length": 2, "mlp_dim": 8}, "second": {"method": "lora", "r": 2}}
    ranker = TwinBert.build(ModelConfig(architecture="twin", name=str(tiny_model_dir), max_length=48), "hybrid", options).eval()
    prefix = ranker.backbone.hidden_prefix
    assert not torch.allclose(prefix("query"), prefix("document"))
    queries, docs = ["vitamin d bones", "coffee liver"], ["vitamin d and bone health", "coffee and liver disease"]
    with torch.no_grad():
        before = ranker(**ranker.tokenize(queries, docs))
    ranker.save(tmp_path / "model")
    loaded = load_ranker(tmp_path / "model")
    with torch.no_grad():
        after = loaded(**loaded.tokenize(queries, docs))
    assert torch.allclose(before, after, atol=1e-6)


@pytest.mark.parametrize("order", ["prefix_first", "ss_lora_first"])
def test_ss_lora_hybrid_on_colbert_routes_gradients_and_reloads(tiny_model_dir, tmp_path, order):
    """prefix → SS LoRA and SS LoRA → prefix (001 §3.3.3) on ColBERT: in the LoRA phase the query-specific LoRA
    gets gradient only from the query tower, the document-specific one only from the document tower, the shared
    one from both, the frozen prefix and base none; save / load keeps the scores."""
    from ssft.models.colbert import ColBert

    torch.manual_seed(0)
    prefix = {"method": "hidden_prefix", "length": 2, "mlp_dim": 8}
    ss_lora = {"method": "ss_lora", "r": 2, "sharing": "hetero_value"}
    options = {"first": prefix, "second": ss_lora} if order == "prefix_first" else {"first": ss_lora, "second": prefix}
    cfg = ModelConfig(architecture="colbert", name=str(tiny_model_dir), max_length=32, query_max_length=8, colbert_dim=16)
    ranker = ColBert.build(cfg, "hybrid", options)
    assert ranker.backbone.tower_switch is not None and ranker.backbone.hidden_prefix is not None
    set_trainable(ranker, ["lora", "head"])
    with torch.no_grad():  # LoRA's B starts at zero, which would leave A without gradient
        for n, p in ranker.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.1)
    batch = ranker.tokenize(["vitamin d bones", "coffee liver"], ["vitamin d and bone health", "coffee and liver disease"])

    def grads(tower_input: str) -> dict[str, bool]:
        ranker.zero_grad(set_to_none=True)
        q = ranker.encode_tokens(batch["q_input_ids"], batch["q_attention_mask"], "query")
        d = ranker.encode_tokens(batch["d_input_ids"], batch["d_attention_mask"], "document")
        if tower_input == "query":
            d = type(d)(d.vectors.detach(), d.mask)
        elif tower_input == "document":
            q = type(q)(q.vectors.detach(), q.mask)
        ranker.score(q.select(batch["q_index"]), d.select(batch["d_index"])).sum().backward()
        return {n: p.grad is not None and bool(p.grad.abs().sum() > 0) for n, p in ranker.named_parameters()
                if n.startswith("backbone.")}

    both, only_q, only_d = grads("both"), grads("query"), grads("document")
    lora = [n for n in both if ".lora_" in n]
    for n in lora:
        if ".query_tower." in n:
            assert both[n] and only_q[n] and not only_d[n], n
        elif ".document_tower." in n:
            assert both[n] and only_d[n] and not only_q[n], n
        else:
            assert ".shared." in n and both[n] and only_q[n] and only_d[n], n
    assert not any(v for n, v in both.items() if n not in lora), "prefix and base get no gradient in the LoRA phase"

    ranker.eval()
    with torch.no_grad():
        before = ranker(**batch)
    ranker.save(tmp_path / "model")
    loaded = load_ranker(tmp_path / "model")
    assert loaded.backbone.tower_switch is not None and loaded.backbone.hidden_prefix is not None
    with torch.no_grad():
        after = loaded(**loaded.tokenize(["vitamin d bones", "coffee liver"],
                                         ["vitamin d and bone health", "coffee and liver disease"]))
    assert torch.allclose(before, after, atol=1e-5)


def test_ss_lora_hybrid_refused_on_a_cross_encoder():
    raw = {"model": {"architecture": "cross"}, "adapter": {"method": "hybrid", "first": {"method": "hidden_prefix"},
                                                            "second": {"method": "ss_lora"}}}
    with pytest.raises(SsftError, match="semi-Siamese"):
        recipe_from_dict(raw)
