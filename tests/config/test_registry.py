"""The registries: a leaf module of dotted paths, plugins imported only when asked for, every entry a class
that declares its own name, and the typed configs every plugin parses with the shared parser."""
import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from ssft.config.registry import ADAPTERS, CALLBACKS, LOSSES, MODELS, Registry, import_from_string
from ssft.core.errors import SsftError

REGISTRIES = {"MODELS": MODELS, "ADAPTERS": ADAPTERS, "LOSSES": LOSSES, "CALLBACKS": CALLBACKS}
PLUGIN_PACKAGES = ("ssft.models", "ssft.adapters", "ssft.losses", "ssft.training", "ssft.teachers", "ssft.eval")


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("registry", REGISTRIES, ids=list(REGISTRIES))
def test_every_entry_resolves_to_a_class_that_declares_its_name(registry):
    reg = REGISTRIES[registry]
    assert reg.names() == sorted(reg.declared()) and reg.names()
    for name in reg.names():
        assert isinstance(reg.target(name), str) and ":" in reg.target(name)  # built-ins: dotted paths, nothing imported
        cls = reg.get(name)
        assert isinstance(cls, type) and getattr(cls, reg.name_attribute) == name, (name, cls)
        assert reg.get(name) is cls


def test_importing_the_registry_imports_neither_torch_nor_a_plugin():
    found = _run(
        "import json, sys\n"
        "from ssft.config.registry import ADAPTERS, CALLBACKS, LOSSES, MODELS\n"
        "names = [r.names() for r in (ADAPTERS, CALLBACKS, LOSSES, MODELS)]\n"
        "inside = ['lora' in ADAPTERS, 'nope' in MODELS]\n"
        "try:\n"
        "    LOSSES.get('bcee', 'r.yaml: loss.name')\n"
        "except Exception as err:\n"
        "    message = str(err)\n"
        "print(json.dumps({'modules': sorted(m for m in sys.modules if m.startswith('ssft')), 'inside': inside,\n"
        "                  'torch': 'torch' in sys.modules, 'message': message}))\n")
    assert not found["torch"]
    assert not [m for m in found["modules"] if m.startswith(PLUGIN_PACKAGES)], found["modules"]
    assert found["inside"] == [True, False]
    assert found["message"].startswith("r.yaml: loss.name: unknown loss 'bcee' (did you mean 'bce'?); known: bce, ")


def test_get_imports_only_the_chosen_plugin():
    found = _run(
        "import json, sys\n"
        "from ssft.config.registry import ADAPTERS, MODELS\n"
        "ADAPTERS.get('lora')\n"
        "MODELS.get('cross')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('ssft.adapters.', 'ssft.models.')))))\n")
    assert "ssft.adapters.lora" in found and "ssft.models.cross" in found
    for other in ("ssft.adapters.hybrid", "ssft.adapters.semi_siamese", "ssft.adapters.prompt", "ssft.models.dense",
                  "ssft.models.colbert", "ssft.models.twin"):
        assert other not in found, found


def test_user_plugins_by_dotted_path_or_object():
    reg = Registry("widget", {"json": "json:JSONDecoder"})
    assert reg.get("json") is json.JSONDecoder
    reg.register("dumps", "json.dumps")  # module.attribute works too
    assert reg.get("dumps") is json.dumps

    @reg.register("mine")
    class Mine:
        name = "mine"

    assert reg.get("mine") is Mine and reg.declared() == ["json", "dumps", "mine"]
    with pytest.raises(ValueError, match="widget 'mine' registered twice"):
        reg.register("mine", Mine)
    reg.register("broken", "ssft.nowhere:Thing")
    with pytest.raises(SsftError, match=r"x: widget 'broken' is registered as ssft.nowhere:Thing, which cannot be imported"):
        reg.get("broken", "x")
    with pytest.raises(ImportError):
        import_from_string("nodots")


def test_capability_flags_replace_names():
    # what the recipe and the pipeline read instead of method / architecture / loss names
    assert [n for n in ADAPTERS.declared() if ADAPTERS.get(n).mergeable] == ["lora", "lora++"]
    assert ADAPTERS.matching(lambda a: a.needs_towers) == ["ss_hidden_prefix", "ss_lora"]
    assert ADAPTERS.matching(lambda a: a.one_backbone_only) == ["ss_hidden_prefix", "ss_lora", "hybrid"]
    assert ADAPTERS.matching(lambda a: a.trains_in_phases) == ["hybrid"]
    assert ADAPTERS.matching(lambda a: a.frozen_base) == ["hidden_prefix", "ss_hidden_prefix"]
    assert MODELS.matching(lambda m: m.bi_encoder) == ["twin", "colbert", "dense"]
    assert MODELS.matching(lambda m: m.full_retrieval) == ["dense"]
    assert MODELS.matching(lambda m: m.in_batch_negatives) == ["dense"]
    assert MODELS.matching(lambda m: m.distillation_student) == ["dense"]
    assert LOSSES.matching(lambda loss: loss.needs_teacher) == ["tct"]
    assert CALLBACKS.matching(lambda c: c.adds_negatives) == ["negative_cache"]
    assert CALLBACKS.matching(lambda c: c.needs_document_tower) == ["daft"]
    assert CALLBACKS.matching(lambda c: not c.combines_with_distillation) == ["daft", "negative_cache"]


