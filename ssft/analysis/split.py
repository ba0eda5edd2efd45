"""Metrics per ambiguity class from a run's per-query file, and 001 Fig. 3's ratio (ambiguous / non-ambiguous).

A finished run folder holds ``recipe.yaml`` and ``per_query.<split>.tsv`` (``query_id  metric  value``, one row
per judged query and metric; queries the run found nothing for score 0). ``split_run`` averages a metric over the
run's ambiguous and its non-ambiguous queries (labels from ``ssft.analysis.ambiguity``; queries labelled
``excluded`` or without a label are left out) and divides: a ratio below 1 means the method serves ambiguous
queries worse than the others. ``ratio_table`` averages each class over the runs (seeds) of one method before
dividing, and groups methods by encoder kind (cross- vs bi-encoders), the two panels of Fig. 3 — or by architecture
(monoBERT, TwinBERT, ColBERT apart). ``split_run(..., first_stage="bm25")`` splits the first-stage ranking a run
reranked (``per_query.bm25.<split>.tsv``), the reference every method starts from. ``bootstrap_ratio_interval``
puts a percentile interval on a ratio by resampling the queries of each class (the classes are small: NFCorpus
test_short has 41 ambiguous and 62 non-ambiguous one-word queries under 001's rule).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ssft.analysis.ambiguity import AMBIGUOUS, NON_AMBIGUOUS
from ssft.core.errors import SsftError
from ssft.core.output_names import per_query_file
from ssft.eval.tables import run_method_name

BI_ENCODERS = ("twin", "colbert", "bi", "dense")
# panel titles when grouping by architecture (001 Fig. 3 names the models)
ARCHITECTURE_TITLES = {"cross": "cross-encoder (monoBERT)", "twin": "bi-encoder (TwinBERT)",
                       "colbert": "bi-encoder (ColBERT)", "dense": "bi-encoder (dense)", "bi": "bi-encoder"}
GROUPINGS = ("encoder", "architecture")


def read_per_query(path: str | Path) -> dict[str, dict[str, float]]:
    """query id → {metric: value} from a ``per_query.<split>.tsv`` file."""
    path = Path(path)
    if not path.is_file():
        raise SsftError(f"{path}: no such per-query file")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t") != ["query_id", "metric", "value"]:
        raise SsftError(f"{path}:1: expected the header 'query_id<TAB>metric<TAB>value'")
    out: dict[str, dict[str, float]] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != 3:
            raise SsftError(f"{path}:{number}: expected 3 tab-separated cells, got {len(cells)}")
        try:
            value = float(cells[2])
        except ValueError:
            raise SsftError(f"{path}:{number}: value '{cells[2]}' is not a number") from None
        out.setdefault(cells[0], {})[cells[1]] = value
    return out


@dataclass
class ClassSplit:
    """One metric averaged over the ambiguous and the non-ambiguous queries of one run (or of several, pooled)."""

    metric: str
    ambiguous: float
    non_ambiguous: float
    n_ambiguous: int
    n_non_ambiguous: int
    # {class: {query id: value}} behind the means (for intervals); pooled runs hold each query's mean over the runs
    values: dict[str, dict[str, float]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ratio(self) -> float:
        """ambiguous / non-ambiguous mean; NaN when the non-ambiguous mean is 0."""
        return self.ambiguous / self.non_ambiguous if self.non_ambiguous else math.nan


def class_split(per_query: Mapping[str, Mapping[str, float]], labels: Mapping[str, str], metric: str = "P@20",
                where: str = "per-query metrics") -> ClassSplit:
    """Mean of ``metric`` over the labelled queries of each class that ``per_query`` holds."""
    values: dict[str, dict[str, float]] = {AMBIGUOUS: {}, NON_AMBIGUOUS: {}}
    for qid, label in labels.items():
        if label in values and qid in per_query:
            if metric not in per_query[qid]:
                have = ", ".join(sorted(per_query[qid]))
                raise SsftError(f"{where}: no {metric} for query {qid} (has {have})")
            values[label][qid] = float(per_query[qid][metric])
    for label, vals in values.items():
        if not vals:
            raise SsftError(f"{where}: no {label} query among its {len(per_query)} queries (labels cover "
                            f"{sum(1 for q in labels if q in per_query)} of them)")
    amb, non = values[AMBIGUOUS], values[NON_AMBIGUOUS]
    return ClassSplit(metric, sum(amb.values()) / len(amb), sum(non.values()) / len(non), len(amb), len(non), values)


@dataclass
class RunSplit:
    run: Path
    architecture: str  # the recipe's model.architecture
    method: str  # ssft.eval.tables.run_method_name of its adapter section
    split: ClassSplit

    @property
    def encoder(self) -> str:
        return "bi-encoder" if self.architecture in BI_ENCODERS else "cross-encoder"

    def panel(self, by: str = "encoder") -> str:
        """The figure panel this run belongs to: its encoder kind, or its architecture's title."""
        if by == "encoder":
            return self.encoder
        if by == "architecture":
            return ARCHITECTURE_TITLES.get(self.architecture, self.architecture)
        raise SsftError(f"group runs by one of {', '.join(GROUPINGS)}, not '{by}'")


