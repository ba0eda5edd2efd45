import pytest

from ssft.errors import SsftError
from ssft.recipe import load_recipe, recipe_from_dict


def write(tmp_path, text, name="r.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults_and_overrides(tmp_path):
    p = write(tmp_path, "adapter: {method: lora, r: 4}\ntraining: {learning_rate: 1e-4}\n")
    r = load_recipe(p, ["adapter.r=8", "training.num_train_epochs=3", "data.max_train_queries=50", "loss.name=bce"])
    assert r.adapter.method == "lora" and r.adapter.options == {"r": 8}
    assert r.training["learning_rate"] == pytest.approx(1e-4)  # YAML 1.1 reads 1e-4 as a string: coerced
    assert r.training["num_train_epochs"] == 3
    assert r.data.max_train_queries == 50
    assert r.loss.name == "bce"
    assert r.eval.metrics == ["P@20", "nDCG@5", "nDCG@10", "nDCG@20", "RR@10", "R@100"]
    assert r.training["output_dir"] == "runs/r"


def test_round_trip_through_to_dict():
    r = recipe_from_dict({"adapter": {"method": "lora++", "r": 4}, "loss": {"name": "listwise_ce", "temperature": 0.5}})
    again = recipe_from_dict(r.to_dict())
    assert again.to_dict() == r.to_dict()


@pytest.mark.parametrize(
    "text, overrides, message",
    [
        ("model: {name: x\n", [], r"r\.yaml:\d+:\d+: malformed YAML"),
        ("modle: {}\n", [], "unknown section 'modle' \\(did you mean 'model'"),
        ("model: {max_lenght: 12}\n", [], "unknown key 'max_lenght' \\(did you mean 'max_length'"),
        ("model: {max_length: long}\n", [], "model.max_length: expected an integer"),
        ("adapter: {method: loraa}\n", [], "unknown fine-tuning method 'loraa' \\(did you mean 'lora'"),
        ("adapter: {method: lora, rank: 4}\n", [], "unknown option 'rank' for method 'lora'"),
        ("adapter: {method: prompt, r: 4}\n", [], "unknown option 'r' for method 'prompt'"),
        ("adapter: {method: lora, r: 0}\n", [], "adapter.r: must be >= 1"),
        ("loss: hinge\n", [], "unknown loss 'hinge'"),
        ("training: {learning_rte: 1}\n", [], "unknown key 'training.learning_rte'"),
        ("training: {num_train_epochs: many}\n", [], "training.num_train_epochs: expected a number"),
        ("eval: {metrics: [nDCG@10, NDGC@10]}\n", [], "unknown metric 'NDGC@10'"),
        ("data: {negatives: hard}\n", [], "data.negatives: expected 'bm25' or 'random'"),
        ("eval: {interpolation: 1.5}\n", [], "eval.interpolation"),
        ("eval: {interpolation: auto}\ndata: {validation_split: null}\n", [], "'auto' tunes the weight"),
        ("- a\n- b\n", [], "a recipe must be a mapping"),
        ("{}\n", ["adapter.r"], "expected key=value"),
        ("{}\n", ["=3"], "empty key"),
        ("{}\n", ["seed=abc"], "seed: expected an integer"),
        ("{}\n", ["callbacks=[nope]"], "unknown callback 'nope'"),
    ],
)
def test_bad_recipes_are_one_line_errors(tmp_path, text, overrides, message):
    p = write(tmp_path, text)
    with pytest.raises(SsftError, match=message) as info:
        load_recipe(p, overrides)
    assert "\n" not in str(info.value)


def test_missing_recipe_file(tmp_path):
    with pytest.raises(SsftError, match="recipe file not found"):
        load_recipe(tmp_path / "nope.yaml")
