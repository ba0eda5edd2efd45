"""Efficacy of the shipped recipes: each recipe's trained model against BM25, the zero-shot
checkpoint, its own start and sentence-transformers' standard recipe, over seeds and datasets, with paired t-tests.

    SSFT_DATA_HOME=../shared/data python benchmarks/efficacy.py \
        --recipes recipes/quickstart.yaml,recipes/ss_lora_colbert.yaml [--seeds 42,43,44] \
        [--datasets nfcorpus,scifact,cranfield] [--st-baseline] [--extra "training.max_steps=20"] [--write]
    python benchmarks/efficacy.py --compare recipes/grid/colbert_lora.yaml,recipes/grid/colbert_ss_lora_hetero_value.yaml \
        [--compare A2.yaml,B2.yaml ...] --datasets nfcorpus,scifact [--write]
    python benchmarks/efficacy.py --smoke            # the whole pipeline on a tiny random model (tests)

For each recipe, seed and dataset (everything under ``--out``, default runs/bench/efficacy; a finished piece is reused,
so a killed invocation resumes where it stopped):

- **trained**: ``ssft-train RECIPE seed=S training.output_dir=OUT/<stem>/seed-S [--extra]`` as a subprocess; its
  CPU-seconds (``getrusage(RUSAGE_CHILDREN)``, user + sys) and wall seconds go to ``OUT/<stem>/seed-S.timing.json``.
  A run folder holding metrics.json is reused, not retrained.
- **start**: on the recipe's own dataset the run folder's ``start`` row (where the start could be scored); elsewhere
  (and where the start has a random head) a run that hands back its start, ``training.learning_rate=0
  training.max_steps=1 model.head_learning_rate=0`` (``OUT/<stem>/start``, first seed only; its run_info must say
  ``weights_changed: false``).
- **BM25**: the run folder's first-stage row on the own dataset, ssft-eval's BM25 elsewhere.
- **zero-shot**: the recipe's checkpoint (``--zero-shot`` to name another) as a dense model (mean pooling, cosine),
  under the recipe's first stage and depth (full retrieval where the recipe is a dense one).
- **ST baseline** (``--st-baseline``): ``SentenceTransformerTrainer`` + ``MultipleNegativesRankingLoss`` (bi-encoder
  recipes: dense, twin, colbert) or ``CrossEncoderTrainer`` + ``BinaryCrossEntropyLoss`` (cross-encoder recipes) on the
  run's own training groups (its recipe.yaml: same base model, queries, positives, negatives of the first epoch's draw),
  epochs, batch (queries per step; a cross-encoder's pairs per step = queries x (1 + negatives)), learning rate (the
  recipe's for full fine-tuning; for an adapter recipe sentence-transformers' default 5e-5, as it trains every weight),
  precision (bf16 mixed precision where the ssft run trained so), warm-up
  (capped at half the run, as ssft-train) and max length; saved and scored like the trained model.

The models other than the run folders' rows are scored by ``ssft.pipeline.evaluate.evaluate_datasets`` -- what
``ssft-eval`` runs -- in one child process (``--worker``), which also keeps each query's nDCG@10 (ssft-eval's eval.json
has only the means; the equivalent ssft-eval command is recorded beside each result). Every score uses the recipe's
eval.precision and eval.backend. Statistics per dataset: nDCG@10 mean ± sd over seeds per row; two-sided paired t-tests
(scipy.stats.ttest_rel over the shared judged queries, each query's nDCG@10 averaged over seeds) of trained against
every other row; null where undefined (fewer than 2 queries, identical values). ``--write``: BENCHMARKS.md § efficacy
(or § semi_siamese_warm_starts with ``--compare``).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from scipy import stats

from ssft.config.model import ModelConfig
from ssft.config.recipe import load_recipe
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.core.hub import resolve_model
from ssft.core.output_names import per_query_file
from ssft.core.run_folder import local_dataset_folder
from ssft.eval.significance import read_per_query
from ssft.pipeline import evaluate as ev
from ssft.pipeline.build import QuerySource, training_source
from ssft.pipeline.inputs import load_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_notes_option, command, with_notes, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
METRIC = "nDCG@10"
EVAL_METRICS = ["nDCG@10", "R@100"]
ROWS = ("bm25", "zero_shot", "start", "trained", "st_baseline")
ROW_NAMES = {"bm25": "BM25", "zero_shot": "zero-shot", "start": "start", "trained": "trained",
             "st_baseline": "ST baseline"}
START_OVERRIDES = ["training.learning_rate=0", "training.max_steps=1", "model.head_learning_rate=0"]
ST_LEARNING_RATE = 5e-5  # sentence-transformers' default (its TrainingArguments'), for the baseline of an adapter recipe
ZERO_SHOT_LENGTHS = (256, 64)  # ssft-eval's defaults for a model given by name (document, query tokens)


# ---------------------------------------------------------------------------------------------- small helpers
def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=1) + "\n")
    tmp.replace(path)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def ttest(trained: dict[str, float], other: dict[str, float]) -> tuple[float | None, int]:
    """Two-sided paired t-test over the queries both sides have: (p or None where undefined, shared queries)."""
    shared = sorted(set(trained) & set(other))
    if len(shared) < 2:
        return None, len(shared)
    x, y = [trained[q] for q in shared], [other[q] for q in shared]
    if all(a == b for a, b in zip(x, y)):
        return None, len(shared)
    p = float(stats.ttest_rel(x, y).pvalue)
    return (None if math.isnan(p) else min(1.0, max(0.0, p))), len(shared)


def dataset_key(name: str) -> str:
    return Path(str(name).rstrip("/")).name or str(name)


def same_dataset(a: str, b: str) -> bool:
    fa, fb = local_dataset_folder(a), local_dataset_folder(b)
    if fa is not None and fb is not None:
        return os.path.realpath(fa) == os.path.realpath(fb)
    return str(a).rstrip("/") == str(b).rstrip("/")


def read_per_query_file(path: Path) -> dict[str, float]:
    return read_per_query(path, METRIC)


# ---------------------------------------------------------------------------------------------- the plan
class Recipe:
    """One recipe as the benchmark runs it: where its runs go and how its models are scored."""

    def __init__(self, path: Path, out: Path, extra: list[str]):
        self.path, self.stem, self.extra = path, path.stem, extra
        self.folder = out / self.stem
        self.recipe = load_recipe(path, list(extra))
        r = self.recipe
        self.architecture = r.model.architecture
        self.full = bool(getattr(MODELS.get(self.architecture), "full_retrieval", False))
        self.first_stage = "full" if self.full else r.eval.first_stage
        self.depth = r.eval.depth
        self.dataset = str(r.data.dataset)
        self.test_split = r.data.test_split
        self.precision, self.backend = r.eval.precision, r.eval.backend
        self.checkpoint = r.model.name

    def run_dir(self, seed: int) -> Path:
        return self.folder / f"seed-{seed}"

    @property
    def start_dir(self) -> Path:
        return self.folder / "start"

    @property
    def start_overrides(self) -> list[str]:
        """START_OVERRIDES, and (where nothing is tuned on validation) no validation and no start row: the start run
        only has to hand its model back, the own dataset's start row comes from the trained runs."""
        e = self.recipe.eval
        if "auto" in (e.interpolation, e.fusion):
            return list(START_OVERRIDES)
        held = ["data.holdout_queries=null"] if self.recipe.data.holdout_queries is not None else []
        return [*START_OVERRIDES, "data.validation_split=null", *held, "eval.start=false"]

    def train_command(self, seed: int, out: Path, extra: list[str] = ()) -> list[str]:
        return ["ssft-train", str(self.path), f"seed={seed}", f"training.output_dir={out}", *self.extra, *extra]

    def describe(self) -> str:
        stage = (f"full retrieval, top-{self.depth}" if self.full else f"{self.first_stage} top-{self.depth}")
        return f"{self.architecture} + {self.recipe.adapter.method}, trained on {dataset_key(self.dataset)}, {stage}"


