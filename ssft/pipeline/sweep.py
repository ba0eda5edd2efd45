"""ssft-sweep GRID.yaml — run a grid of recipe overrides, resumably, one result row per run.

Grid file::

    recipe: recipes/base.yaml        # the base recipe (relative paths: from the grid file's folder)
    output_root: sweeps/nfcorpus     # run folders go under it (default: sweeps/<grid file stem>)
    results: results.jsonl           # under output_root unless absolute
    grid:                            # override key -> list of values; every combination is one run
      model.name: [bert-base-uncased]
      seed: [1, 2, 3]                # 001 §4.1.3: three seeds
    variants:                        # optional: override sets that go together, each crossed with the grid
      - {adapter: {method: full}, training.learning_rate: 5.0e-5}
      - {adapter: {method: lora, r: 16}, training.learning_rate: 1.0e-3}
    folds:                           # optional: K-fold query splits (001 §4.1: 5 folds, 3 train / 1 validation / 1 test)
      k: 5
      splits: [test]                 # qrels splits pooled into the queries to divide (default: all of the dataset's)
      seed: 0                        # a seeded random split: which queries land in which fold
      # file: folds/robust04.txt     # or a published fold definition (one fold per line, its query ids), e.g.
                                     # Huston & Croft's Robust04 / ClueWeb09b folds that 001 uses; seed then unused

Each run is ``python -m ssft.cli.train RECIPE override... training.output_dir=RUN_DIR`` in a subprocess. A run folder
that already holds ``metrics.json`` (written last by ssft-train) is finished and skipped; an unfinished one with
checkpoints is resumed by ssft-train itself, so an interrupted sweep resumes where it stopped, mid-run included.
Every run's recipe is validated before the first one trains. ``results`` gets one JSON line per run when it ends
(status ok / failed); a finished run
already listed as ok is not listed again; a failed run is retried on the next invocation (and listed again). At the
end, ``<output_root>/results.png`` draws every finished run the results file lists (its metrics.json rows as bars).
``output_root`` follows the output-folder rule of ``ssft.core.run_folder`` (``sweep_folder``): new, empty or an
earlier sweep's root, never the dataset or recipe it reads nor a folder around or inside one, locked by one sweep at a
time; a ``results`` file outside it must be new or an earlier sweep's (rows are appended to it).

With ``folds``, fold i is a derived BEIR folder ``<output_root>/folds/fold<i>`` (corpus and queries linked to the
source, qrels/train.tsv, dev.tsv, test.tsv written, and ``fold.json`` saying which definition made it): the k parts
are a *seeded random split* (the queries shuffled once with ``seed`` and cut into k parts — ssft's own, not any
published folds) or the parts a fold file lists (``file``: one fold per line, whitespace-separated query ids, ``#``
comments; e.g. Huston & Croft's five Robust04 / ClueWeb09b folds that 001 §4.1.1 follows); fold i tests on part i,
validates on part i+1 (mod k) and trains on the other k-2, so every query is tested exactly once. Each run gets
``data.fold: "<i>"``, so ``ssft.eval.tables.collect_runs`` averages a seed's folds before the seed t-test.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ssft.analysis.figures import plot_sweep_table
from ssft.config.parse import Checked, Problem, parse_dataclass
from ssft.config.recipe import load_recipe
from ssft.config.strict_yaml import safe_load_strict
from ssft.core import progress
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_text
from ssft.core.run_folder import (
    SWEEP_MARKERS,
    SWEEP_OUTPUTS,
    SWEEP_TABLE,
    OutputFolder,
    Source,
    local_dataset_folder,
    refuse_overlap,
)
from ssft.data.beir import load_dataset

logger = logging.getLogger("ssft")

FOLD_KEYS = ("k", "splits", "seed", "dataset", "file")


@dataclass
class Folds(Checked):
    k: int = 5
    splits: list[str] | None = None
    seed: int | None = None  # a seeded random split (default 0); not with file
    dataset: str | None = None  # default: the base recipe's data.dataset
    file: str | None = None  # a published fold definition: one fold per line, its query ids (k = its number of lines)

    def problem(self) -> Problem:
        if self.k < 3:
            return "k", "must be an integer >= 3 (one test, one validation, >= 1 train fold)"
        if self.file is not None and self.seed is not None:
            return "seed draws a random split, file names published folds; give one of them"
        return None

    @property
    def description(self) -> str:
        if self.file is not None:
            return f"folds from {self.file}"
        return f"seeded random split into {self.k} folds (seed {self.seed or 0}; not a published fold definition)"


def read_fold_file(path: str | Path) -> list[list[str]]:
    """A fold definition file: one fold per non-empty line, whitespace-separated query ids (``#`` starts a comment).
    Each query in one fold only; at least 3 folds. Errors name the file and line."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise SsftError(f"folds.file: not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SsftError(f"folds.file: {path}: not a UTF-8 text file") from None
    parts: list[list[str]] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        ids = line.split("#", 1)[0].split()
        if not ids:
            continue
        for qid in ids:
            if qid in seen:
                raise SsftError(f"{path}:{lineno}: query '{qid}' is already in the fold of line {seen[qid]}")
            seen[qid] = lineno
        parts.append(ids)
    if len(parts) < 3:
        raise SsftError(f"{path}: {len(parts)} fold(s); 001's rotation needs >= 3 (one test, one validation, >= 1 train)")
    return parts


def rotate_folds(parts: Sequence[Sequence[str]]) -> list[dict[str, list[str]]]:
    """001's rotation over k parts: fold i = test part i, validation part i+1 (mod k), train the other k-2."""
    k = len(parts)
    folds = []
    for i in range(k):
        val = (i + 1) % k
        train = [q for j, part in enumerate(parts) if j not in (i, val) for q in part]
        folds.append({"train": sorted(train), "dev": sorted(parts[val]), "test": sorted(parts[i])})
    return folds


@dataclass
class Grid:
    recipe: Path
    output_root: Path
    results: Path
    grid: dict[str, list[Any]]
    folds: Folds | None = None
    variants: list[dict[str, Any]] = field(default_factory=list)  # tied override sets, each crossed with the grid


@dataclass
class GridFile(Checked):
    """A grid file as written (see the module doc), parsed by ``ssft.config.parse`` like a recipe section (its
    values are checked here, so each is ``Any``); ``folds`` is parsed into ``Folds``, ``resolved`` gives the Grid."""

    recipe: Any = None
    output_root: Any = None
    results: Any = None
    grid: Any = None
    variants: Any = None
    folds: Any = None

    def check(self, where: str) -> None:
        super().check(where)
        if self.folds is not None:  # a config of its own (its errors name folds.key)
            self.folds = parse_dataclass(Folds, self.folds, f"{where}: folds",  # typed: k and seed integers, splits names
                                         unknown=lambda key, names: f"{where}: folds: unknown key '{key}'; known: "
                                                                    f"{', '.join(names)}")

    def problem(self) -> Problem:
        if not isinstance(self.recipe, str):
            return "recipe: expected the path of the base recipe"
        for key in ("output_root", "results"):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), str):
                return f"{key}: expected a path, got {getattr(self, key)!r}"
        return self._grid_problem() or self._variants_problem() or self._folds_problem()

    def _grid_problem(self) -> Problem:
        if not isinstance(self.grid or {}, dict):
            return "grid: expected a mapping of override key -> list of values"
        for key, values in (self.grid or {}).items():
            if not isinstance(values, list) or not values:
                return f"grid.{key}: expected a non-empty list of values"
            if key == "training.output_dir":
                return f"grid.{key}: set by the sweep (output_root)"
        return None

    def _variants_problem(self) -> Problem:
        if not isinstance(self.variants or [], list):
            return "variants: expected a list of mappings (override key -> value)"
        for i, variant in enumerate(self.variants or []):
            if not isinstance(variant, dict) or not variant:
                return f"variants[{i}]: expected a non-empty mapping of override key -> value"
            for key in variant:
                if key in (self.grid or {}):
                    return f"variants[{i}].{key}: also a grid key; set it in one place"
                if key == "training.output_dir":
                    return f"variants[{i}].{key}: set by the sweep (output_root)"
        return None

    def _folds_problem(self) -> Problem:
        if self.folds is None:
            return None
        if not isinstance(self.folds, dict):
            return f"folds: expected a mapping ({', '.join(FOLD_KEYS)})"
        keys = [*(self.grid or {}), *(k for v in self.variants or [] for k in v)]
        if any(key.startswith("data.") and key.endswith(("_split", "dataset")) for key in keys):
            return "grid: data.dataset and data.*_split are set per fold when folds is given"
        return None

    def resolved(self, path: Path) -> Grid:
        """The Grid: ``recipe`` and ``folds.file`` relative to the grid file's folder, ``results`` under
        ``output_root`` unless absolute; the base recipe must exist."""
        base = path.parent
        recipe = Path(self.recipe).expanduser()
        recipe = recipe if recipe.is_absolute() else base / recipe
        output_root = Path(self.output_root or f"sweeps/{path.stem}").expanduser()
        results = Path(self.results or "results.jsonl").expanduser()
        results = results if results.is_absolute() else output_root / results
        if self.folds is not None and self.folds.file is not None and not Path(self.folds.file).expanduser().is_absolute():
            self.folds.file = str(base / self.folds.file)  # like recipe: relative to the grid file's folder
        if not recipe.is_file():
            raise SsftError(f"{path}: recipe: base recipe not found: {recipe}")
        return Grid(recipe, output_root, results, self.grid or {}, self.folds, self.variants or [])


