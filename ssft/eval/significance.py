"""Significance tests of 001 (§4.1.3): an LFT method against full fine-tuning.

- ``seed_ttest``: 001's own test, "one-tailed t-test under the assumption of homoscedasticity", comparing the
  per-seed scores of a method (3 seeds in 001) with the per-seed scores of full fine-tuning (Student's t,
  pooled variance, H1: method > baseline).
- ``paired_ttest``: a paired t-test over queries (per-query values of two runs on the same test queries, read
  from the ``per_query.<split>.tsv`` files a run writes). Not in 001; offered because 3 seeds give little power.

Queries present on one side only are an error by default (``missing="error"``): both files come from runs on
the same test split, so a mismatch means the wrong files were paired. ``missing="intersect"`` tests the
common queries only, and the result says how many were dropped.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

from ssft.core.errors import SsftError

ALTERNATIVES = ("greater", "less", "two-sided")


@dataclass(frozen=True)
class TestResult:
    """t statistic, p-value, degrees of freedom, number of observations per side, queries dropped (paired only)."""

    statistic: float
    pvalue: float
    df: float
    n: tuple[int, int]
    dropped: int = 0

    @property
    def mark(self) -> str:
        return significance_mark(self.pvalue)


def significance_mark(pvalue: float | None) -> str:
    """001's table marks: ``**`` for p <= 0.01, ``*`` for p <= 0.05, else '' (also for a NaN or missing p)."""
    if pvalue is None or math.isnan(pvalue):
        return ""
    if pvalue <= 0.01:
        return "**"
    if pvalue <= 0.05:
        return "*"
    return ""


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise SsftError(f"alternative: expected one of {', '.join(ALTERNATIVES)}, got '{alternative}'")


def seed_ttest(method: Sequence[float], baseline: Sequence[float], alternative: str = "greater") -> TestResult:
    """001 §4.1.3: Student's two-sample t-test with equal variances over seeds, one-tailed (method > baseline).

    Each side needs >= 2 values. Identical constant samples give a NaN p-value (no variance to test with)."""
    _check_alternative(alternative)
    if len(method) < 2 or len(baseline) < 2:
        raise SsftError(f"seed t-test: needs >= 2 seeds per side, got {len(method)} and {len(baseline)}")
    res = stats.ttest_ind(list(method), list(baseline), equal_var=True, alternative=alternative)
    return TestResult(float(res.statistic), float(res.pvalue), float(len(method) + len(baseline) - 2),
                      (len(method), len(baseline)))


def paired_ttest(method: Mapping[str, float], baseline: Mapping[str, float], alternative: str = "greater",
                 missing: str = "error") -> TestResult:
    """Paired t-test over queries: ``method[q]`` against ``baseline[q]`` (scipy.stats.ttest_rel).

    ``missing``: "error" (default) raises SsftError naming the unmatched queries; "intersect" tests the shared ones."""
    _check_alternative(alternative)
    if missing not in ("error", "intersect"):
        raise SsftError(f"missing: expected 'error' or 'intersect', got '{missing}'")
    only_method = sorted(set(method) - set(baseline))
    only_baseline = sorted(set(baseline) - set(method))
    if (only_method or only_baseline) and missing == "error":
        raise SsftError(f"paired t-test: the two sides cover different queries ({len(only_method)} only in the method, "
                        f"e.g. {only_method[:3]}; {len(only_baseline)} only in the baseline, e.g. {only_baseline[:3]}); "
                        f"pass missing='intersect' to test the shared queries")
    shared = sorted(set(method) & set(baseline))
    if len(shared) < 2:
        raise SsftError(f"paired t-test: needs >= 2 shared queries, got {len(shared)}")
    res = stats.ttest_rel([method[q] for q in shared], [baseline[q] for q in shared], alternative=alternative)
    return TestResult(float(res.statistic), float(res.pvalue), float(len(shared) - 1), (len(shared), len(shared)),
                      dropped=len(only_method) + len(only_baseline))


def read_per_query(path: str | Path, metric: str) -> dict[str, float]:
    """``query_id -> value`` of one metric from a ``per_query.<split>.tsv`` file (``query_id  metric  value``)."""
    path = Path(path)
    if not path.is_file():
        raise SsftError(f"per-query file not found: {path}")
    values: dict[str, float] = {}
    metrics_seen: set[str] = set()
    with open(path, newline="", encoding="utf-8") as fh:
        for lineno, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if lineno == 1 and row[:3] == ["query_id", "metric", "value"]:
                continue
            if not row:
                continue
            if len(row) != 3:
                raise SsftError(f"{path}:{lineno}: expected 3 tab-separated columns (query_id, metric, value), got {len(row)}")
            qid, name, text = row
            metrics_seen.add(name)
            if name != metric:
                continue
            if qid in values:
                raise SsftError(f"{path}:{lineno}: query '{qid}' listed twice for {metric}")
            try:
                values[qid] = float(text)
            except ValueError:
                raise SsftError(f"{path}:{lineno}: value '{text}' is not a number") from None
    if not values:
        raise SsftError(f"{path}: no values for metric '{metric}' (metrics in the file: "
                        f"{', '.join(sorted(metrics_seen)) or 'none'})")
    return values


def paired_ttest_files(method_file: str | Path, baseline_file: str | Path, metric: str, alternative: str = "greater",
                       missing: str = "error") -> TestResult:
    """``paired_ttest`` on two per-query TSV files, one metric."""
    return paired_ttest(read_per_query(method_file, metric), read_per_query(baseline_file, metric), alternative, missing)


__all__ = ["TestResult", "paired_ttest", "paired_ttest_files", "read_per_query", "seed_ttest", "significance_mark"]