def _normal(command: list[str]) -> list[str]:
    """A command with its recipe path and output folder resolved (the same run, however the paths were written)."""
    out = []
    for token in command:
        key, eq, value = token.partition("=")
        if eq and key == "training.output_dir":
            token = f"{key}={Path(value).resolve()}"
        elif not eq and token.endswith((".yaml", ".yml")):
            token = str(Path(token).resolve())
        out.append(token)
    return out


def train(command: list[str], out: Path, log: Path) -> dict[str, Any]:
    """Run one ssft-train (reused when ``out`` holds a finished run); its CPU and wall seconds, recorded beside it."""
    timing = out.parent / f"{out.name}.timing.json"
    if (out / "metrics.json").is_file():
        if timing.is_file():
            record = json.loads(timing.read_text())
            if record.get("command") is not None and _normal(record["command"]) != _normal(command):
                raise RuntimeError(f"{out} was trained by `{shlex.join(record['command'])}`, not `{shlex.join(command)}`: "
                                   "name another --out, or remove that folder (and its eval/ results) to train it again")
            return record
        info = json.loads((out / "run_info.json").read_text()) if (out / "run_info.json").is_file() else {}
        return {"command": command, "cpu_seconds": None, "wall_seconds": info.get("wall_seconds"),
                "note": "finished before this script timed it"}
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"[efficacy] {shlex.join(command)}", flush=True)
    cpu, wall = _children_cpu(), time.perf_counter()
    with open(log, "a") as fh:
        done = subprocess.run(command, stdout=fh, stderr=subprocess.STDOUT)
    cpu, wall = _children_cpu() - cpu, time.perf_counter() - wall
    if done.returncode != 0 or not (out / "metrics.json").is_file():
        raise RuntimeError(f"{shlex.join(command)}: exit {done.returncode} (log: {log})")
    record = {"command": command, "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1),
              "load": round(os.getloadavg()[0], 2)}
    _write_json(timing, record)
    return record


def eval_job(model: Any, dataset: str, split: str, rec: Recipe, out: Path, lengths: tuple[int, int] | None = None,
             cross_checkpoint: bool = False) -> dict[str, Any]:
    """One model on one dataset as ssft-eval scores it (``out``: ssft-eval's folder; ``out``.json: the result)."""
    max_length, query_max_length = lengths or ZERO_SHOT_LENGTHS
    command = ["ssft-eval", str(model), "--datasets", dataset, "--split", split, "--first-stage", rec.first_stage,
               "--depth", str(rec.depth), "--precision", rec.precision, "--backend", rec.backend,
               "--max-length", str(max_length), "--query-max-length", str(query_max_length),
               "--output", str(out), "--overwrite"]
    return {"kind": "eval", "model": str(model), "dataset": dataset, "split": split, "first_stage": rec.first_stage,
            "depth": rec.depth, "precision": rec.precision, "backend": rec.backend, "max_length": max_length,
            "query_max_length": query_max_length, "cross_checkpoint": cross_checkpoint, "out": str(out),
            "result": str(out) + ".json", "command": command}


def st_job(rec: Recipe, seed: int, out: Path) -> dict[str, Any]:
    return {"kind": "st_train", "run_dir": str(rec.run_dir(seed)), "seed": seed, "out": str(out),
            "result": str(out / "st_train.json"), "loss": "bce" if rec.architecture == "cross" else "mnrl"}


def st_lengths(rec: Recipe) -> tuple[int, int]:
    return rec.recipe.model.max_length, rec.recipe.model.query_max_length