@dataclass
class Run:
    name: str
    overrides: dict[str, Any]
    fold: int | None = None
    run_dir: Path = field(default_factory=Path)


# ---------------------------------------------------------------- grid file


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file (``GridFile``, through the recipes' parser); every problem is one SsftError naming
    the key."""
    path = Path(path)
    if not path.is_file():
        raise SsftError(f"grid file not found: {path}")
    try:
        raw = safe_load_strict(path.read_text(encoding="utf-8"), str(path)) or {}  # no duplicate keys, no alias bombs
    except yaml.YAMLError as err:
        raise SsftError(f"{path}: malformed YAML: {str(err).splitlines()[0]}") from None
    except UnicodeDecodeError:
        raise SsftError(f"{path}: not a UTF-8 text file") from None
    if not isinstance(raw, dict):
        raise SsftError(f"{path}: expected a mapping")
    grid = parse_dataclass(GridFile, raw, str(path),
                           unknown=lambda key, names: f"{path}: unknown key '{key}'; known: {', '.join(names)}")
    return grid.resolved(path)


# ---------------------------------------------------------------- folds


def kfold_splits(query_ids: Sequence[str], k: int = 5, seed: int = 0) -> list[dict[str, list[str]]]:
    """001's rotation: shuffle the queries once, cut them into ``k`` parts; fold i = test part i, validation part
    i+1 (mod k), train the remaining k-2 parts. Every query is a test query in exactly one fold."""
    if k < 3:
        raise SsftError(f"folds.k: must be >= 3, got {k}")
    ids = sorted(set(query_ids))
    if len(ids) < k:
        raise SsftError(f"folds: {len(ids)} queries cannot be divided into {k} folds")
    random.Random(seed).shuffle(ids)
    return rotate_folds([ids[i::k] for i in range(k)])


def write_fold_datasets(source: str, folds: Folds, root: Path) -> list[Path]:
    """The k derived BEIR folders under ``root`` (corpus/queries linked, qrels written); returns their paths."""

    dataset = load_dataset(source)
    splits = folds.splits or dataset.splits()
    qrels: dict[str, dict[str, int]] = {}
    for split in splits:
        for qid, rels in dataset.qrels(split).items():
            if qid in qrels and qrels[qid] != rels:
                raise SsftError(f"folds: query '{qid}' has different judgments in two of the splits {', '.join(splits)}")
            qrels[qid] = rels
    if folds.file is not None:
        parts = read_fold_file(folds.file)
        unjudged = [q for part in parts for q in part if q not in qrels]
        if unjudged:
            raise SsftError(f"folds.file: {folds.file}: {len(unjudged)} query id(s) without judgments in "
                            f"{source} ({', '.join(splits)}), e.g. {', '.join(unjudged[:3])}")
        left_out = len(qrels) - sum(len(part) for part in parts)
        if left_out:
            logger.warning("folds: %d judged queries of %s are in no fold of %s (left out)", left_out, source, folds.file)
        definition = rotate_folds(parts)
    else:
        definition = kfold_splits(list(qrels), folds.k, folds.seed or 0)
    paths = []
    for i, fold in enumerate(definition):
        dest = root / f"fold{i}"
        (dest / "qrels").mkdir(parents=True, exist_ok=True)
        for name in ("corpus.jsonl", "corpus.jsonl.gz", "queries.jsonl", "queries.jsonl.gz"):
            src = dataset.path / name
            if src.is_file() and not (dest / name).exists():
                os.symlink(src.resolve(), dest / name)
        for split, qids in fold.items():
            lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{r}" for q in qids for d, r in sorted(qrels[q].items())]
            atomic_write_text(dest / "qrels" / f"{split}.tsv", "\n".join(lines) + "\n")
        atomic_write_text(dest / "fold.json", json.dumps({"fold": i, "folds": len(definition), "source": source,
                                                           "definition": folds.description}) + "\n")
        paths.append(dest)
    return paths


# ---------------------------------------------------------------- runs


def _slug(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if isinstance(value, dict) and "method" in value:
        text = str(value["method"])
        if text == "hybrid":  # e.g. hidden_prefix+lora, or hidden_prefix+lora_concurrent
            parts = [v.get("method", "?") if isinstance(v, dict) else str(v) for v in (value.get("first"), value.get("second"))]
            text = "+".join(parts) + ("_concurrent" if value.get("mode") == "concurrent" else "")
    text = text.rstrip("/").split("/")[-1]
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text)[:40]


def expand(grid: Grid, fold_dirs: Sequence[Path] | None = None) -> list[Run]:
    """Every combination of the grid's values (× variants × folds); names are readable slugs plus a hash of the
    overrides."""
    keys = list(grid.grid)
    combos = list(itertools.product(*(grid.grid[k] for k in keys))) or [()]
    runs = []
    # seeds (grid values) outer, variants inner: an interrupted sweep has whole seeds of every method done
    for combo, variant in itertools.product(combos, grid.variants or [{}]):
        for fold in (range(len(fold_dirs)) if fold_dirs else [None]):
            overrides = {**variant, **dict(zip(keys, combo))}
            if fold is not None:
                overrides.update({"data.dataset": str(fold_dirs[fold]), "data.train_split": "train",
                                  "data.validation_split": "dev", "data.test_split": "test"})
            # the run's name hashes what it trains on (data.fold only labels it: names stay those of earlier sweeps)
            digest = hashlib.sha1(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:8]
            if fold is not None:
                overrides["data.fold"] = str(fold)
            slug = "-".join(f"{k.split('.')[-1]}={_slug(v)}" for k, v in [*variant.items(), *zip(keys, combo)])
            name = "-".join(part for part in (slug, f"fold{fold}" if fold is not None else "", digest) if part)
            runs.append(Run(name, overrides, fold, grid.output_root / "runs" / name))
    return runs


def train_command(recipe: Path, run: Run) -> list[str]:
    """``python -m ssft.cli.train RECIPE key=value ... training.output_dir=RUN_DIR`` (values as JSON, which YAML reads)."""
    overrides = [f"{k}={json.dumps(v)}" for k, v in run.overrides.items()]
    return [sys.executable, "-m", "ssft.cli.train", str(recipe), *overrides, f"training.output_dir={run.run_dir}"]


def subprocess_runner(command: list[str], run_dir: Path) -> int:
    """Run one training; its output is appended to ``run_dir/sweep.log`` (a retried run keeps the earlier log)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "sweep.log", "a") as log:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode


