import pytest

from ssft.config.recipe import load_recipe, recipe_from_dict
from ssft.core.errors import SsftError


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
        ("data: {validation_split: train}\n", [], "data.validation_split: 'train' is also the train split: set "
                                                  "data.holdout_queries"),
        ("data: {holdout_queries: 50}\n", [], "data.holdout_queries: .*set data.validation_split: train"),
        ("data: {validation_split: train, holdout_queries: 0}\n", [], "data.holdout_queries: must be >= 1"),
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


# ---------------------------------------------------------------- strict YAML, paths, values, lengths


def test_duplicate_keys_name_the_file_line_and_key(tmp_path):
    p = write(tmp_path, "adapter: {method: lora, r: 4}\nseed: 3\nadapter: full\n")
    with pytest.raises(SsftError, match=r"r\.yaml:3: adapter: duplicate key \(first given on line 1\)"):
        load_recipe(p)
    p = write(tmp_path, "model:\n  name: a\n  max_length: 64\n  name: b\n")
    with pytest.raises(SsftError, match=r"r\.yaml:4: model\.name: duplicate key \(first given on line 2\)"):
        load_recipe(p)
    with pytest.raises(SsftError, match=r"override 'loss=\{name: bce, name: hinge\}': loss\.name: duplicate key"):
        load_recipe(write(tmp_path, "{}\n"), ["loss={name: bce, name: hinge}"])
    # a merge key may still be overridden by an explicit key (not a duplicate)
    p = write(tmp_path, "model:\n  <<: {max_length: 64, query_max_length: 16}\n  max_length: 32\n")
    assert (load_recipe(p).model.max_length, load_recipe(p).model.query_max_length) == (32, 16)


def test_alias_bomb_and_recursive_alias_are_refused_quickly(tmp_path):
    import time

    bomb = "callbacks:\n  - &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"  - &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
    assert len(bomb) < 1000  # 10**9 values once expanded
    started = time.time()
    with pytest.raises(SsftError, match=r"r\.yaml:\d+: callbacks\[\d\]: expands to more than 100,000 values") as info:
        load_recipe(write(tmp_path, bomb))
    assert time.time() - started < 5 and "\n" not in str(info.value)
    with pytest.raises(SsftError, match="refers to a value that contains it"):
        load_recipe(write(tmp_path, "training: &t {x: *t}\n"))
    with pytest.raises(SsftError, match="nested too deeply"):
        load_recipe(write(tmp_path, "seed: " + "[" * 20000 + "]" * 20000 + "\n"))
    # many aliases of a small value are fine (a real recipe may share a block)
    p = write(tmp_path, "eval: {metrics: &m [nDCG@10, R@100]}\ncallbacks: []\nmodel: {}\n"
                        "data: {}\ntraining: {}\nloss: {}\n")
    assert load_recipe(p).eval.metrics == ["nDCG@10", "R@100"]