class Plan:
    """Everything one invocation trains and scores, and where each result lies."""

    def __init__(self, a, recipes: list[Recipe]):
        self.a, self.recipes, self.out = a, recipes, Path(a.out)
        self.log = self.out / "efficacy.log"
        self.timings: dict[str, dict] = {}
        self.jobs: list[dict] = []

    # ---- phase 1: the ssft-train runs
    def train_all(self, start_runs: bool) -> None:
        for rec in self.recipes:
            for seed in self.a.seeds:
                self.timings[f"{rec.stem}/seed-{seed}"] = train(rec.train_command(seed, rec.run_dir(seed)),
                                                                rec.run_dir(seed), self.log)
            if start_runs:
                seed = self.a.seeds[0]
                record = train(rec.train_command(seed, rec.start_dir, rec.start_overrides), rec.start_dir, self.log)
                info = json.loads((rec.start_dir / "run_info.json").read_text())
                record["weights_changed"] = info.get("weights_changed")
                if info.get("weights_changed") is not False:
                    print(f"[efficacy] WARNING: {rec.start_dir}: run_info.json says weights_changed: "
                          f"{info.get('weights_changed')}; its 'start' rows are not the untouched start", flush=True)
                self.timings[f"{rec.stem}/start"] = record

    # ---- phase 2: what the worker scores (and trains, for the ST baseline)
    def eval_path(self, rec: Recipe, key: str, dataset: str) -> Path:
        return rec.folder / "eval" / key / dataset_key(dataset)

    def zero_shot_path(self, rec: Recipe, dataset: str) -> Path:
        model = self.zero_shot_model(rec)
        stage = f"{rec.first_stage}-{rec.depth}-{rec.precision}-{rec.backend}-{'x'.join(map(str, self.a.zero_shot_lengths))}"
        return self.out / "zero-shot" / dataset_key(model) / stage / f"{dataset_key(dataset)}-{self.split_of(rec, dataset)}"

    def zero_shot_model(self, rec: Recipe) -> str:
        return self.a.zero_shot or rec.checkpoint

    def split_of(self, rec: Recipe, dataset: str) -> str:
        return rec.test_split if same_dataset(dataset, rec.dataset) else "test"

    def plan_efficacy(self) -> None:
        for rec in self.recipes:
            for dataset in self.a.datasets:
                split = self.split_of(rec, dataset)
                own = same_dataset(dataset, rec.dataset)
                self.jobs.append(eval_job(self.zero_shot_model(rec), dataset, split, rec, self.zero_shot_path(rec, dataset),
                                          tuple(self.a.zero_shot_lengths)))
                if not own:
                    for seed in self.a.seeds:
                        self.jobs.append(eval_job(rec.run_dir(seed), dataset, split, rec,
                                                  self.eval_path(rec, f"trained-seed-{seed}", dataset)))
                if not own or not self.start_scored(rec):
                    self.jobs.append(eval_job(rec.start_dir, dataset, split, rec, self.eval_path(rec, "start", dataset)))
            if self.a.st_baseline:
                for seed in self.a.seeds:
                    folder = rec.folder / f"st-seed-{seed}"
                    self.jobs.append(st_job(rec, seed, folder))
                    for dataset in self.a.datasets:
                        self.jobs.append(eval_job(folder / "model", dataset, self.split_of(rec, dataset), rec,
                                                  self.eval_path(rec, f"st-seed-{seed}", dataset), st_lengths(rec),
                                                  cross_checkpoint=rec.architecture == "cross"))

    def plan_trained(self) -> None:
        for rec in self.recipes:
            for dataset in self.a.datasets:
                if not same_dataset(dataset, rec.dataset):
                    for seed in self.a.seeds:
                        self.jobs.append(eval_job(rec.run_dir(seed), dataset, "test", rec,
                                                  self.eval_path(rec, f"trained-seed-{seed}", dataset)))

    def start_scored(self, rec: Recipe) -> bool:
        """Whether every seed's run folder scored its start on the test split (metrics.json's ``start`` row)."""
        return all("start" in json.loads((rec.run_dir(s) / "metrics.json").read_text()) for s in self.a.seeds)

    def run_worker(self) -> None:
        todo = [j for j in self.jobs if not Path(j["result"]).is_file()]
        if not todo:
            return
        jobs_file = self.out / "worker-jobs.json"
        _write_json(jobs_file, todo)
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(jobs_file)]
        print(f"[efficacy] {len(todo)} job(s) in one worker: {shlex.join(command)}", flush=True)
        with open(self.log, "a") as fh:
            done = subprocess.run(command, stdout=fh, stderr=subprocess.STDOUT)
        missing = [j for j in todo if not Path(j["result"]).is_file()]
        if done.returncode != 0 or missing:
            raise RuntimeError(f"the worker failed ({len(missing)} of {len(todo)} job(s) without a result, exit "
                               f"{done.returncode}); see {self.log}")


# ---------------------------------------------------------------------------------------------- reading results
def _eval_result(path: Path) -> dict[str, Any]:
    return json.loads((Path(str(path) + ".json")).read_text())


