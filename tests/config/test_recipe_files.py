"""Every committed recipe loads, names a registered architecture and method, and the grid matches its script."""
from pathlib import Path

import pytest
import yaml

from ssft.config.recipe import load_recipe
from ssft.config.registry import ADAPTERS, LOSSES, MODELS
from ssft.pipeline.check import plan
from ssft.pipeline.folder import _differences
from tests.helpers import load_script

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _is_sweep_grid(path: Path) -> bool:
    import yaml

    raw = yaml.safe_load(path.read_text())
    return isinstance(raw, dict) and "recipe" in raw


ALL_FILES = sorted(RECIPES.rglob("*.yaml"))
FILES = [p for p in ALL_FILES if not _is_sweep_grid(p)]
GRIDS = [p for p in ALL_FILES if _is_sweep_grid(p)]


def make_grid():
    return load_script(RECIPES / "grid" / "make_grid.py")


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(RECIPES)) for p in FILES])
def test_every_recipe_loads(path):
    recipe = load_recipe(path)
    assert recipe.model.architecture in MODELS
    assert recipe.adapter.method in ADAPTERS
    assert recipe.loss.name in LOSSES
    ADAPTERS.get(recipe.adapter.method).config_from(recipe.adapter.options)


@pytest.mark.parametrize("path", GRIDS, ids=[str(p.relative_to(RECIPES)) for p in GRIDS])
def test_every_sweep_grid_expands_to_valid_recipes(path):
    from ssft.pipeline.sweep import check_runs, expand, load_grid

    grid = load_grid(path)
    runs = expand(grid)
    assert runs
    check_runs(grid, runs)  # what ssft-sweep checks before the first run trains


def test_grid_files_are_what_make_grid_writes():
    module = make_grid()
    assert module.stale_files() == [], "run python recipes/grid/make_grid.py"
    recipes = {name: load_recipe(RECIPES / "grid" / name) for name in module.grid()}
    cells = {(r.model.architecture, r.adapter.method, r.adapter.options.get("sharing")) for r in recipes.values()}
    base = {(a, m, None) for a in ("twin", "colbert") for m in ("full", "prompt", "prefix", "hidden_prefix", "lora", "lora++")}
    ss = {(a, "ss_hidden_prefix", s) for a in ("twin", "colbert") for s in ("average", "concat", "none")}
    ss |= {(a, "ss_lora", s) for a in ("twin", "colbert") for s in ("hetero_value", "hetero_query", "none")}
    assert cells == base | ss and len(recipes) == 24
    assert len({r.training["output_dir"] for r in recipes.values()}) == 24, "every cell writes its own folder"


def test_ss_lora_colbert_recipe():
    recipe = load_recipe(RECIPES / "ss_lora_colbert.yaml")
    assert ((recipe.model.architecture, recipe.adapter.method, recipe.adapter.options["sharing"])
            == ("colbert", "ss_lora", "hetero_value"))
    assert recipe.model.query_max_length == 20 and recipe.data.max_train_queries is not None


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(RECIPES)) for p in FILES])
def test_every_recipe_passes_the_dry_check_and_writes_nothing(path, tmp_path, monkeypatch):
    """`ssft-train --check` on every committed recipe: parsed, models and data looked up offline (no weights, no
    download), the plan printed; a missing hub model or a licensed / remote collection is reported, not fatal."""
    from ssft.cli.train import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SSFT_DATA_HOME", str(tmp_path / "data"))  # nothing local: every dataset is "not here"
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--check", str(path)])
    # ready (0), or not ready here (2: the plan printed, then one line naming what is missing), never a wrong recipe
    assert code == 0 or (code == 2 and err.getvalue().strip().splitlines()[-1].startswith(
        "ssft-train: error: not ready to train here: ")), err.getvalue()
    text = out.getvalue()
    for part in ("architecture:", "method:", "loss:", "data:", "training:", "evaluation:", "models and data:"):
        assert part in text, part
    assert not list(tmp_path.iterdir()), "--check wrote something"


def test_paper_recipes_name_where_their_data_comes_from():
    for path in sorted((RECIPES / "paper").glob("*.yaml")):
        head = path.read_text().split("\nseed:")[0]
        assert "at the paper's settings" in head and ("Data:" in head or "data:" in head.lower()), path.name


def test_cpu_sized_recipes_say_so_first():
    for path in sorted(RECIPES.glob("*.yaml")):
        first = path.read_text().splitlines()[0]
        assert first.startswith("#") and "CPU-sized" in first, f"{path.name}: the first comment says it is CPU-sized"


def test_check_fails_in_one_line_on_a_dataset_that_is_nowhere(tmp_path, capsys):
    from ssft.cli.train import main

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"data: {{dataset: {tmp_path / 'missing'}}}\n")
    assert main(["--check", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ssft-train: error: ") and "data.dataset" in err[-1] and "no BEIR folder" in err[-1]


def test_plan_says_where_the_negatives_come_from():
    """data.negatives draws negatives for the qrels only; data.train's rows bring their own, and the plan says so."""
    mined = next(line for line in plan(load_recipe(RECIPES / "cross_distil_nfcorpus.yaml"))[0] if line.startswith("data:"))
    assert "7 negative(s) of its rows per positive" in mined and "bm25 negative" not in mined
    qrels = next(line for line in plan(load_recipe(RECIPES / "quickstart.yaml"))[0] if line.startswith("data:"))
    assert "1 bm25 negative(s) per positive" in qrels


@pytest.mark.parametrize("siamese, semi_siamese", [("quickstart_siamese_lora", "quickstart"),
                                                   ("colbert_siamese_lora", "ss_lora_colbert"),
                                                   ("twin_siamese_lora", "ss_lora_twin")])
def test_each_siamese_recipe_differs_from_its_semi_siamese_pair_only_in_the_adapter(siamese, semi_siamese):
    # benchmarks/efficacy.py --compare reads the pair's difference as Siamese against semi-Siamese LoRA: a setting
    # changed in one recipe only (a learning rate, delta_scale) would be read as the adapter's doing
    a = yaml.safe_load((RECIPES / f"{siamese}.yaml").read_text())
    b = yaml.safe_load((RECIPES / f"{semi_siamese}.yaml").read_text())
    assert set(_differences(a, b)) == {"adapter.method", "adapter.sharing", "training.output_dir"}
    assert (a["adapter"]["method"], b["adapter"]["method"]) == ("lora", "ss_lora")