def test_every_plugin_parses_its_typed_config():
    lora = ADAPTERS.get("lora").config_from({"r": "8", "alpha": 16}, "r.yaml: adapter")
    assert (lora.r, lora.alpha) == (8, 16.0) and type(lora).__name__ == "LoraOptions"
    with pytest.raises(SsftError, match=r"r\.yaml: adapter\.r: expected an integer, got 'x'"):
        ADAPTERS.get("lora").config_from({"r": "x"}, "r.yaml: adapter")
    loss = LOSSES.get("listwise_ce")
    assert loss.config_from({"temperature": "0.5"}).temperature == 0.5
    assert loss.from_config(loss.config_from({"temperature": 2})).temperature == 2.0
    with pytest.raises(SsftError, match=r"loss\.temperature: expected a finite number"):
        loss.config_from({"temperature": "nan"})
    with pytest.raises(SsftError, match=r"^loss: temperature must be > 0$"):
        loss.config_from({"temperature": 0})
    with pytest.raises(ValueError, match="temperature must be > 0"):  # built directly: the same check, a ValueError
        loss(temperature=0)
    with pytest.raises(SsftError, match=r"loss: unknown option 'margin' for this loss \(allowed: none\)"):
        LOSSES.get("pairwise_softmax").config_from({"margin": 1})
    daft = CALLBACKS.get("daft")
    config = daft.config_from({"delta": "100", "check_every_steps": None}, "r.yaml: callbacks")
    assert (config.delta, config.patience, config.check_every_steps) == (100.0, 3, None)
    assert daft.from_config(config).delta == 100.0
    with pytest.raises(SsftError, match=r"^r\.yaml: callbacks\.daft\.patience: expected an integer, got 'many'$"):
        daft.config_from({"patience": "many"}, "r.yaml: callbacks")
    with pytest.raises(SsftError, match=r"^r\.yaml: callbacks\.daft: patience and finetune_epochs must be >= 1"):
        daft.config_from({"patience": 0}, "r.yaml: callbacks")
    with pytest.raises(SsftError, match=r"^r\.yaml: callbacks: unknown option 'deltaa' for callback 'daft' \(allowed: delta, "):
        daft.config_from({"deltaa": 1}, "r.yaml: callbacks")


def test_the_recipe_holds_typed_configs_parsed_once():
    from ssft.adapters.lora import LoraOptions
    from ssft.config.recipe import recipe_from_dict
    from ssft.losses.tct import TctOptions

    recipe = recipe_from_dict({"model": {"architecture": "dense"}, "adapter": {"method": "lora", "r": 4},
                               "loss": {"name": "tct", "teacher": "runs/t", "gamma": "0.5"}})
    assert isinstance(recipe.adapter.config, LoraOptions) and recipe.adapter.config.r == 4
    assert recipe.adapter.config is recipe.adapter.config  # parsed once, not on every read
    assert recipe.adapter.options == {"r": 4} and recipe.adapter.method == "lora"  # what the recipe gave, as before
    assert isinstance(recipe.loss.config, TctOptions)
    assert (recipe.loss.config.teacher, recipe.loss.config.gamma) == ("runs/t", 0.5)
    recipe.adapter.method, recipe.adapter.options = "full", {"freeze_word_embeddings": True}  # replaced: parsed again
    assert recipe.adapter.config.freeze_word_embeddings is True
    recipe.adapter.options["freeze_word_embeddings"] = False
    assert recipe.adapter.config.freeze_word_embeddings is False


def test_the_shared_parser_on_a_plain_dataclass():
    from ssft.config.parse import parse_dataclass

    @dataclass
    class Thing:
        count: int = 1
        names: list[str] | None = None
        rate: float = 0.5

    thing = parse_dataclass(Thing, {"count": 3.0, "names": "a, b", "rate": "1e-4"}, "t")
    assert (thing.count, thing.names, thing.rate) == (3, ["a", "b"], 1e-4)
    with pytest.raises(SsftError, match=r"^t: unknown key 'cuont' \(did you mean 'count'\?\); known: count, names, rate$"):
        parse_dataclass(Thing, {"cuont": 1}, "t")
    with pytest.raises(SsftError, match=r"^t: expected a mapping, got list$"):
        parse_dataclass(Thing, [1], "t")
    with pytest.raises(SsftError, match=r"^t\.rate: expected a finite number"):
        parse_dataclass(Thing, {"rate": float("inf")}, "t")
