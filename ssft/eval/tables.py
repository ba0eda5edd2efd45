"""Result tables in the layout of 001's Tables 3–5, as Markdown and CSV.

Rows are fine-tuning methods, columns the number of trainable parameters and one column per metric holding the
mean over seeds. A method's mean is marked ``*`` (p <= 0.05) or ``**`` (p <= 0.01) when it beats the baseline
(full fine-tuning) in 001's one-tailed, equal-variance t-test over seeds (§4.1.3; ``ssft.eval.significance``).
Folds (001 §4.1.1: five folds, three seeds): "the results in the tables are calculated by averaging the test scores
of all folds of the three experiments" and the test compares "the three performance values of each LFT method with
the three performance values" of full fine-tuning — so ``collect_runs`` gives one value per seed, the mean over that
seed's folds (runs carry their fold as ``data.fold``, set by ``ssft-sweep`` with ``folds``), never one per run.
The last row, "Improvement (%)", is the best non-baseline mean of each column over the baseline mean,
``100 * (best - base) / base``, or "-" when no method beats the baseline (as 001 prints it).
"""
from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ssft.core.errors import SsftError
from ssft.eval.significance import seed_ttest, significance_mark

IMPROVEMENT_ROW = "Improvement (%)"


@dataclass
class MethodScores:
    """One table row: a method's per-seed test scores (metric -> one value per seed) and its trainable parameters."""

    method: str
    scores: dict[str, list[float]]
    trainable_parameters: int | None = None
    folds: list[str] | None = None  # the folds each seed's value averages (a K-fold sweep), else None


@dataclass
class Cell:
    mean: float
    pvalue: float | None = None  # None: the baseline itself, or fewer than 2 seeds on a side

    @property
    def mark(self) -> str:
        return significance_mark(self.pvalue)


@dataclass
class ResultTable:
    metrics: list[str]
    baseline: str
    rows: list[tuple[MethodScores, dict[str, Cell]]] = field(default_factory=list)
    improvement: dict[str, float | None] = field(default_factory=dict)  # None: no method beats the baseline


def format_parameters(n: int | None) -> str:
    """001's style: 110M, 0.6M, 0.1M, 8K (values of 100K and more in millions, one decimal below 100M)."""
    if n is None:
        return "-"
    if n >= 100_000_000:
        return f"{n / 1e6:.0f}M"
    if n >= 100_000:
        return f"{n / 1e6:.1f}M"
    if n >= 1_000:
        return f"{n / 1e3:.0f}K"
    return str(n)


def build_table(rows: Sequence[MethodScores], metrics: Sequence[str], baseline: str = "Full FT") -> ResultTable:
    """Means, one-tailed seed t-tests against ``baseline`` (one of the rows), and the improvement row."""
    by_name = {r.method: r for r in rows}
    if len(by_name) != len(rows):
        raise SsftError("table: two rows have the same method name")
    if baseline not in by_name:
        raise SsftError(f"table: baseline '{baseline}' is not among the methods ({', '.join(by_name)})")
    base = by_name[baseline]
    table = ResultTable(list(metrics), baseline)
    for row in rows:
        cells = {}
        for metric in metrics:
            values = row.scores.get(metric)
            if not values:
                raise SsftError(f"table: method '{row.method}' has no values for {metric}")
            pvalue = None
            if row is not base and len(values) >= 2 and len(base.scores[metric]) >= 2:
                pvalue = seed_ttest(values, base.scores[metric]).pvalue
                pvalue = None if math.isnan(pvalue) else pvalue
            cells[metric] = Cell(statistics.fmean(values), pvalue)
        table.rows.append((row, cells))
    base_cells = table.rows[[r.method for r, _ in table.rows].index(baseline)][1]
    for metric in metrics:
        others = [cells[metric].mean for r, cells in table.rows if r.method != baseline]
        base_mean = base_cells[metric].mean
        best = max(others) if others else None
        if best is None or base_mean <= 0 or best <= base_mean:
            table.improvement[metric] = None
        else:
            table.improvement[metric] = 100.0 * (best - base_mean) / base_mean
    return table


def render_markdown(table: ResultTable, digits: int = 4) -> str:
    """A Markdown table: method | # trainable parameters | one column per metric; then the improvement row."""
    lines = ["| Fine-tuning method | # of trainable parameters | " + " | ".join(table.metrics) + " |",
             "|---|---:|" + "---:|" * len(table.metrics)]
    for row, cells in table.rows:
        values = [f"{cells[m].mean:.{digits}f}{cells[m].mark}" for m in table.metrics]
        lines.append(f"| {row.method} | {format_parameters(row.trainable_parameters)} | " + " | ".join(values) + " |")
    improvement = ["-" if table.improvement[m] is None else f"{table.improvement[m]:.2f}%" for m in table.metrics]
    lines.append(f"| {IMPROVEMENT_ROW} | - | " + " | ".join(improvement) + " |")
    folds = next((r.folds for r, _ in table.rows if r.folds), None)
    per_seed = f"per seed the mean over {len(folds)} folds, " if folds else ""
    lines += ["", "\\* p <= 0.05, \\*\\* p <= 0.01 (one-tailed t-test over seeds, equal variances, against "
                  f"{table.baseline}); {per_seed}means over seeds."]
    if any("prefix" in row.method.lower() for row, _ in table.rows):
        lines.append("Trainable parameters count every parameter that trains, a prefix's reparameterisation MLP "
                     "included; 001's tables count the prefix without its MLPs (0.1M for BERT-base, against ~4.7M with "
                     "them).")
    return "\n".join(lines) + "\n"


