"""ssft-sweep: grid expansion, K-fold query splits, resume."""
import json
from pathlib import Path

import pytest
import yaml

from ssft.config.recipe import apply_override
from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from ssft.pipeline.sweep import Folds, expand, kfold_splits, load_grid, run_sweep, train_command, write_fold_datasets


def test_kfold_rotation_tests_each_query_once():
    qids = [f"q{i}" for i in range(23)]
    folds = kfold_splits(qids, k=5, seed=3)
    assert len(folds) == 5
    tested = [q for f in folds for q in f["test"]]
    assert sorted(tested) == sorted(qids)  # each query a test query exactly once
    validated = [q for f in folds for q in f["dev"]]
    assert sorted(validated) == sorted(qids)  # and a validation query exactly once
    for i, f in enumerate(folds):
        assert set(f["train"]) | set(f["dev"]) | set(f["test"]) == set(qids)
        assert not (set(f["train"]) & set(f["dev"]) or set(f["train"]) & set(f["test"]) or set(f["dev"]) & set(f["test"]))
        assert 13 <= len(f["train"]) <= 15  # 3 of 5 parts of 23 queries
        assert f["dev"] == folds[(i + 1) % 5]["test"]  # rotation: validation is the next fold's test part
    assert kfold_splits(qids, 5, 3) == folds and kfold_splits(qids, 5, 4) != folds
    with pytest.raises(SsftError, match="cannot be divided"):
        kfold_splits(["a", "b"], 3)


def test_fold_datasets_load_as_beir_folders(tiny_dataset, tmp_path):
    paths = write_fold_datasets(str(tiny_dataset), Folds(k=3, seed=0), tmp_path / "folds")
    tested = []
    for path in paths:
        ds = load_dataset(str(path))
        assert len(ds.corpus) == 6
        train, dev, test = ds.qrels("train"), ds.qrels("dev"), ds.qrels("test")
        assert len(train) == 2 and len(dev) == 2 and len(test) == 2
        tested += list(test)
    assert sorted(tested) == ["q1", "q2", "q3", "q4", "q5", "q6"]
    # judgments carried over: q6 -> d5 with grade 2 (from the source test split)
    fold = next(p for p in paths if "q6" in load_dataset(str(p)).qrels("test"))
    assert load_dataset(str(fold)).qrels("test")["q6"] == {"d5": 2}


def write_grid(tmp_path, extra=None):
    recipe = tmp_path / "base.yaml"
    recipe.write_text("adapter: {method: lora}\n")
    grid = {"recipe": "base.yaml", "output_root": str(tmp_path / "sweep"),
            "grid": {"adapter": [{"method": "full"}, {"method": "lora", "r": 4}], "seed": [1, 2]}, **(extra or {})}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


class FakeTrain:
    """Stands in for `python -m ssft.train`: writes metrics.json (the finished-run marker) unless told to fail."""

    def __init__(self, fail=()):
        self.calls = []
        self.fail = set(fail)

    def __call__(self, command, run_dir: Path) -> int:
        self.calls.append(run_dir.name)
        if any(f in run_dir.name for f in self.fail):
            return 1
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "metrics.json").write_text(json.dumps({"test": {"nDCG@10": 0.5}}))
        (run_dir / "run_info.json").write_text(json.dumps({"trainable_parameters": 7}))
        return 0


def test_sweep_resumes_skipping_finished_runs(tmp_path):
    grid = load_grid(write_grid(tmp_path))
    runs = expand(grid)
    assert len(runs) == 4 and len({r.name for r in runs}) == 4
    first = FakeTrain(fail=["adapter=full"])
    rows = run_sweep(grid, first)
    assert len(first.calls) == 4
    assert [r["status"] for r in rows].count("failed") == 2
    second = FakeTrain()
    rows = run_sweep(grid, second)
    assert sorted(second.calls) == sorted(r.name for r in runs if "adapter=full" in r.name)  # only the failed ones
    assert all(r["status"] == "ok" and r["metrics"]["test"]["nDCG@10"] == 0.5 and r["trainable_parameters"] == 7 for r in rows)
    third = FakeTrain()
    assert run_sweep(grid, third) == [] and third.calls == []
    lines = [json.loads(line) for line in grid.results.read_text().splitlines()]
    assert len(lines) == 6 and sorted(r["run"] for r in lines if r["status"] == "ok") == sorted(r.name for r in runs)