def test_tilde_is_expanded_once_in_every_path_key(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    p = write(tmp_path, "model: {architecture: dense, name: ~/models/q, document_name: ~/models/d}\n"
                        "data: {dataset: ~/data/scifact}\n"
                        "eval: {first_stage: ~/runs/first.trec, validation_first_stage: ~/runs/dev.trec}\n"
                        "distillation: {teacher: ~/models/t}\n")
    r = load_recipe(p, ["training.output_dir=~/runs/out"])
    assert r.training["output_dir"] == str(home / "runs" / "out") and r.output_dir == home / "runs" / "out"
    assert (r.model.name, r.model.config.document_name) == (str(home / "models" / "q"), str(home / "models" / "d"))
    assert r.data.dataset == str(home / "data" / "scifact")
    assert (r.eval.first_stage, r.eval.validation_first_stage) == (str(home / "runs/first.trec"), str(home / "runs/dev.trec"))
    assert r.distillation.teacher == str(home / "models" / "t")
    tct = load_recipe(write(tmp_path, "model: {architecture: dense}\nloss: {name: tct, teacher: ~/t}\n"))
    assert tct.loss.options["teacher"] == str(home / "t")
    assert load_recipe(write(tmp_path, "{}\n"), ["data.dataset=nfcorpus"]).data.dataset == "nfcorpus"  # names untouched


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["training.output_dir==x"],
         r"training\.output_dir: the value starts with '=' \(did you mean training\.output_dir=x\?\)"),
        (["training.output_dir=''"], "training.output_dir: expected a folder path, got ''"),
        (["training.output_dir="], "training.output_dir: expected a folder path, got None"),
        (["training.per_device_train_batch_size=0"], "training.per_device_train_batch_size: must be >= 1, got 0"),
        (["training.per_device_eval_batch_size=-1"], "training.per_device_eval_batch_size: must be >= 1, got -1"),
        (["training.gradient_accumulation_steps=0"], "training.gradient_accumulation_steps: must be >= 1"),
        (["eval.batch_size=0"], "eval.batch_size: must be >= 1"),
        (["training.learning_rate=nan"], "training.learning_rate: expected a finite number"),
        (["training.learning_rate=-inf"], "training.learning_rate: expected a finite number"),
        (["training.learning_rate=-1e-4"], "training.learning_rate: must be >= 0"),
        (["training.learning_rate=" + "9" * 400], "training.learning_rate: expected a finite number"),
        (["model.head_learning_rate=.inf"], "model.head_learning_rate: expected a finite number"),
        (["model.head_learning_rate=-1"], "model.head_learning_rate: must be >= 0"),
        (["training.max_grad_norm=.nan"], "training.max_grad_norm: expected a finite number"),
        (["training.lr_scheduler_type=cosine", "training.lr_scheduler_kwargs={num_cycle: 2}"],
         r"'num_cycle' is not an argument of lr_scheduler_type 'cosine' \(did you mean 'num_cycles'\?\)"),
        (["training.lr_scheduler_kwargs={power: 2}"], "'power' is not an argument of lr_scheduler_type 'linear'"),
        (["training.lr_scheduler_kwargs=fast"], "training.lr_scheduler_kwargs: expected a mapping"),
        (["training.lr_scheduler_kwargs={"], "training.lr_scheduler_kwargs: invalid JSON"),
        (["training.lr_scheduler_type=reduce_lr_on_plateau", "training.lr_scheduler_kwargs={factr: 0.5}"],
         "unexpected keyword argument 'factr'"),
        (["training.lr_scheduler_type=warmup_stable_decay", "training.lr_scheduler_kwargs={min_lr_ratio: 0.1}"],
         "num_decay_steps"),
        (["training.lr_scheduler_type=polynomial", "training.lr_scheduler_kwargs={power: .nan}"], "not finite"),
        (["training.lr_scheduler_type=constant_with_warmup", "training.lr_scheduler_kwargs={num_cycles: 1}"],
         "takes no arguments"),
        (["seed=-1"], r"seed: must be in \[0, 2\*\*32\), got -1"),
        ([f"seed={2 ** 32}"], r"seed: must be in \[0, 2\*\*32\)"),
        (["training.seed=-3"], r"training\.seed: must be in \[0, 2\*\*32\)"),
        (["data.sample_seed=-1"], r"data\.sample_seed: must be in \[0, 2\*\*32\)"),
        (["training.num_train_epochs=nan"], "training.num_train_epochs: expected a finite number"),
        (["training.num_train_epochs=-1"], "training.num_train_epochs: must be >= 0"),
        (["training.num_train_epochs=0"], "0 epochs trains nothing"),
        (["training.max_steps=-2"], "training.max_steps: must be >= 1, or -1"),
        (["training.eval_strategy=epochs"],
         r"training\.eval_strategy: expected one of no, steps, epoch, got 'epochs' \(did you mean 'epoch'\?\)"),
        (["training.save_strategy=yes"], r"training\.save_strategy: expected one of .*best, got True"),
        (["training.lr_scheduler_type=cosin"], r"training\.lr_scheduler_type: .*\(did you mean 'cosine'\?\)"),
        (["model.score_scale=.inf"], "model.score_scale: expected a finite number"),
        (["eval.interpolation=.nan"], "eval.interpolation"),
        (["model.architecture=dense", "eval.fusion=.nan"], "eval.fusion: expected a finite number"),
        (["distillation={teacher: t, temperature: .nan}", "model.architecture=dense"],
         "distillation.temperature: expected a finite number"),
    ],
)
def test_values_are_checked_before_anything_runs(tmp_path, overrides, message):
    with pytest.raises(SsftError, match=message) as info:
        load_recipe(write(tmp_path, "{}\n"), overrides)
    assert "\n" not in str(info.value) and ("r.yaml: " in str(info.value) or str(info.value).startswith("override "))


@pytest.mark.parametrize("overrides", [
    ["training.lr_scheduler_type=cosine", "training.lr_scheduler_kwargs={num_cycles: 2}"],
    ["training.lr_scheduler_type=cosine_with_min_lr", "training.lr_scheduler_kwargs={min_lr_rate: 0.1}"],
    ["training.lr_scheduler_type=cosine", "training.lr_scheduler_kwargs='{\"num_cycles\": 1}'"],  # JSON, as HF reads it
    ["training.lr_scheduler_type=reduce_lr_on_plateau", "training.lr_scheduler_kwargs={factor: 0.5}"],
    ["training.lr_scheduler_kwargs={}"],
    ["training.num_train_epochs=0", "training.max_steps=5"],
    ["training.max_steps=-1", "seed=0", f"data.sample_seed={2 ** 32 - 1}", "training.learning_rate=0"],
    ["model.head_learning_rate=null"],
    ["training.eval_strategy=steps", "training.save_strategy=best", "training.lr_scheduler_type=cosine"],
])
def test_good_values_still_load(tmp_path, overrides):
    load_recipe(write(tmp_path, "{}\n"), overrides)


