"""The bad-input matrix: every case runs a real CLI (ssft-train, ssft-rerank, ssft-sweep) as its own process on
tiny fixtures and must end in a one-line ``<prog>: error: ...`` naming the culprit, exit code 2, no traceback, and
nothing written outside the output folder (the working directory, the inputs, the cache and $HOME are compared
before and after). Most cases fork from a preloaded process (tests/cli_runner.py); those marked ``real`` start
``python -m`` for real."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.bad_inputs import (
    cases_base,
    cases_checkpoint,
    cases_data,
    cases_encode,
    cases_output,
    cases_recipe,
    cases_sources,
)
from tests.bad_inputs.world import PROGS, World, saved_ranker  # noqa: F401  (saved_ranker: a module fixture)
from tests.cli_runner import run_cli

# flags after the culprit: "real" (a real interpreter, not a fork), "out-may-change" (the case may write into its own
# output folder, e.g. a resume attempt's log)
CASES = [*cases_base.CASES, *cases_data.CASES, *cases_recipe.CASES, *cases_output.CASES,
         *cases_checkpoint.CASES, *cases_sources.CASES, *cases_encode.CASES]


def _snapshot(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` except ``skip`` and below: relative path -> (size, mtime_ns)."""
    found = {}
    for path in root.rglob("*"):
        if path == skip or skip in path.parents:
            continue
        stat = path.lstat()
        found[str(path.relative_to(root))] = (stat.st_size if path.is_file() else 0, stat.st_mtime_ns)
    return found


def test_matrix_is_large_enough():
    assert len(CASES) >= 110
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(case, tmp_path, tiny_dataset, tiny_model_dir, saved_ranker):  # noqa: F811  (the fixture imported above)
    name, module, build, culprit = case[:4]
    flags = set(case[4:])
    real = "real" in flags
    root = tmp_path / "world"
    root.mkdir()
    world = World(root=root, cwd=root / "cwd", data=root / "data", model=tiny_model_dir, ranker=root / "ranker",
                  out=root / "out")
    world.cwd.mkdir()
    (root / "home").mkdir()
    (root / "cache").mkdir()
    shutil.copytree(tiny_dataset, world.data)
    shutil.copytree(saved_ranker, world.ranker)
    argv = build(world)
    before = _snapshot(root, world.out)
    out_before = _snapshot(world.out, world.out / "-") if world.out.exists() else None
    env = {"HOME": root / "home", "SSFT_CACHE": root / "cache", "SSFT_DATA_HOME": root / "cache" / "no-data-home",
           "HF_HUB_OFFLINE": "1"}
    result = run_cli(module, argv, cwd=world.cwd, env=env, real=real)

    prog = PROGS[module]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert lines and lines[-1].startswith(f"{prog}: error: "), result.stderr[-3000:]
    assert culprit in lines[-1], lines[-1]
    errors = [line for line in lines if line.startswith(f"{prog}: error")]
    assert len(errors) == 1, result.stderr
    # nothing written outside the output folder: cwd, inputs, cache and home as they were
    assert _snapshot(root, world.out) == before
    assert not list(world.cwd.iterdir())
    if out_before is None:
        assert not world.out.exists(), sorted(str(p) for p in world.out.rglob("*"))
    elif "out-may-change" not in flags:
        assert _snapshot(world.out, world.out / "-") == out_before