def test_finished_run_missing_from_results_is_listed_not_retrained(tmp_path):
    grid = load_grid(write_grid(tmp_path))
    run_sweep(grid, FakeTrain())
    grid.results.unlink()
    again = FakeTrain()
    rows = run_sweep(grid, again)
    assert again.calls == [] and len(rows) == 4 and all(r["status"] == "ok" for r in rows)


def test_train_command_overrides_parse_back(tmp_path):
    grid = load_grid(write_grid(tmp_path))
    run = expand(grid)[1]
    command = train_command(grid.recipe, run)
    assert command[1:4] == ["-m", "ssft.cli.train", str(tmp_path / "base.yaml")]
    raw = {}
    for item in command[4:]:
        apply_override(raw, item)
    assert raw == {"adapter": {"method": "full"}, "seed": 2, "training": {"output_dir": str(run.run_dir)}}


def test_sweep_with_folds_sets_data_per_fold(tiny_dataset, tmp_path):
    grid = load_grid(write_grid(tmp_path, {"folds": {"k": 3, "dataset": str(tiny_dataset)}}))
    fake = FakeTrain()
    rows = run_sweep(grid, fake)
    assert len(rows) == 12 and {r["fold"] for r in rows} == {0, 1, 2}
    assert all(r["overrides"]["data.dataset"].endswith(f"fold{r['fold']}") and r["overrides"]["data.test_split"] == "test"
               for r in rows)
    # each run is labelled with its fold (tables average a seed's folds), and the fold folder says how it was made
    assert all(r["overrides"]["data.fold"] == str(r["fold"]) for r in rows)
    made = json.loads((grid.output_root / "folds" / "fold0" / "fold.json").read_text())
    assert made["definition"].startswith("seeded random split into 3 folds (seed 0; not a published fold definition)")


def test_published_folds_from_a_file(tiny_dataset, tmp_path):
    """001 §4.1.1 follows Huston & Croft's folds: a file of query ids per fold, rotated as 001 does."""
    (tmp_path / "folds.txt").write_text("# three folds\nq1 q2\nq3 q4  # a comment\n\nq5 q6\n")
    grid = load_grid(write_grid(tmp_path, {"folds": {"file": "folds.txt", "dataset": str(tiny_dataset)}}))
    assert grid.folds.file == str(tmp_path / "folds.txt") and grid.folds.description == f"folds from {tmp_path / 'folds.txt'}"
    paths = write_fold_datasets(str(tiny_dataset), grid.folds, tmp_path / "out")
    tests = [sorted(load_dataset(str(p)).qrels("test")) for p in paths]
    devs = [sorted(load_dataset(str(p)).qrels("dev")) for p in paths]
    assert tests == [["q1", "q2"], ["q3", "q4"], ["q5", "q6"]] and devs == [["q3", "q4"], ["q5", "q6"], ["q1", "q2"]]
    assert sorted(load_dataset(str(paths[0])).qrels("train")) == ["q5", "q6"]
    (tmp_path / "bad.txt").write_text("q1 q2\nq2 q3\nq4\n")
    with pytest.raises(SsftError, match=r"bad.txt:2: query 'q2' is already in the fold of line 1"):
        write_fold_datasets(str(tiny_dataset), Folds(file=str(tmp_path / "bad.txt")), tmp_path / "x")
    (tmp_path / "two.txt").write_text("q1 q2\nq3\n")
    with pytest.raises(SsftError, match="2 fold.s.; 001's rotation needs >= 3"):
        write_fold_datasets(str(tiny_dataset), Folds(file=str(tmp_path / "two.txt")), tmp_path / "x")
    (tmp_path / "unjudged.txt").write_text("q1 q2\nq3 zz\nq4\n")
    with pytest.raises(SsftError, match="1 query id.s. without judgments.*zz"):
        write_fold_datasets(str(tiny_dataset), Folds(file=str(tmp_path / "unjudged.txt")), tmp_path / "x")
    with pytest.raises(SsftError, match="seed draws a random split, file names published folds"):
        load_grid(write_grid(tmp_path, {"folds": {"file": "folds.txt", "seed": 1}}))


