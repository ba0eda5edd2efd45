"""adapter.delta_scale: the trained LoRA update handed back scaled (a weight-space ensemble with the start), on tiny
random models: B scaled and nothing else, each LoRA layer's update scaled exactly, bad values refused."""
import types

import pytest
import torch

from ssft.adapters.backbone import Backbone
from ssft.config.recipe import AdapterSection, ModelConfig
from ssft.config.registry import ADAPTERS
from ssft.core.errors import SsftError
from ssft.models.dense import DenseDualEncoder
from ssft.pipeline.run import finish_training


def build(tiny_model_dir, method, **options):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=32, query_max_length=16)
    model = DenseDualEncoder.build(cfg, method, options)
    with torch.no_grad():  # a trained update: B off its zero start
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return model


@pytest.mark.parametrize("method,options", [("lora", {}), ("lora++", {}), ("ss_lora", {"sharing": "hetero_value"})])
def test_finish_scales_every_B_matrix_and_nothing_else(tiny_model_dir, method, options):
    model = build(tiny_model_dir, method, **options)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = ADAPTERS.get(method).config_from({**options, "delta_scale": 0.25})
    line = ADAPTERS.get(method).finish(model.backbone, config)
    assert "0.25" in line
    scaled = 0
    for name, p in model.named_parameters():
        if ".lora_B." in name:
            torch.testing.assert_close(p, 0.25 * before[name])
            scaled += 1
        else:
            assert torch.equal(p, before[name]), name
    assert scaled > 0


def test_each_lora_layer_adds_the_scaled_update_to_its_base(tiny_model_dir):
    model = build(tiny_model_dir, "lora")
    layers = [m for m in model.backbone.modules() if hasattr(m, "base_layer") and hasattr(m, "lora_B")]
    x = torch.randn(3, layers[0].base_layer.in_features)
    model.eval()
    with torch.no_grad():
        base = [m.base_layer(x) for m in layers]
        trained = [m(x) for m in layers]
        ADAPTERS.get("lora").finish(model.backbone, ADAPTERS.get("lora").config_from({"delta_scale": 0.5}))
        ensembled = [m(x) for m in layers]
    for b, t, e in zip(base, trained, ensembled):
        assert not torch.allclose(t, b)
        torch.testing.assert_close(e - b, 0.5 * (t - b), rtol=1e-4, atol=1e-6)


def test_delta_scale_one_changes_nothing_and_says_nothing(tiny_model_dir):
    model = build(tiny_model_dir, "lora")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert ADAPTERS.get("lora").finish(model.backbone, ADAPTERS.get("lora").config_from({})) is None
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_the_run_finishes_every_backbone_of_the_recipes_method_and_reports_it(tiny_model_dir):
    model = build(tiny_model_dir, "ss_lora", sharing="hetero_value")
    recipe = types.SimpleNamespace(adapter=AdapterSection(method="ss_lora", options={"delta_scale": 0.5}))
    lines = finish_training(recipe, model)
    assert len(lines) == sum(isinstance(m, Backbone) for m in model.modules()) == 1
    assert "scaled by 0.5" in lines[0]
    assert finish_training(types.SimpleNamespace(adapter=AdapterSection(method="ss_lora")), model) == []


@pytest.mark.parametrize("value", [0.0, -0.5, 1.5])
def test_a_delta_scale_outside_zero_to_one_is_refused_by_name(value):
    with pytest.raises(SsftError, match=r"adapter.delta_scale: must be in \(0, 1\]"):
        ADAPTERS.get("ss_lora").config_from({"delta_scale": value}, "adapter")


def test_a_hybrid_refuses_delta_scale_in_its_parts():
    with pytest.raises(SsftError, match=r"adapter.second.delta_scale: not available inside a hybrid"):
        ADAPTERS.get("hybrid").config_from({"first": {"method": "hidden_prefix"},
                                            "second": {"method": "lora", "delta_scale": 0.5}}, "adapter")


def test_the_plan_says_what_finish_will_do_before_training():
    assert ADAPTERS.get("lora").finish_plan(ADAPTERS.get("lora").config_from({})) is None
    line = ADAPTERS.get("ss_lora").finish_plan(ADAPTERS.get("ss_lora").config_from({"delta_scale": 0.75}))
    assert "scaled by 0.75" in line and "adapter.delta_scale" in line
    assert ADAPTERS.get("full").finish_plan(ADAPTERS.get("full").config_from({})) is None


def test_a_run_scores_the_weights_it_hands_back_on_validation(tmp_path, tiny_model_dir, capsys):
    """After the last step changed the chosen epoch's weights, the run reports their validation score (run_info,
    the summary), equal to scoring the saved model on the validation split independently."""
    import json

    import ssft
    from tests.helpers import write_synthetic_beir

    data = write_synthetic_beir(tmp_path / "data", queries=60, docs=40)

    def recipe(out, delta_scale):
        return {"model": {"architecture": "dense", "name": str(tiny_model_dir), "max_length": 32, "query_max_length": 8},
                "adapter": {"method": "ss_lora", "r": 4, "delta_scale": delta_scale}, "loss": "contrastive",
                "data": {"dataset": str(data), "num_negatives": 1, "negatives": "random"},
                "eval": {"precision": "fp32", "start": False},
                "training": {"output_dir": str(out), "max_steps": 4, "per_device_train_batch_size": 8,
                             "learning_rate": 5e-2, "seed": 0}}

    run = ssft.train(recipe(tmp_path / "half", 0.5))
    after = run.info["finished_validation"]["nDCG@10"]
    assert "validation nDCG@10 of the weights handed back, after the adapter's last step" in capsys.readouterr().out
    assert json.loads((run.output_dir / "run_info.json").read_text())["finished_validation"]["nDCG@10"] == after
    independent = ssft.evaluate(run.output_dir, [str(data)], first_stage="full", split="dev", precision="fp32",
                                backend="torch")
    assert after == pytest.approx(independent["datasets"][0]["model"]["nDCG@10"], abs=1e-6)
    assert after != pytest.approx(run.info["best_validation"]["value"], abs=1e-9)  # the scale moved it
    whole = ssft.train(recipe(tmp_path / "whole", 1.0))
    assert whole.info.get("finished_validation") is None and "weights handed back" not in capsys.readouterr().out


def test_a_run_whose_last_step_changes_nothing_is_not_validated_again(tmp_path, tiny_model_dir, capsys, caplog):
    """A scaled update of weights that never moved (here learning rate 0: the run hands back its start) leaves them as
    they were: the run says so and does not score the same weights on validation a second time."""
    import logging

    import ssft
    from tests.helpers import write_synthetic_beir

    data = write_synthetic_beir(tmp_path / "data", queries=60, docs=40)
    recipe = {"model": {"architecture": "dense", "name": str(tiny_model_dir), "max_length": 32, "query_max_length": 8},
              "adapter": {"method": "ss_lora", "r": 4, "delta_scale": 0.5}, "loss": "contrastive",
              "data": {"dataset": str(data), "num_negatives": 1, "negatives": "random"},
              "eval": {"precision": "fp32", "start": False},
              "training": {"output_dir": str(tmp_path / "still"), "max_steps": 2, "per_device_train_batch_size": 8,
                           "learning_rate": 0.0, "seed": 0}}
    with caplog.at_level(logging.INFO, logger="ssft"):
        run = ssft.train(recipe)
    assert run.info["finished"] and "scaled by 0.5" in run.info["finished"][0]  # the step ran
    assert run.info.get("finished_validation") is None
    assert "left the chosen epoch's weights as they were: not validated again" in caplog.text
    assert "weights handed back" not in capsys.readouterr().out
