"""The run's TrainingArguments: what ssft sets under the recipe's training section."""
import pytest

from ssft.config.recipe import load_recipe
from ssft.pipeline.schedule import training_arguments


@pytest.fixture
def recipe_file(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)  # training_arguments points it at the run
    path = tmp_path / "r.yaml"
    path.write_text("{}\n")
    return path


@pytest.mark.parametrize("overrides, expected", [
    ([], 64),                                                   # eval.batch_size's default
    (["eval.batch_size=16"], 16),                               # validation scores as many at a time as the test
    (["eval.batch_size=16", "training.per_device_eval_batch_size=4"], 4),  # the training section still decides
])
def test_validation_scores_eval_batch_size_at_a_time(tmp_path, recipe_file, overrides, expected):
    recipe = load_recipe(recipe_file, overrides)
    _, args, _ = training_arguments(recipe, tmp_path / "run", None, False)
    assert args.per_device_eval_batch_size == expected