def test_variants_tie_overrides_and_cross_the_grid(tmp_path):
    grid = load_grid(write_grid(tmp_path, {"grid": {"seed": [1, 2]}, "variants": [
        {"adapter": {"method": "full"}, "training.learning_rate": 5e-5},
        {"adapter": {"method": "lora", "r": 4}, "training.learning_rate": 1e-3}]}))
    runs = expand(grid)
    assert len(runs) == 4 and len({r.name for r in runs}) == 4
    pairs = {(r.overrides["adapter"]["method"], r.overrides["training.learning_rate"], r.overrides["seed"]) for r in runs}
    assert pairs == {("full", 5e-5, 1), ("full", 5e-5, 2), ("lora", 1e-3, 1), ("lora", 1e-3, 2)}
    assert all(r.name.startswith("adapter=") for r in runs)


@pytest.mark.parametrize("content, message", [
    ({"grid": {}}, "recipe: expected the path"),
    ({"recipe": "b.yaml", "variants": {"seed": 1}}, "variants: expected a list"),
    ({"recipe": "b.yaml", "variants": [{}]}, r"variants\[0\]: expected a non-empty mapping"),
    ({"recipe": "b.yaml", "grid": {"seed": [1]}, "variants": [{"seed": 2}]}, r"variants\[0\]\.seed: also a grid key"),
    ({"recipe": "b.yaml", "grids": {}}, "unknown key 'grids'"),
    ({"recipe": "b.yaml", "grid": {"seed": 1}}, r"grid\.seed: expected a non-empty list"),
    ({"recipe": "b.yaml", "folds": {"k": 2}}, r"folds\.k: must be an integer >= 3"),
    ({"recipe": "b.yaml", "folds": {"n": 5}}, "folds: unknown key 'n'"),
    ({"recipe": "b.yaml", "grid": {"data.dataset": ["x"]}, "folds": {"k": 5}}, "set per fold"),
])
def test_grid_errors(tmp_path, content, message):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(SsftError, match=message):
        load_grid(path)


def test_sweep_cli_runs_ssft_train_for_real(tiny_dataset, tiny_model_dir, tmp_path):
    """One real run through `python -m ssft.sweep` (subprocess of `python -m ssft.train`), then a dry run shows it finished."""
    import subprocess
    import sys

    (tmp_path / "base.yaml").write_text(f"""
model: {{name: {tiny_model_dir}, max_length: 48}}
data: {{dataset: {tiny_dataset}, num_negatives: 1, negatives: random}}
eval: {{depth: 6, metrics: [nDCG@10]}}
training: {{max_steps: 1, per_device_train_batch_size: 2, report_to: []}}
""")
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump({"recipe": "base.yaml", "output_root": str(tmp_path / "sweep"),
                                                         "grid": {"adapter": [{"method": "lora", "r": 2}]}}))
    result = subprocess.run([sys.executable, "-m", "ssft.cli.sweep", str(tmp_path / "grid.yaml")], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "sweep" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["status"] == "ok" and "nDCG@10" in rows[0]["metrics"]["test"]
    recipe = yaml.safe_load((Path(rows[0]["run_dir"]) / "recipe.yaml").read_text())
    assert recipe["adapter"] == {"method": "lora", "r": 2}
    dry = subprocess.run([sys.executable, "-m", "ssft.cli.sweep", "--dry-run", str(tmp_path / "grid.yaml")], capture_output=True,
                         text=True, timeout=300)
    assert dry.returncode == 0 and dry.stdout.startswith("finished\t")