def _listed_ok(results: Path) -> set[str]:
    done = set()
    if results.is_file():
        for line in results.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            if row.get("status") == "ok":
                done.add(row.get("run"))
    return done


def check_runs(grid: Grid, runs: Sequence[Run]) -> None:
    """Validate every run's recipe (base recipe + its overrides) before anything trains: a bad grid value fails
    the sweep at once, naming the run, instead of failing run after run."""

    for run in runs:
        overrides = [f"{k}={json.dumps(v)}" for k, v in run.overrides.items()]
        try:
            load_recipe(grid.recipe, overrides)
        except SsftError as err:
            raise SsftError(f"run {run.name}: {err}") from None


# ---------------------------------------------------------------- where the sweep writes


def _sources(grid: Grid) -> tuple[Source, ...]:
    """What the sweep reads and must not write into: the base recipe and the dataset(s) it trains on."""
    sources: list[Source] = [(grid.recipe, "the base recipe")]
    names = [grid.folds.dataset if grid.folds else None]
    try:
        names.append(load_recipe(grid.recipe).data.dataset)
    except SsftError:
        pass  # a bad recipe is reported by check_runs, naming the run
    for name in names:
        folder = local_dataset_folder(name)
        if folder is not None:
            sources.append((folder, "the dataset folder the sweep trains on"))
    return tuple(sources)