def split_run(run_dir: str | Path, labels: Mapping[str, str], metric: str = "P@20", split: str | None = None,
              first_stage: str | None = None) -> RunSplit:
    """``class_split`` of a finished run folder's per-query file (``split`` defaults to the recipe's test split).
    ``first_stage`` (e.g. "bm25"): split the first-stage ranking the run reranked instead
    (``per_query.<first_stage>.<split>.tsv``); the row's method is then ``first_stage``."""


    run = Path(run_dir)
    recipe_path = run / "recipe.yaml"
    if not recipe_path.is_file():
        raise SsftError(f"{run}: not a run folder (recipe.yaml missing)")
    recipe = yaml.safe_load(recipe_path.read_text(encoding="utf-8")) or {}
    split = split or (recipe.get("data") or {}).get("test_split", "test")
    name = per_query_file(first_stage or split, split)
    per_query = read_per_query(run / name)
    architecture = (recipe.get("model") or {}).get("architecture", "cross")
    method = first_stage or run_method_name(recipe.get("adapter") or {})
    return RunSplit(run, architecture, method, class_split(per_query, labels, metric, str(run / name)))


def split_runs(run_dirs: Iterable[str | Path], labels: Mapping[str, str], metric: str = "P@20",
               split: str | None = None) -> list[RunSplit]:
    return [split_run(r, labels, metric, split) for r in run_dirs]


def _pool(values: list[dict[str, float]]) -> dict[str, float]:
    """Each query's mean over the runs that hold it."""
    sums: dict[str, list[float]] = {}
    for run_values in values:
        for qid, v in run_values.items():
            sums.setdefault(qid, []).append(v)
    return {qid: sum(vs) / len(vs) for qid, vs in sums.items()}


def ratio_table(rows: Iterable[RunSplit], labels: Mapping[str, str] | None = None,
                by: str = "encoder") -> dict[str, dict[str, ClassSplit]]:
    """{panel: {method: ClassSplit}}, each class mean averaged over the runs (seeds) of that method; panels are
    encoder kinds (``by="encoder"``, Fig. 3's cross vs bi) or architectures (``by="architecture"``: TwinBERT and
    ColBERT apart rather than pooled as if they were seeds); ``labels`` renames methods (e.g. {"full": "Full FT"})."""
    grouped: dict[tuple[str, str], list[RunSplit]] = {}
    for row in rows:
        name = (labels or {}).get(row.method, row.method)
        grouped.setdefault((row.panel(by), name), []).append(row)
    table: dict[str, dict[str, ClassSplit]] = {}
    for (panel, method), runs in grouped.items():
        metrics = {r.split.metric for r in runs}
        if len(metrics) != 1:
            raise SsftError(f"{method}: runs split on different metrics ({', '.join(sorted(metrics))})")
        n = len(runs)
        pooled = {c: _pool([r.split.values.get(c, {}) for r in runs]) for c in (AMBIGUOUS, NON_AMBIGUOUS)}
        table.setdefault(panel, {})[method] = ClassSplit(
            metrics.pop(), sum(r.split.ambiguous for r in runs) / n, sum(r.split.non_ambiguous for r in runs) / n,
            runs[0].split.n_ambiguous, runs[0].split.n_non_ambiguous, pooled)
    return table


def bootstrap_ratio_interval(split: ClassSplit, resamples: int = 2000, level: float = 0.95,
                             seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``split.ratio``: the queries of each class resampled with replacement
    (independently per class), the ratio of the resampled means taken each time; resamples with a zero
    non-ambiguous mean are dropped. Needs the per-query values (``ClassSplit.values``)."""

    amb = np.array(list(split.values.get(AMBIGUOUS, {}).values()), dtype=np.float64)
    non = np.array(list(split.values.get(NON_AMBIGUOUS, {}).values()), dtype=np.float64)
    if not len(amb) or not len(non):
        raise SsftError("bootstrap interval: the split holds no per-query values (made without class_split?)")
    if not 0 < level < 1 or resamples < 1:
        raise SsftError(f"bootstrap interval: level must lie in (0, 1) and resamples >= 1 (got {level}, {resamples})")
    rng = np.random.default_rng(seed)
    a = amb[rng.integers(0, len(amb), (resamples, len(amb)))].mean(1)
    b = non[rng.integers(0, len(non), (resamples, len(non)))].mean(1)
    keep = b > 0
    if not keep.any():
        return math.nan, math.nan
    ratios = a[keep] / b[keep]
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def format_ratio_table(table: Mapping[str, Mapping[str, ClassSplit]],
                       intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
                       runs: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """Markdown: encoder | method | metric on ambiguous (n) | on non-ambiguous (n) | ratio [| 95% interval]
    [| runs]; ``intervals`` and ``runs`` (counts of runs pooled) are {panel: {method: ...}}."""
    head = "| encoder | method | ambiguous | non-ambiguous | ratio |"
    rule = "|---|---|---:|---:|---:|"
    if intervals is not None:
        head, rule = head + " 95% interval |", rule + "---|"
    if runs is not None:
        head, rule = head + " runs |", rule + "---:|"
    lines = [head, rule]
    for encoder, methods in table.items():
        for method, s in methods.items():
            line = (f"| {encoder} | {method} | {s.ambiguous:.4f} ({s.n_ambiguous}) | {s.non_ambiguous:.4f} "
                    f"({s.n_non_ambiguous}) | {s.ratio:.3f} |")
            if intervals is not None:
                low, high = intervals.get(encoder, {}).get(method, (math.nan, math.nan))
                line += f" {low:.2f}–{high:.2f} |"
            if runs is not None:
                line += f" {runs.get(encoder, {}).get(method, 0)} |"
            lines.append(line)
    metric = next((s.metric for m in table.values() for s in m.values()), "")
    lines += ["", f"{metric} averaged over each class's queries (count in brackets); ratio = ambiguous / non-ambiguous."]
    return "\n".join(lines) + "\n"


__all__ = ["ARCHITECTURE_TITLES", "ClassSplit", "RunSplit", "bootstrap_ratio_interval", "class_split", "format_ratio_table",
           "ratio_table", "read_per_query", "split_run", "split_runs"]
