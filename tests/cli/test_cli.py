"""The CLIs on bad input: one line on stderr, exit code 2, no traceback, nothing written."""
import json
import subprocess
import sys

import pytest


def run_cli(module, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize(
    "recipe, overrides, expected",
    [
        ("adapter: {method: lora, rank: 4}\n", [], "unknown option 'rank'"),
        ("model: [\n", [], "malformed YAML"),
        ("data: {dataset: does-not-exist}\n", [], "dataset 'does-not-exist' not found"),
        ("model: {name: /no/such/model}\n", ["data.dataset=DATA"], "model '/no/such/model' not found"),
        ("seed: 1\n", ["adapter.method=lorra"], "unknown fine-tuning method 'lorra'"),
        ("seed: 1\n", ["eval.first_stage=/no/run.trec", "data.dataset=DATA"], "run file not found"),
    ],
)
def test_train_cli_errors(tmp_path, tiny_dataset, recipe, overrides, expected):
    path = tmp_path / "r.yaml"
    path.write_text(recipe + f"training: {{output_dir: {tmp_path / 'out'}}}\n")
    overrides = [o.replace("DATA", str(tiny_dataset)) for o in overrides]
    result = run_cli("ssft.cli.train", str(path), *overrides)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ssft-train: error: ") and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_rerank_cli_errors(tmp_path, tiny_dataset):
    result = run_cli("ssft.cli.rerank", str(tmp_path / "nope"), "--data", str(tiny_dataset), "--first-stage", "bm25",
                     "--split", "test", "--output", str(tmp_path / "o"))
    assert result.returncode == 2 and "model not found" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_train_then_rerank_on_tiny_model(tmp_path, tiny_dataset, tiny_model_dir):
    """Full CLI path on a tiny model: output contract, then ssft-rerank reproduces the test metrics."""
    out = tmp_path / "run"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""
model: {{name: {tiny_model_dir}, max_length: 48}}
adapter: {{method: lora, r: 4}}
data: {{dataset: {tiny_dataset}, num_negatives: 2, negatives_depth: 6}}
eval: {{depth: 6, interpolation: 0.5}}
training: {{output_dir: {out}, num_train_epochs: 2, per_device_train_batch_size: 2, learning_rate: 1.0e-3}}
""")
    result = run_cli("ssft.cli.train", str(recipe))
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"test", "bm25", "test+bm25"}
    assert set(metrics["test"]) == {"P@20", "nDCG@5", "nDCG@10", "nDCG@20", "RR@10", "R@100"}
    for name in ("recipe.yaml", "run.test.trec", "run.bm25.test.trec", "per_query.test.tsv", "run_info.json", "README.md",
                 "model/ssft_model.json", "model/adapter/adapter_config.json", "model/ranker.safetensors"):
        assert (out / name).is_file(), name
    assert list((out / "logs").glob("**/events.out.tfevents*")), "no TensorBoard log"
    assert "nDCG@10" in result.stdout and "bm25" in result.stdout
    rerank_out = tmp_path / "rerank"
    result = run_cli("ssft.cli.rerank", str(out), "--data", str(tiny_dataset), "--first-stage", str(out / "run.bm25.test.trec"),
                     "--split", "test", "--output", str(rerank_out), "--depth", "6")
    assert result.returncode == 0, result.stderr[-3000:]
    again = json.loads((rerank_out / "metrics.json").read_text())
    assert (rerank_out / "run.trec").is_file()
    for metric, value in metrics["test"].items():
        assert again["test"][metric] == pytest.approx(value, abs=1e-6)
    assert again["bm25"] == pytest.approx(metrics["bm25"])  # run.bm25.test.trec reads as bm25 again
    # a first stage covering one of the two judged test queries: averaged over both (the other scores 0),
    # or over the run's own queries with --average-over run
    one = tmp_path / "one.trec"
    one.write_text("".join(line + "\n" for line in (out / "run.bm25.test.trec").read_text().splitlines()
                           if line.startswith("q6 ")))
    results = {}
    for scope in ("judged", "run"):
        result = run_cli("ssft.cli.rerank", str(out), "--data", str(tiny_dataset), "--first-stage", str(one), "--split", "test",
                         "--output", str(tmp_path / f"rerank-{scope}"), "--depth", "6", "--average-over", scope)
        assert result.returncode == 0, result.stderr[-3000:]
        results[scope] = json.loads((tmp_path / f"rerank-{scope}" / "metrics.json").read_text())["one"]
    assert results["judged"]["R@100"] == pytest.approx(results["run"]["R@100"] / 2)


def test_check_exits_non_zero_when_not_ready(tmp_path, tiny_dataset):
    """`ssft-train --check` on a recipe whose model is not here (a hub id not cached, offline): the plan on stdout,
    then one error line naming what is missing, exit code 2 (it used to print "not ready" and exit 0)."""
    import os

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {{name: someone/not-cached-anywhere}}\ndata: {{dataset: {tiny_dataset}}}\n"
                      f"training: {{output_dir: {tmp_path / 'out'}}}\n")
    result = subprocess.run([sys.executable, "-m", "ssft.train", "--check", str(recipe)], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2, result.stderr
    assert "architecture:" in result.stdout and "NOT HERE" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ssft-train: error: not ready to train here: model.name "
                                                   "'someone/not-cached-anywhere' is not here"), result.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- one shape for every console script
def _console_scripts() -> dict[str, str]:
    """ssft-<name> -> its module, from pyproject.toml's [project.scripts]."""
    from pathlib import Path

    import tomllib

    scripts = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    return {name: target.split(":")[0] for name, target in scripts.items()}


SCRIPTS = _console_scripts()
CONSISTENT = SCRIPTS


@pytest.mark.parametrize("name", sorted(CONSISTENT))
def test_every_console_script_has_version_and_help_on_every_flag(name, monkeypatch, capsys):
    import importlib

    import ssft
    from ssft.cli import _common

    module = importlib.import_module(CONSISTENT[name])
    with pytest.raises(SystemExit) as stop:
        module.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"{name} (ssft) {ssft.__version__}"
    parsers = []

    def keep(parser, argv, *args, **kwargs):
        parsers.append(parser)
        raise SystemExit(0)

    monkeypatch.setattr(module, "parse_args", keep)
    with pytest.raises(SystemExit):
        module.main([])
    (parser,) = parsers
    assert parser.prog == name and issubclass(parser.formatter_class, _common.HelpFormatter)
    for action in parser._actions:
        assert action.help, f"{name}: {action.option_strings or action.dest} has no help"
    formatter = parser._get_formatter()
    for action in parser._actions:  # a flag with a value shows its default
        if action.option_strings and action.default not in (None, False, "==SUPPRESS==") and action.nargs != 0:
            assert "default" in formatter._get_help_string(action), f"{name}: {action.option_strings} hides its default"
    assert "autocast" not in parser.format_help()
    import re  # help speaks to users: the papers by name, never by the source code's numbers ("003 Eq. 7")

    assert not re.search(r"\b00[0-4]\b|§", parser.format_help()), name


@pytest.mark.parametrize("name", ["ssft-rerank", "ssft-retrieve", "ssft-export", "ssft-encode", "ssft-latency",
                                  "ssft-eval"])
def test_the_model_argument_is_positional_model(name, capsys):
    import importlib

    with pytest.raises(SystemExit):
        importlib.import_module(SCRIPTS[name]).main(["--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert usage.rstrip().endswith("model") and "run_dir" not in usage and "--output" in usage


def test_train_takes_options_and_overrides_in_any_order(tmp_path, tiny_dataset, tiny_model_dir):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {{name: {tiny_model_dir}, max_length: 48}}\ndata: {{dataset: {tiny_dataset}}}\n"
                      f"training: {{output_dir: {tmp_path / 'out'}}}\n")
    before = run_cli("ssft.cli.train", "--check", str(recipe), "seed=7", "eval.depth=6")
    after = run_cli("ssft.cli.train", str(recipe), "seed=7", "--check", "eval.depth=6")
    assert before.returncode == after.returncode == 0, (before.stderr, after.stderr)
    assert before.stdout == after.stdout and "6" in after.stdout
    stray = run_cli("ssft.cli.train", str(recipe), "--check", "--no-such-flag", "seed=7")
    lines = stray.stderr.strip().splitlines()
    assert stray.returncode == 2 and lines == ["ssft-train: error: unrecognized arguments: --no-such-flag (see --help)"]


def test_ambiguity_out_still_works_with_a_deprecation_line(tmp_path, tiny_dataset):
    """--out is --output's old spelling: honoured (here: the same refusal of a user's file) with one line saying so."""
    user_file = tmp_path / "labels.tsv"
    user_file.write_text("my,own,table\n")
    for flag in ("--out", "--output"):
        result = run_cli("ssft.cli.ambiguity", "--data", str(tiny_dataset), "--split", "test", flag, str(user_file))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and lines[-1].startswith("ssft-ambiguity: error: ") and \
            "labels.tsv exists and ssft-ambiguity did not write it" in lines[-1], result.stderr
        deprecation = [line for line in lines if "deprecated" in line]
        assert deprecation == (["ssft-ambiguity: deprecated: --out is now --output; --out will be removed in the next "
                                "release"] if flag == "--out" else [])
    assert user_file.read_text() == "my,own,table\n"
    both = run_cli("ssft.cli.ambiguity", "--data", str(tiny_dataset), "--out", str(user_file), "--output", str(user_file))
    assert both.returncode == 2 and "--out is the old spelling of --output" in both.stderr