def sweep_folder(grid: Grid) -> OutputFolder:
    """The output root under the output-folder rule (``ssft.core.run_folder``): new, empty or an earlier ssft-sweep
    root (``runs/``, ``folds/``, the results file), never the dataset or recipe it reads, a folder holding one or a
    folder inside one; locked by one sweep at a time. Each run's folder under ``runs/`` is ssft-train's own."""
    outputs, markers = list(SWEEP_OUTPUTS), list(SWEEP_MARKERS)
    root, results = grid.output_root, grid.results
    if results.parent != root and root in results.parents:  # results: sub/results.jsonl under the root
        outputs.append(results.relative_to(root).parts[0])
    elif results.parent == root and results.name not in outputs:  # results: table.jsonl
        outputs.append(results.name)
        markers.append(results.name)
    return OutputFolder(root, "ssft-sweep", tuple(outputs), tuple(markers), where="output_root", sources=_sources(grid))


def check_results_file(grid: Grid) -> None:
    """``results`` outside the output root: rows are appended to it, so it must be new or a results file of ssft-sweep
    (JSON rows with ``run`` and ``status``), and not in what the sweep reads."""
    results = grid.results
    refuse_overlap(results, _sources(grid), "results")
    if results.is_dir():
        raise SsftError(f"results: {results} is a folder, not a file")
    if not results.exists():
        return
    try:
        lines = results.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        lines = ["-"]
    for i, line in enumerate(lines):
        try:
            row = json.loads(line) if line.strip() else {"run": "", "status": ""}
            ok = isinstance(row, dict) and "run" in row and "status" in row
        except json.JSONDecodeError:
            ok = i == len(lines) - 1  # a last line cut by a crash
        if not ok:
            raise SsftError(f"results: {results} exists and is no ssft-sweep results file (line {i + 1}); rows are "
                            f"appended to it: name a new file or an earlier sweep's")