@pytest.mark.parametrize("text, overrides, key", [
    ("{}\n", ["training.eval_strategy=no"], "eval_strategy"),
    ("{}\n", ["training.eval_strategy='no'"], "eval_strategy"),
    ("training: {save_strategy: no}\n", [], "save_strategy"),
])
def test_an_unquoted_no_is_the_strategy_no(tmp_path, text, overrides, key):
    # YAML 1.1 reads `no` as false; for a strategy field that is the choice 'no', not an error
    assert load_recipe(write(tmp_path, text), overrides).training[key] == "no"


def test_lengths_beyond_the_models_position_embeddings(tmp_path, tiny_model_dir):
    """The tiny BERT has 128 positions; checked from config.json at run time (Recipe.check_model), no weights."""
    def check(**model):
        recipe_from_dict({"model": {"name": str(tiny_model_dir), **model}}, "r.yaml").check_model()

    check(max_length=128, query_max_length=128)
    with pytest.raises(SsftError, match=r"r\.yaml: model\.max_length: 100000 is beyond what model\.name '.*' can encode "
                                        r"\(its position embeddings hold 128 tokens\); set model\.max_length <= 128"):
        check(max_length=100000)
    with pytest.raises(SsftError, match=r"model\.query_max_length: 129 is beyond"):
        check(max_length=64, query_max_length=129)
    # dense with its own document tower: the query tower takes the queries, the document tower the documents
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "config.json").write_text('{"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1}')
    dense = {"architecture": "dense", "document_name": str(wide)}
    check(**dense, max_length=512, query_max_length=64)
    with pytest.raises(SsftError, match=r"model\.max_length: 513 is beyond what model\.document_name .* hold 512 tokens"):
        check(**dense, max_length=513)
    with pytest.raises(SsftError, match=r"model\.query_max_length: 200 is beyond what model\.name"):
        check(**dense, max_length=64, query_max_length=200)
    # a missing model is still the resolve error
    with pytest.raises(SsftError, match="not found"):
        recipe_from_dict({"model": {"name": str(tmp_path / "gone")}}, "r.yaml").check_model()


def test_max_input_length_of_hub_ids_and_saved_models(tmp_path, tiny_model_dir):
    import json

    from ssft.core.hub import max_input_length

    assert max_input_length(str(tiny_model_dir)) == 128
    assert max_input_length("sentence-transformers/all-MiniLM-L6-v2") == 512  # pip-shipped, offline
    saved = tmp_path / "run" / "model"
    saved.mkdir(parents=True)
    spec = {"architecture": "cross", "base_model": str(tiny_model_dir), "method": "lora"}
    (saved / "ssft_model.json").write_text(json.dumps(spec))
    assert max_input_length(str(saved)) == 128 and max_input_length(str(saved.parent)) == 128  # a run folder too
    rotary = tmp_path / "rotary"
    rotary.mkdir()
    (rotary / "config.json").write_text('{"model_type": "t5"}')
    assert max_input_length(str(rotary)) is None  # no limit in its config: nothing to check
    (rotary / "config.json").write_text("{not json")
    assert max_input_length(str(rotary)) is None  # loading it reports that


def test_sweep_grid_refuses_duplicate_keys_and_expands_tilde(tmp_path, monkeypatch):
    from ssft.pipeline.sweep import load_grid

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "base.yaml").write_text("seed: 1\n")
    grid = tmp_path / "grid.yaml"
    grid.write_text("recipe: base.yaml\noutput_root: ~/sweeps/a\ngrid:\n  seed: [1, 2]\n  seed: [3]\n")
    with pytest.raises(SsftError, match=r"grid\.yaml:5: grid\.seed: duplicate key \(first given on line 4\)"):
        load_grid(grid)
    grid.write_text("recipe: base.yaml\noutput_root: ~/sweeps/a\ngrid: {seed: [1, 2]}\n")
    loaded = load_grid(grid)
    assert loaded.output_root == tmp_path / "home" / "sweeps" / "a"
    assert loaded.results == tmp_path / "home" / "sweeps" / "a" / "results.jsonl"
    grid.write_text("recipe: base.yaml\noutput_root: 5\n")
    with pytest.raises(SsftError, match="output_root: expected a path"):
        load_grid(grid)
