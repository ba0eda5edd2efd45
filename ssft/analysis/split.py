"""Metrics per ambiguity class from a run's per-query file, and 001 Fig. 3's ratio (ambiguous / non-ambiguous).

A finished run folder holds ``recipe.yaml`` and ``per_query.<split>.tsv`` (``query_id  metric  value``, one row
per judged query and metric; queries the run found nothing for score 0). ``split_run`` averages a metric over the
run's ambiguous and its non-ambiguous queries (labels from ``ssft.analysis.ambiguity``; queries labelled
``excluded`` or without a label are left out) and divides: a ratio below 1 means the method serves ambiguous
queries worse than the others. ``ratio_table`` averages each class over the runs (seeds) of one method before
dividing, and groups methods by encoder kind (cross- vs bi-encoders), the two panels of Fig. 3.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ssft.analysis.ambiguity import AMBIGUOUS, NON_AMBIGUOUS
from ssft.errors import SsftError

BI_ENCODERS = ("twin", "colbert", "bi", "dense")


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

    @property
    def ratio(self) -> float:
        """ambiguous / non-ambiguous mean; NaN when the non-ambiguous mean is 0."""
        return self.ambiguous / self.non_ambiguous if self.non_ambiguous else math.nan


def class_split(per_query: Mapping[str, Mapping[str, float]], labels: Mapping[str, str], metric: str = "P@20",
                where: str = "per-query metrics") -> ClassSplit:
    """Mean of ``metric`` over the labelled queries of each class that ``per_query`` holds."""
    values: dict[str, list[float]] = {AMBIGUOUS: [], NON_AMBIGUOUS: []}
    for qid, label in labels.items():
        if label in values and qid in per_query:
            if metric not in per_query[qid]:
                have = ", ".join(sorted(per_query[qid]))
                raise SsftError(f"{where}: no {metric} for query {qid} (has {have})")
            values[label].append(float(per_query[qid][metric]))
    for label, vals in values.items():
        if not vals:
            raise SsftError(f"{where}: no {label} query among its {len(per_query)} queries (labels cover "
                            f"{sum(1 for q in labels if q in per_query)} of them)")
    amb, non = values[AMBIGUOUS], values[NON_AMBIGUOUS]
    return ClassSplit(metric, sum(amb) / len(amb), sum(non) / len(non), len(amb), len(non))


@dataclass
class RunSplit:
    run: Path
    architecture: str  # the recipe's model.architecture
    method: str  # ssft.eval.tables.run_method_name of its adapter section
    split: ClassSplit

    @property
    def encoder(self) -> str:
        return "bi-encoder" if self.architecture in BI_ENCODERS else "cross-encoder"


def split_run(run_dir: str | Path, labels: Mapping[str, str], metric: str = "P@20", split: str | None = None) -> RunSplit:
    """``class_split`` of a finished run folder's per-query file (``split`` defaults to the recipe's test split)."""
    import yaml

    from ssft.eval.tables import run_method_name

    run = Path(run_dir)
    recipe_path = run / "recipe.yaml"
    if not recipe_path.is_file():
        raise SsftError(f"{run}: not a run folder (recipe.yaml missing)")
    recipe = yaml.safe_load(recipe_path.read_text(encoding="utf-8")) or {}
    split = split or (recipe.get("data") or {}).get("test_split", "test")
    per_query = read_per_query(run / f"per_query.{split}.tsv")
    architecture = (recipe.get("model") or {}).get("architecture", "cross")
    return RunSplit(run, architecture, run_method_name(recipe.get("adapter") or {}),
                    class_split(per_query, labels, metric, str(run / f"per_query.{split}.tsv")))


def split_runs(run_dirs: Iterable[str | Path], labels: Mapping[str, str], metric: str = "P@20",
               split: str | None = None) -> list[RunSplit]:
    return [split_run(r, labels, metric, split) for r in run_dirs]


def ratio_table(rows: Iterable[RunSplit], labels: Mapping[str, str] | None = None) -> dict[str, dict[str, ClassSplit]]:
    """{encoder kind: {method: ClassSplit}}, each class mean averaged over the runs (seeds) of that method;
    ``labels`` renames methods (e.g. {"full": "Full FT"})."""
    grouped: dict[tuple[str, str], list[RunSplit]] = {}
    for row in rows:
        name = (labels or {}).get(row.method, row.method)
        grouped.setdefault((row.encoder, name), []).append(row)
    table: dict[str, dict[str, ClassSplit]] = {}
    for (encoder, method), runs in grouped.items():
        metrics = {r.split.metric for r in runs}
        if len(metrics) != 1:
            raise SsftError(f"{method}: runs split on different metrics ({', '.join(sorted(metrics))})")
        n = len(runs)
        table.setdefault(encoder, {})[method] = ClassSplit(
            metrics.pop(), sum(r.split.ambiguous for r in runs) / n, sum(r.split.non_ambiguous for r in runs) / n,
            runs[0].split.n_ambiguous, runs[0].split.n_non_ambiguous)
    return table


def format_ratio_table(table: Mapping[str, Mapping[str, ClassSplit]]) -> str:
    """Markdown: encoder | method | metric on ambiguous (n) | on non-ambiguous (n) | ratio."""
    lines = ["| encoder | method | ambiguous | non-ambiguous | ratio |", "|---|---|---:|---:|---:|"]
    for encoder, methods in table.items():
        for method, s in methods.items():
            lines.append(f"| {encoder} | {method} | {s.ambiguous:.4f} ({s.n_ambiguous}) | {s.non_ambiguous:.4f} "
                         f"({s.n_non_ambiguous}) | {s.ratio:.3f} |")
    metric = next((s.metric for m in table.values() for s in m.values()), "")
    lines += ["", f"{metric} averaged over each class's queries (count in brackets); ratio = ambiguous / non-ambiguous."]
    return "\n".join(lines) + "\n"


__all__ = ["ClassSplit", "RunSplit", "class_split", "format_ratio_table", "ratio_table", "read_per_query", "split_run",
           "split_runs"]