def _run_row(run_dir: Path, split: str, row: str) -> dict[str, Any] | None:
    """A metrics.json row of a run folder with its per-query nDCG@10 (None where the run has no such row)."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    if row not in metrics:
        return None
    return {"value": metrics[row][METRIC], "per_query": read_per_query_file(run_dir / per_query_file(row, split)),
            "source": f"{run_dir.name}/metrics.json '{row}'"}


def _first_stage_row(run_dir: Path, split: str) -> str:
    rows = [r for r in json.loads((run_dir / "metrics.json").read_text())
            if r not in (split, "start", "interpolated") and not r.startswith(split + "+")]
    return "bm25" if "bm25" in rows else rows[0]


def summarise(instances: list[dict[str, Any]]) -> dict[str, Any]:
    """A row on one dataset from its instances (one per seed, or one): mean ± sd over them, per-query averages."""
    values = [i["value"] for i in instances]
    mean, sd = _mean_sd(values)
    per_query: dict[str, list[float]] = {}
    for inst in instances:
        for q, v in inst["per_query"].items():
            per_query.setdefault(q, []).append(v)
    return {"mean": mean, "sd": sd, "values": values, "seeds": [i.get("seed") for i in instances],
            "sources": sorted({i["source"] for i in instances}),
            "per_query": {q: statistics.fmean(v) for q, v in per_query.items()}}


def _eval_instance(path: Path, side: str = "model", seed: int | None = None) -> dict[str, Any]:
    r = _eval_result(path)
    return {"value": r[side][METRIC], "per_query": r["per_query"][side], "seed": seed,
            "source": f"ssft-eval ({path.relative_to(path.parents[2])})"}


def efficacy_results(plan: Plan) -> dict[str, Any]:
    a = plan.a
    out: dict[str, Any] = {"mode": "efficacy", "metric": METRIC, "seeds": a.seeds, "datasets": a.datasets,
                           "rows": list(ROWS), "recipes": {}}
    for rec in plan.recipes:
        datasets: dict[str, Any] = {}
        for dataset in a.datasets:
            split = plan.split_of(rec, dataset)
            own = same_dataset(dataset, rec.dataset)
            inst: dict[str, list[dict]] = {row: [] for row in ROWS}
            zero = plan.zero_shot_path(rec, dataset)
            inst["zero_shot"].append(_eval_instance(zero))
            if own:
                for seed in a.seeds:
                    run = rec.run_dir(seed)
                    inst["trained"].append({**_run_row(run, split, split), "seed": seed})
                    inst["bm25"].append({**_run_row(run, split, _first_stage_row(run, split)), "seed": seed})
                    start = _run_row(run, split, "start")
                    if start is not None and plan.start_scored(rec):
                        inst["start"].append({**start, "seed": seed})
                if not inst["start"]:
                    inst["start"].append(_eval_instance(plan.eval_path(rec, "start", dataset)))
                inst["bm25"] = inst["bm25"][:1]  # one BM25 ranking: the same in every seed's run
            else:
                for seed in a.seeds:
                    inst["trained"].append(_eval_instance(plan.eval_path(rec, f"trained-seed-{seed}", dataset), seed=seed))
                inst["start"].append(_eval_instance(plan.eval_path(rec, "start", dataset)))
                inst["bm25"].append(_eval_instance(zero, "bm25"))
            if a.st_baseline:
                for seed in a.seeds:
                    inst["st_baseline"].append(_eval_instance(plan.eval_path(rec, f"st-seed-{seed}", dataset), seed=seed))
            rows = {row: summarise(inst[row]) if inst[row] else None for row in ROWS}
            trained = rows["trained"]["per_query"]
            for row, summary in rows.items():
                if summary is None:
                    continue
                p, n = ttest(trained, summary["per_query"]) if row != "trained" else (None, len(trained))
                summary.update(pvalue_vs_trained=p, queries=n)
                summary["per_query"] = dict(sorted(summary["per_query"].items()))
            datasets[dataset_key(dataset)] = {"dataset": dataset, "split": split, "own": own, "rows": rows}
        mean = {}
        for row in ROWS:
            vals = [d["rows"][row]["mean"] for d in datasets.values() if d["rows"][row] is not None]
            mean[row] = statistics.fmean(vals) if vals and len(vals) == len(datasets) else None
        timing = [plan.timings.get(f"{rec.stem}/seed-{s}", {}) for s in a.seeds]
        st = [json.loads((rec.folder / f"st-seed-{s}" / "st_train.json").read_text()) for s in a.seeds] if a.st_baseline else []
        out["recipes"][rec.stem] = {
            "recipe": str(rec.path), "describe": rec.describe(), "architecture": rec.architecture,
            "own_dataset": rec.dataset, "first_stage": rec.first_stage, "depth": rec.depth, "precision": rec.precision,
            "zero_shot": plan.zero_shot_model(rec), "extra": rec.extra, "datasets": datasets, "mean_over_datasets": mean,
            "training": _timing_summary(timing), "start_run": plan.timings.get(f"{rec.stem}/start"),
            "st_training": _timing_summary(st) if st else None}
    return out


def _timing_summary(records: list[dict]) -> dict[str, Any]:
    cpu = [r["cpu_seconds"] for r in records if r.get("cpu_seconds") is not None]
    wall = [r["wall_seconds"] for r in records if r.get("wall_seconds") is not None]
    (cm, cs), (wm, ws) = _mean_sd(cpu), _mean_sd(wall)
    return {"cpu_seconds": {"mean": cm, "sd": cs, "values": cpu}, "wall_seconds": {"mean": wm, "sd": ws, "values": wall}}


def compare_results(plan: Plan, pairs: list[tuple[Recipe, Recipe]]) -> dict[str, Any]:
    a = plan.a
    result: dict[str, Any] = {"mode": "compare", "metric": METRIC, "seeds": a.seeds, "datasets": a.datasets, "pairs": []}
    for left, right in pairs:
        datasets = {}
        for dataset in a.datasets:
            sides = {}
            for name, rec in (("a", left), ("b", right)):
                instances = []
                for seed in a.seeds:
                    if same_dataset(dataset, rec.dataset):
                        instances.append({**_run_row(rec.run_dir(seed), rec.test_split, rec.test_split), "seed": seed})
                    else:
                        instances.append(_eval_instance(plan.eval_path(rec, f"trained-seed-{seed}", dataset), seed=seed))
                sides[name] = summarise(instances)
            p, n = ttest(sides["b"]["per_query"], sides["a"]["per_query"])
            for side in sides.values():
                side.pop("per_query")
            datasets[dataset_key(dataset)] = {"dataset": dataset, **sides, "pvalue": p, "queries": n}
        mean = {s: statistics.fmean(d[s]["mean"] for d in datasets.values()) for s in ("a", "b")}
        result["pairs"].append({"a": left.stem, "b": right.stem, "a_recipe": str(left.path), "b_recipe": str(right.path),
                                "a_describe": left.describe(), "b_describe": right.describe(), "datasets": datasets,
                                "mean_over_datasets": mean,
                                "training": {side: _timing_summary([plan.timings.get(f"{rec.stem}/seed-{s}", {})
                                                                    for s in a.seeds])
                                             for side, rec in (("a", left), ("b", right))}})
    return result


# ---------------------------------------------------------------------------------------------- tables
def _cell(summary: dict | None) -> str:
    if summary is None or summary["mean"] is None:
        return "—"
    return f"{summary['mean']:.4f}" + (f" ± {summary['sd']:.4f}" if summary.get("sd") is not None else "")


def _p(p: float | None) -> str:
    return "—" if p is None else (f"{p:.2g}" if p < 0.001 else f"{p:.3f}")


def _seconds(t: dict | None) -> str:
    if not t or t["cpu_seconds"]["mean"] is None:
        return "not timed here"
    c, w = t["cpu_seconds"], t["wall_seconds"]
    sd = f" ± {c['sd']:.0f}" if c["sd"] is not None else ""
    return f"{c['mean']:.0f}{sd} CPU-s (wall {w['mean']:.0f} s)"


def efficacy_markdown(result: dict[str, Any], cmd: str) -> str:
    seeds = ", ".join(map(str, result["seeds"]))
    lines = ["## Efficacy: each recipe against BM25, the zero-shot checkpoint, its start and sentence-transformers", "",
             f"`{cmd}`", "",
             f"nDCG@10 on the test split of each dataset: mean ± sd over the training seeds ({seeds}) where a row depends "
             "on the seed, else its one value; p: two-sided paired t-test of the trained model against that row over the "
             "judged queries (scipy.stats.ttest_rel; each query's nDCG@10 averaged over seeds; — where undefined). "
             "The recipe's own dataset: BM25, start and trained from its run folders (`ssft-train`); the other datasets: "
             "`ssft-eval` of the run folder (same first stage and depth; a dense recipe retrieves from the whole corpus). "
             "Start elsewhere: a run of the recipe with `" + " ".join(START_OVERRIDES) + "` (it hands back its start). "
             "Zero-shot: the checkpoint as a dense model (mean pooling, cosine) under the same first stage. "
             "ST baseline: sentence-transformers' standard recipe (MultipleNegativesRankingLoss for bi-encoders, "
             "CrossEncoderTrainer + BinaryCrossEntropyLoss for cross-encoders) on the run's training groups and budget, "
             f"every weight trained (full fine-tuning) at the recipe's learning rate where the recipe trains every "
             f"weight too, else at sentence-transformers' default {ST_LEARNING_RATE:g}, in the run's training precision; "
             "no validation (its last step is scored). "
             "CPU-seconds: the `ssft-train` child's user + sys time.", ""]
    for stem, r in result["recipes"].items():
        keys = list(r["datasets"])
        lines += [f"### `{r['recipe']}` ({r['describe']})", ""]
        head = ["row"] + [c for k in keys for c in (f"{k} nDCG@10", "p")] + ["mean"]
        lines += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        for row in result["rows"]:
            if all(r["datasets"][k]["rows"][row] is None for k in keys):  # e.g. no ST baseline was asked for
                continue
            cells = [ROW_NAMES[row] + (f" ({r['zero_shot']})" if row == "zero_shot" else "")]
            for k in keys:
                s = r["datasets"][k]["rows"][row]
                cells += [_cell(s), _p(s["pvalue_vs_trained"]) if s is not None and row != "trained" else ""]
            m = r["mean_over_datasets"][row]
            cells.append("—" if m is None else f"{m:.4f}")
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", f"Training: {_seconds(r['training'])} per seed"
                  + (f"; ST baseline: {_seconds(r['st_training'])} per seed" if r["st_training"] else "")
                  + (f"; overrides `{' '.join(r['extra'])}`" if r["extra"] else "") + ".", ""]
    return "\n".join(lines)


def compare_markdown(result: dict[str, Any], cmd: str) -> str:
    seeds = ", ".join(map(str, result["seeds"]))
    lines = ["## Semi-Siamese warm starts: Siamese against semi-Siamese, same budget", "", f"`{cmd}`", "",
             f"nDCG@10 on the test split, mean ± sd over seeds {seeds}; p: two-sided paired t-test of B against A over "
             "the judged queries (each query's nDCG@10 averaged over seeds). The recipe's own dataset from its run "
             "folders, the others by `ssft-eval` under the recipe's first stage and depth.", ""]
    for pair in result["pairs"]:
        keys = list(pair["datasets"])
        head = ["recipe"] + [f"{k} nDCG@10" for k in keys] + ["mean", "training"]
        lines += [f"### A `{pair['a_recipe']}` vs B `{pair['b_recipe']}`", "",
                  "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        for side in ("a", "b"):
            cells = [f"{side.upper()}: {pair[side + '_describe']}"]
            cells += [_cell(pair["datasets"][k][side]) for k in keys]
            cells += [f"{pair['mean_over_datasets'][side]:.4f}", _seconds(pair["training"][side])]
            lines.append("| " + " | ".join(cells) + " |")
        cells = ["p (B vs A)"] + [_p(pair["datasets"][k]["pvalue"]) for k in keys] + ["", ""]
        lines += ["| " + " | ".join(cells) + " |", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the worker
def worker(jobs_file: Path) -> int:
    """The child process: every job of ``jobs_file`` in order (an ST baseline's training before its evaluations)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    failed = 0
    for job in json.loads(jobs_file.read_text()):
        if Path(job["result"]).is_file():
            continue
        try:
            print(f"[worker] {job['kind']}: {job.get('command') or job['run_dir']}", flush=True)
            if job["kind"] == "eval":
                _worker_eval(job)
            else:
                _worker_st_train(job)
        except Exception:  # one job's failure is reported; the others still run
            traceback.print_exc()
            failed += 1
    return 1 if failed else 0


def _worker_eval(job: dict[str, Any]) -> None:
    model: Any = job["model"]
    if job["cross_checkpoint"]:  # a sentence-transformers CrossEncoder folder: ssft-eval would read it as an embedder
        model = MODELS.get("cross").build(ModelConfig(architecture="cross", name=job["model"],
                                                      max_length=job["max_length"]), "full", {})
        model.eval()
        model.requires_grad_(False)
    captured: list[tuple[dict, dict, str]] = []
    original = ev._test

    def keep(model_per_query, bm25_per_query, metric):  # the per-query values ssft-eval tests and does not write
        captured.append((model_per_query, bm25_per_query, metric))
        return original(model_per_query, bm25_per_query, metric)

    ev._test = keep
    try:
        result = ev.evaluate_datasets(model, [job["dataset"]], first_stage=job["first_stage"], depth=job["depth"],
                                      split=job["split"], metrics=EVAL_METRICS, precision=job["precision"],
                                      backend=job["backend"], output_dir=job["out"], overwrite=True,
                                      max_length=job["max_length"], query_max_length=job["query_max_length"])
    finally:
        ev._test = original
    found = {metric: (m, b) for m, b, metric in captured}
    if METRIC not in found or len(result["datasets"]) != 1:
        raise RuntimeError(f"{job['command']}: per-query {METRIC} not captured (ssft.pipeline.evaluate changed?)")
    model_q, bm25_q = ({q: v[METRIC] for q, v in side.items()} for side in found[METRIC])
    row = result["datasets"][0]
    for side, values in (("model", model_q), ("bm25", bm25_q)):  # the captured values are the ones averaged
        if abs(statistics.fmean(values.values()) - row[side][METRIC]) > 1e-9:
            raise RuntimeError(f"{job['command']}: captured per-query {METRIC} of {side} does not average to eval.json's")
    # rounded as a run folder's per_query.*.tsv are (6 decimals), so that one model scored both ways tests as identical
    model_q, bm25_q = ({q: round(v, 6) for q, v in side.items()} for side in (model_q, bm25_q))
    _write_json(Path(job["result"]), {"command": job["command"], "model": row["model"], "bm25": row["bm25"],
                                      "queries": row["queries"], "precision": result["precision"],
                                      "what": result["what"], "per_query": {"model": model_q, "bm25": bm25_q}})


def _trained_in_bf16(run_dir: Path) -> bool:
    """Whether the ssft run trained with bf16 mixed precision (its run_info.json)."""
    info = run_dir / "run_info.json"
    return info.is_file() and json.loads(info.read_text()).get("training_precision") == "bf16"


def _worker_st_train(job: dict[str, Any]) -> None:
    """sentence-transformers' own recipe on the ssft run's training groups and budget; saved to OUT/model."""
    import torch  # noqa: PLC0415  (the ST baseline's libraries: loaded only for it)
    from datasets import Dataset  # noqa: PLC0415

    run_dir, out, seed = Path(job["run_dir"]), Path(job["out"]), int(job["seed"])
    recipe = load_recipe(run_dir / "recipe.yaml")
    source = training_source(recipe, load_inputs(recipe))
    if isinstance(source, QuerySource):
        raise RuntimeError(f"{run_dir}: query-only distillation has no (query, positive) pairs for an ST baseline")
    groups = source.training_set(recipe.seed)
    groups.set_epoch(0)
    items = [groups[i] for i in range(len(groups))]
    t, m = recipe.training, recipe.model
    queries_per_step = int(t.get("per_device_train_batch_size", 8))
    per_item = len(items[0]["documents"]) if job["loss"] == "bce" else 1
    batch = queries_per_step * per_item
    epochs = float(t.get("num_train_epochs", 3))
    max_steps = int(t.get("max_steps", -1) or -1)
    total = max_steps if max_steps > 0 else math.ceil(len(items) / queries_per_step) * math.ceil(epochs)
    asked = t.get("warmup_steps", 0) or 0
    asked = int(asked) if asked >= 1 else int(math.ceil(asked * total))
    if t.get("warmup_ratio"):
        asked = max(asked, int(math.ceil(float(t["warmup_ratio"]) * total)))
    # the recipe's learning rate where it trains every weight as ST does; an adapter's (LoRA: 1e-4 to 1e-3) would wreck
    # a fully fine-tuned model, so there ST's own default (TrainingArguments' 5e-5)
    learning_rate = float(t.get("learning_rate", ST_LEARNING_RATE)) if recipe.adapter.method == "full" else ST_LEARNING_RATE
    common = dict(output_dir=str(out / "trainer"), per_device_train_batch_size=batch, num_train_epochs=epochs,
                  max_steps=max_steps, learning_rate=learning_rate,
                  weight_decay=float(t.get("weight_decay", 0.0)), warmup_steps=min(asked, total // 2),
                  lr_scheduler_type=t.get("lr_scheduler_type", "linear"), seed=seed, data_seed=seed, report_to=[],
                  save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_pin_memory=False,
                  bf16=_trained_in_bf16(run_dir),  # the precision the ssft run trained in, so CPU-seconds compare
                  use_cpu=not torch.cuda.is_available())  # bf16 on a CPU: transformers asks for use_cpu
    torch.manual_seed(seed)
    base = str(resolve_model(m.name))
    cpu, wall = time.process_time(), time.perf_counter()
    if job["loss"] == "bce":  # lazily: sentence-transformers only in this part
        from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer  # noqa: PLC0415
        from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss  # noqa: PLC0415
        from sentence_transformers.cross_encoder.training_args import CrossEncoderTrainingArguments  # noqa: PLC0415

        model = CrossEncoder(base, num_labels=1, max_length=m.max_length, device="cpu" if not torch.cuda.is_available() else None)
        rows = [(it["query"], d, float(i == 0)) for it in items for i, d in enumerate(it["documents"])]
        data = Dataset.from_dict({"query": [r[0] for r in rows], "document": [r[1] for r in rows],
                                  "label": [r[2] for r in rows]})
        trainer = CrossEncoderTrainer(model=model, args=CrossEncoderTrainingArguments(**common), train_dataset=data,
                                      loss=BinaryCrossEntropyLoss(model))
        what = f"CrossEncoderTrainer + BinaryCrossEntropyLoss, {len(rows)} labelled pairs, {batch} pairs per step"
    else:
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer  # noqa: PLC0415
        from sentence_transformers.losses import MultipleNegativesRankingLoss  # noqa: PLC0415
        from sentence_transformers.training_args import SentenceTransformerTrainingArguments  # noqa: PLC0415

        model = SentenceTransformer(base, device="cpu" if not torch.cuda.is_available() else None)
        model.max_seq_length = m.max_length
        columns = {"anchor": [it["query"] for it in items], "positive": [it["documents"][0] for it in items]}
        for k in range(1, len(items[0]["documents"])):
            columns[f"negative_{k}"] = [it["documents"][k] for it in items]
        trainer = SentenceTransformerTrainer(model=model, args=SentenceTransformerTrainingArguments(**common),
                                             train_dataset=Dataset.from_dict(columns),
                                             loss=MultipleNegativesRankingLoss(model))
        what = (f"SentenceTransformerTrainer + MultipleNegativesRankingLoss, {len(items)} (query, positive"
                + (f", {len(columns) - 2} negative(s)" if len(columns) > 2 else "") + f") tuples, {batch} per step")
    trainer.train()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    model.save_pretrained(str(out / "model"))
    _write_json(Path(job["result"]), {"run_dir": str(run_dir), "seed": seed, "what": what, "base": m.name,
                                      "steps": trainer.state.global_step, "epochs": epochs, "batch": batch,
                                      "learning_rate": common["learning_rate"], "warmup_steps": common["warmup_steps"],
                                      "bf16": common["bf16"],
                                      "max_length": m.max_length, "cpu_seconds": round(cpu, 1),
                                      "wall_seconds": round(wall, 1)})


# ---------------------------------------------------------------------------------------------- smoke
SMOKE_RECIPES = {
    "smoke_cross": """seed: 42
model: {architecture: cross, name: MODEL, max_length: 48, head_learning_rate: 1.0e-3}
adapter: {method: lora, r: 4}
loss: listwise_ce
data: {dataset: DATA, negatives: random, num_negatives: 2, max_validation_queries: 4}
eval: {first_stage: bm25, depth: 10, precision: fp32, start: false}
training: {output_dir: runs/smoke, num_train_epochs: 1, per_device_train_batch_size: 8, learning_rate: 1.0e-3,
           warmup_steps: 2, max_steps: 2}
""",
    "smoke_dense": """seed: 42
model: {architecture: dense, name: MODEL, max_length: 48, query_max_length: 16, head_learning_rate: null}
adapter: {method: lora, r: 4}
loss: {name: contrastive}
data: {dataset: DATA, negatives: bm25, num_negatives: 1, max_validation_queries: 4}
eval: {first_stage: bm25, depth: 10, precision: fp32}
training: {output_dir: runs/smoke, num_train_epochs: 1, per_device_train_batch_size: 8, learning_rate: 1.0e-3,
           warmup_steps: 2, max_steps: 2}
""",
}


def smoke_setup(out: Path) -> tuple[list[Path], list[str]]:
    """A tiny random BERT, two tiny synthetic BEIR datasets and two tiny recipes (cross, dense) under ``out``."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers import save_tiny_bert, write_synthetic_beir  # noqa: PLC0415

    model = out / "tiny-bert"
    if not (model / "config.json").is_file():
        save_tiny_bert(model)
    data = [out / "data" / "syn-a", out / "data" / "syn-b"]
    for seed, folder in enumerate(data):
        if not (folder / "corpus.jsonl").is_file():
            write_synthetic_beir(folder, queries=24, docs=30, seed=seed)
    recipes = []
    for name, text in SMOKE_RECIPES.items():
        path = out / "recipes" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("MODEL", str(model)).replace("DATA", str(data[0])))
        recipes.append(path)
    return recipes, [str(d) for d in data]


# ---------------------------------------------------------------------------------------------- main
def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipes", default="", help="comma-separated recipe files (the efficacy table)")
    p.add_argument("--compare", action="append", default=[], metavar="A.yaml,B.yaml",
                   help="a pair of recipes to compare (Siamese vs semi-Siamese); repeat for several pairs")
    p.add_argument("--seeds", default="42,43,44", help="comma-separated training seeds (default 42,43,44)")
    p.add_argument("--datasets", default="nfcorpus,scifact,cranfield", help="comma-separated datasets (BEIR folders or "
                   "names under $SSFT_DATA_HOME)")
    p.add_argument("--out", default=None, help="where runs and results go (default runs/bench/efficacy; "
                   "--smoke: a new temporary folder)")
    p.add_argument("--extra", default="", help="ssft-train overrides for every run, e.g. 'training.max_steps=20'")
    p.add_argument("--st-baseline", action="store_true", help="also train and score sentence-transformers' own recipe")
    p.add_argument("--zero-shot", default="", help="the zero-shot model (default: each recipe's model.name)")
    p.add_argument("--zero-shot-lengths", default="256,64",
                   help="document,query tokens of the zero-shot model (default 256,64: ssft-eval's)")
    p.add_argument("--write", action="store_true", help="write BENCHMARKS.md § efficacy (or semi_siamese_warm_starts)")
    p.add_argument("--section", default=None, help="the BENCHMARKS.md section written (default efficacy, or "
                   "semi_siamese_warm_starts with --compare), e.g. efficacy_colbert for a table of other recipes")
    p.add_argument("--title", default=None, help="the section's title (with --section; default the table's own)")
    add_notes_option(p)
    p.add_argument("--smoke", action="store_true", help="the whole pipeline on a tiny random model and synthetic data "
                   "(1 seed, 2 steps, both modes; never writes BENCHMARKS.md)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return a
    try:
        a.seeds = _ints(a.seeds)
        a.zero_shot_lengths = _ints(a.zero_shot_lengths)
    except ValueError:
        p.error("--seeds / --zero-shot-lengths: comma-separated whole numbers (e.g. 42,43,44)")
    if len(a.zero_shot_lengths) != 2 or min(a.zero_shot_lengths) < 1:
        p.error("--zero-shot-lengths: two positive numbers, document,query (e.g. 256,64)")
    if not a.seeds or len(set(a.seeds)) != len(a.seeds):
        p.error("--seeds: at least one seed, each once")
    a.datasets = [d.strip() for d in a.datasets.split(",") if d.strip()]
    if not a.datasets or len({dataset_key(d) for d in a.datasets}) != len(a.datasets):
        p.error("--datasets: at least one dataset, each named once")
    a.extra = shlex.split(a.extra)
    if any("=" not in x for x in a.extra):
        p.error("--extra: key=value overrides, e.g. 'training.max_steps=20 data.max_train_queries=50'")
    if a.smoke:
        if a.write or a.recipes or a.compare:
            p.error("--smoke: runs its own tiny recipes and never writes BENCHMARKS.md (no --write, --recipes, --compare)")
        return a
    if bool(a.recipes) == bool(a.compare):
        p.error("name the recipes: --recipes A.yaml,B.yaml (efficacy table) or --compare A.yaml,B.yaml (not both)")
    a.recipes = [Path(x.strip()) for x in a.recipes.split(",") if x.strip()]
    pairs = []
    for item in a.compare:
        pair = [Path(x.strip()) for x in item.split(",") if x.strip()]
        if len(pair) != 2:
            p.error(f"--compare {item}: exactly two recipes, A.yaml,B.yaml")
        pairs.append(tuple(pair))
    a.compare = pairs
    for path in a.recipes + [x for pair in pairs for x in pair]:
        if not path.is_file():
            p.error(f"recipe not found: {path}")
    stems = {}
    for path in a.recipes + [x for pair in pairs for x in pair]:
        if stems.setdefault(path.stem, path.resolve()) != path.resolve():
            p.error(f"two recipes named {path.stem} ({stems[path.stem]}, {path}): their runs would share a folder")
    return a


def load_recipes(paths: list[Path], out: Path, extra: list[str]) -> dict[Path, Recipe]:
    found: dict[Path, Recipe] = {}
    for path in paths:
        if path not in found:
            try:
                found[path] = Recipe(path, out, extra)
            except SsftError as err:
                raise SystemExit(f"efficacy.py: error: {err}") from None
    for rec in found.values():
        if not rec.full and rec.first_stage != "bm25":
            raise SystemExit(f"efficacy.py: error: {rec.path}: eval.first_stage {rec.first_stage}: ssft-eval scores "
                             "other datasets under bm25 or full retrieval only")
    return found


def run_efficacy(a, out: Path) -> dict[str, Any]:
    recs = load_recipes(a.recipes, out, a.extra)
    plan = Plan(a, list(recs.values()))
    plan.train_all(start_runs=True)
    plan.plan_efficacy()
    plan.run_worker()
    result = efficacy_results(plan)
    _write_json(out / "efficacy.json", result)
    return result


def run_compare(a, out: Path) -> dict[str, Any]:
    recs = load_recipes([x for pair in a.compare for x in pair], out, a.extra)
    plan = Plan(a, list(recs.values()))
    plan.train_all(start_runs=False)
    plan.plan_trained()
    plan.run_worker()
    result = compare_results(plan, [(recs[x], recs[y]) for x, y in a.compare])
    _write_json(out / "compare.json", result)
    return result


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.worker:
        return worker(Path(a.worker))
    cmd = command()
    if a.smoke:
        out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="ssft-efficacy-smoke-"))
        out.mkdir(parents=True, exist_ok=True)
        recipes, datasets = smoke_setup(out)
        a.datasets, a.seeds, a.st_baseline, a.recipes = datasets, a.seeds[:1], True, recipes
        a.zero_shot_lengths = [48, 16]  # the tiny model's 128 positions
        a.out = str(out / "runs")
        result = run_efficacy(a, Path(a.out))
        print(efficacy_markdown(result, cmd))
        a.compare = [tuple(recipes)]
        compare = run_compare(a, Path(a.out))
        print(compare_markdown(compare, cmd))
        print(f"smoke results: {Path(a.out) / 'efficacy.json'}, {Path(a.out) / 'compare.json'}")
        return 0
    out = Path(a.out or ROOT / "runs" / "bench" / "efficacy")
    out.mkdir(parents=True, exist_ok=True)
    a.out = str(out)
    try:
        if a.compare:
            result = run_compare(a, out)
            text, section = compare_markdown(result, cmd), "semi_siamese_warm_starts"
        else:
            result = run_efficacy(a, out)
            text, section = efficacy_markdown(result, cmd), "efficacy"
    except RuntimeError as err:
        print(f"efficacy.py: error: {err}", file=sys.stderr)
        return 1
    section = a.section or section
    if a.title:
        text = f"## {a.title}\n" + text.split("\n", 1)[1]
    text = with_notes(text, a.notes).rstrip()
    (out / f"{section}.md").write_text(text + "\n")
    print(text)
    if a.write:
        write_section(section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