def render_csv(table: ResultTable, digits: int = 4) -> str:
    """CSV: method, trainable_parameters, then per metric its mean, p-value (blank for the baseline) and mark."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    header = ["method", "trainable_parameters"]
    for m in table.metrics:
        header += [m, f"{m}_pvalue", f"{m}_mark"]
    writer.writerow(header)
    for row, cells in table.rows:
        out = [row.method, "" if row.trainable_parameters is None else row.trainable_parameters]
        for m in table.metrics:
            c = cells[m]
            out += [f"{c.mean:.{digits}f}", "" if c.pvalue is None else f"{c.pvalue:.4g}", c.mark]
        writer.writerow(out)
    out = [IMPROVEMENT_ROW, ""]
    for m in table.metrics:
        out += ["" if table.improvement[m] is None else f"{table.improvement[m]:.2f}", "", ""]
    writer.writerow(out)
    return buf.getvalue()


def run_method_name(adapter: dict) -> str:
    """A row name from a saved recipe's adapter section: the method, or for a hybrid ``first -> second``
    (001's "Prefix-tuning → LoRA"), with `` (concurrent)`` for the concurrent mode."""
    method = adapter.get("method", "full")
    if method != "hybrid":
        return method
    parts = []
    for key in ("first", "second"):
        value = adapter.get(key)
        parts.append(value.get("method", "?") if isinstance(value, dict) else str(value))
    return " -> ".join(parts) + (" (concurrent)" if adapter.get("mode") == "concurrent" else "")


def collect_runs(run_dirs: Iterable[str | Path], split: str, labels: dict[str, str] | None = None) -> list[MethodScores]:
    """Rows from finished run folders (``metrics.json``, ``run_info.json``, ``recipe.yaml``), grouped by
    ``run_method_name`` (renamed through ``labels``, e.g. {"full": "Full FT"}); one value per seed.

    Runs without a fold (``data.fold`` null) are one value each. Runs of a K-fold sweep (``data.fold`` set) are
    averaged per seed over their folds first (001 §4.1.3: three values per side, not folds × seeds): every seed of
    every method must cover the same folds, once each, or the table would compare unlike things (one SsftError)."""
    labels = labels or {}
    grouped: dict[str, MethodScores] = {}
    by_fold: dict[str, dict[Any, dict[str, dict[str, float]]]] = {}  # method -> seed -> fold -> metrics
    folded: dict[str, bool] = {}
    for run in run_dirs:
        run = Path(run)
        try:
            metrics = json.loads((run / "metrics.json").read_text())
            info = json.loads((run / "run_info.json").read_text())
            recipe = yaml.safe_load((run / "recipe.yaml").read_text())
        except FileNotFoundError as err:
            raise SsftError(f"{run}: not a finished run ({Path(err.filename).name} missing)") from None
        if split not in metrics:
            raise SsftError(f"{run}/metrics.json: no results for split '{split}' (has {', '.join(metrics)})")
        method = run_method_name(recipe.get("adapter", {}))
        name = labels.get(method, method)
        fold = (recipe.get("data") or {}).get("fold")
        if folded.setdefault(name, fold is not None) != (fold is not None):
            raise SsftError(f"{run}: method '{name}' mixes runs with and without data.fold")
        row = grouped.setdefault(name, MethodScores(name, {}, info.get("trainable_parameters")))
        if fold is None:
            for metric, value in metrics[split].items():
                row.scores.setdefault(metric, []).append(float(value))
            continue
        seeds = by_fold.setdefault(name, {})
        folds = seeds.setdefault(recipe.get("seed"), {})
        if str(fold) in folds:
            raise SsftError(f"{run}: method '{name}', seed {recipe.get('seed')}: fold {fold} appears twice")
        folds[str(fold)] = {m: float(v) for m, v in metrics[split].items()}
    expected = None
    for name, seeds in by_fold.items():
        row = grouped[name]
        for seed, folds in sorted(seeds.items(), key=lambda kv: str(kv[0])):
            fold_names = sorted(folds)
            if expected is None:
                expected = fold_names
            if fold_names != expected:
                raise SsftError(f"method '{name}', seed {seed}: folds {', '.join(fold_names)}; other runs have "
                                f"{', '.join(expected)} (every seed of every method needs the same folds)")
            for metric in folds[fold_names[0]]:
                row.scores.setdefault(metric, []).append(statistics.fmean(folds[f][metric] for f in fold_names))
        row.folds = expected
    return list(grouped.values())


__all__ = ["Cell", "MethodScores", "ResultTable", "build_table", "collect_runs", "format_parameters", "run_method_name",
           "render_csv", "render_markdown"]