def check_outputs(grid: Grid, check_lock: bool = True) -> OutputFolder:
    """Both places a sweep writes, checked before anything is written (``--dry-run`` too, without the lock)."""
    folder = sweep_folder(grid)
    folder.check(check_lock=check_lock)
    if grid.output_root not in grid.results.parents:
        check_results_file(grid)
    return folder


def run_sweep(grid: Grid, runner: Callable[[list[str], Path], int] = subprocess_runner) -> list[dict[str, Any]]:
    """Run every unfinished run of the grid in order; returns the rows appended to ``grid.results``. The output
    root is claimed (locked) for the whole sweep."""
    folder = check_outputs(grid)
    # every run's recipe checked before the root is touched (fold datasets: at the paths they will be written to)
    k = grid.folds.k if grid.folds is not None else 0
    check_runs(grid, expand(grid, [grid.output_root / "folds" / f"fold{i}" for i in range(k)] if k else None))
    folder.claim()
    try:
        return _run_sweep(grid, runner)
    except SsftError:
        folder.abandon()  # refused before a run started (e.g. a fold file): what claim added goes again
        raise
    finally:
        folder.release()


def _run_sweep(grid: Grid, runner: Callable[[list[str], Path], int]) -> list[dict[str, Any]]:
    fold_dirs = None
    if grid.folds is not None:

        source = grid.folds.dataset or load_recipe(grid.recipe).data.dataset
        fold_dirs = write_fold_datasets(source, grid.folds, grid.output_root / "folds")
        logger.info("folds: %s of %s", grid.folds.description, source)
    runs = expand(grid, fold_dirs)
    check_runs(grid, runs)
    listed = _listed_ok(grid.results)
    grid.results.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    # a line every SSFT_PROGRESS_INTERVAL seconds at most (each run's own log goes to its sweep.log)
    bar = progress.Progress("sweep", len(runs), "runs")
    for i, run in enumerate(runs, 1):
        if i > 1:
            bar.update()
        finished = (run.run_dir / "metrics.json").is_file()
        if finished and run.name in listed:
            logger.info("[%d/%d] %s: finished, skipped", i, len(runs), run.name)
            continue
        started = time.time()
        if finished:
            code = 0
            logger.info("[%d/%d] %s: finished earlier, listing its results", i, len(runs), run.name)
        else:
            logger.info("[%d/%d] %s: training", i, len(runs), run.name)
            code = runner(train_command(grid.recipe, run), run.run_dir)
        row: dict[str, Any] = {"run": run.name, "overrides": run.overrides, "fold": run.fold, "run_dir": str(run.run_dir),
                               "returncode": code, "seconds": round(time.time() - started, 1)}
        if code == 0 and (run.run_dir / "metrics.json").is_file():
            row["status"] = "ok"
            row["metrics"] = json.loads((run.run_dir / "metrics.json").read_text())
            info = run.run_dir / "run_info.json"
            if info.is_file():
                row["trainable_parameters"] = json.loads(info.read_text()).get("trainable_parameters")
        else:
            row["status"] = "failed"
            logger.warning("%s failed (exit code %s); see %s", run.name, code, run.run_dir / "sweep.log")
        with open(grid.results, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        rows.append(row)
    bar.update(len(runs) - bar.done)
    bar.close()
    write_table_figure(grid)
    return rows


def listed_rows(results: Path) -> list[dict[str, Any]]:
    """The finished runs a results file lists, each run once (its latest ok row), in the order first listed."""
    latest: dict[str, dict[str, Any]] = {}
    for line in results.read_text(encoding="utf-8").splitlines() if results.is_file() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a last line cut by a crash
        if isinstance(row, dict) and row.get("status") == "ok" and isinstance(row.get("metrics"), dict):
            latest[str(row.get("run"))] = row
    return list(latest.values())


def write_table_figure(grid: Grid) -> Path | None:
    """``<output_root>/results.png``: every finished run the results file lists, its metrics.json rows as bars
    (``ssft.analysis.figures.plot_sweep_table``); none while no run has finished."""
    rows = listed_rows(grid.results)
    if not rows:
        logger.info("no finished run yet: %s not written", SWEEP_TABLE)
        return None
    path = plot_sweep_table(rows, grid.output_root / SWEEP_TABLE, title=f"ssft-sweep {grid.output_root.name}")
    logger.info("the results table as a figure: %s", path)
    return path
