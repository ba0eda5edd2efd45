"""The papers' figures as PNG files (matplotlib, no display needed: ``Figure`` objects, never pyplot state).

- ``plot_ambiguity_ratios``: 001 Fig. 3, P@20 of ambiguous / non-ambiguous queries per fine-tuning method, one panel
  per encoder kind (cross- vs bi-encoders); input from ``ssft.analysis.split.ratio_table``.
- ``plot_validation_curves``: 001 Fig. 4, the validation metric per epoch of prefix tuning, LoRA, the concurrent
  hybrid and the sequential hybrid; input from ``validation_curve`` of each run folder.
- ``plot_run_curves``: a run's ``curves.png``: training loss and every validation measure against epoch, the start as
  epoch 0, the selected epoch marked; input from ``run_curves`` of the run's run_info.
- ``plot_sweep_table``: a sweep's results rows as grouped bars (``results.png`` of ssft-sweep).
- ``plot_collapse_history``: what the collapse monitor and DAFT recorded during training (000 §3.2, §4): total
  variance and effective rank of each tower, the loss against the collapse value log(1 + |D⁻|), DAFT's KL history;
  input from ``collapse_record`` of a run folder (``collapse.json``, ``daft.json``) or the callbacks' own lists.
- ``plot_latency_tradeoff``: 000 Fig. 6, retrieval quality against query encoding latency, one panel per batch size.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ssft.core.errors import SsftError
from ssft.eval.tables import run_method_name


def _save(fig, path: str | Path) -> Path:

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def plot_ambiguity_ratios(ratios: Mapping[str, Mapping[str, float]], path: str | Path, metric: str = "P@20",
                          title: str | None = None,
                          intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
                          references: Sequence[str] = ()) -> Path:
    """001 Fig. 3: one bar per method of ``ratios`` = {encoder kind: {method: ambiguous / non-ambiguous ratio}}
    (a ``ClassSplit`` is accepted for a ratio), one panel per encoder kind, a dashed line at 1; ``intervals``
    ({panel: {method: (low, high)}}, e.g. ``ssft.analysis.split.bootstrap_ratio_interval``) draws error bars;
    methods named in ``references`` (e.g. the first stage) are drawn grey. Writes a PNG."""
    from matplotlib.figure import Figure  # noqa: PLC0415  (heavy optional library, loaded on first use)

    panels = [(enc, {m: (getattr(v, "ratio", v)) for m, v in methods.items()}) for enc, methods in ratios.items() if methods]
    if not panels:
        raise SsftError("ambiguity ratio plot: no ratios to plot")
    fig = Figure(figsize=(4.2 * len(panels), 3.6))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (encoder, values) in zip(axes, panels):
        names = list(values)
        heights = [float(values[n]) for n in names]
        colours = ["tab:grey" if n in references else "tab:blue" for n in names]
        bars = ax.bar(range(len(names)), [0 if math.isnan(h) else h for h in heights], color=colours)
        tops = list(heights)
        spans = (intervals or {}).get(encoder, {})
        if spans:
            lows = [spans.get(n, (h, h))[0] for n, h in zip(names, heights)]
            highs = [spans.get(n, (h, h))[1] for n, h in zip(names, heights)]
            err = [[max(h - lo, 0) if not math.isnan(h) and not math.isnan(lo) else 0 for h, lo in zip(heights, lows)],
                   [max(hi - h, 0) if not math.isnan(h) and not math.isnan(hi) else 0 for h, hi in zip(heights, highs)]]
            ax.errorbar(range(len(names)), [0 if math.isnan(h) else h for h in heights], yerr=err, fmt="none",
                        ecolor="black", elinewidth=1, capsize=3)
            tops = [h if math.isnan(h) or math.isnan(hi) else max(h, hi) for h, hi in zip(heights, highs)]
        for bar, h, top in zip(bars, heights, tops):
            ax.annotate("n/a" if math.isnan(h) else f"{h:.2f}", (bar.get_x() + bar.get_width() / 2, 0 if math.isnan(h) else top),
                        ha="center", va="bottom", fontsize=8)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_title(encoder)
    axes[0].set_ylabel(f"{metric} ambiguous / non-ambiguous")
    if title:
        fig.suptitle(title, y=1.02)
    return _save(fig, path)


@dataclass
class ValidationCurve:
    """Validation metric per epoch of one run; ``boundaries`` are the epochs where a sequential hybrid's second
    phase starts (its epochs continue from the first phase's)."""

    label: str
    metric: str
    points: list[tuple[float, float]]
    boundaries: list[float] = field(default_factory=list)


def validation_curve(run_dir: str | Path, label: str | None = None) -> ValidationCurve:
    """The validation history of a finished run folder (``run_info.json``): one curve over all hybrid phases, the
    second phase's epochs shifted by the first phase's length. ``label`` defaults to the run's method name."""


    run = Path(run_dir)
    try:
        info = json.loads((run / "run_info.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SsftError(f"{run}: not a finished run (run_info.json missing)") from None
    recipe_path = run / "recipe.yaml"
    recipe = yaml.safe_load(recipe_path.read_text(encoding="utf-8")) if recipe_path.is_file() else {}
    metric = (info.get("best_validation") or {}).get("metric") or "nDCG@10"
    key = f"eval_{metric}"
    phases = info.get("hybrid_phases") or [{"epochs": 0, "validation_history": info.get("validation_history") or []}]
    points, boundaries, offset = [], [], 0.0
    for number, phase in enumerate(phases):
        if number:
            boundaries.append(offset)
        for entry in phase.get("validation_history") or []:
            if key in entry and entry.get("epoch") is not None:
                points.append((offset + float(entry["epoch"]), float(entry[key])))
        offset += float(phase.get("epochs") or 0)
    if not points:
        raise SsftError(f"{run}/run_info.json: no validation history for {metric} (was the run given a validation split?)")
    return ValidationCurve(label or run_method_name((recipe or {}).get("adapter") or {}), metric, points, boundaries)


def plot_validation_curves(curves: Sequence[ValidationCurve], path: str | Path, title: str | None = None) -> Path:
    """001 Fig. 4: validation metric against epoch, one line per curve (e.g. prefix tuning, LoRA, concurrent and
    sequential hybrids); a dotted vertical line where a sequential hybrid switches phase. Writes a PNG."""
    from matplotlib.figure import Figure  # noqa: PLC0415  (heavy optional library, loaded on first use)

    if not curves:
        raise SsftError("validation curve plot: no curves")
    metrics = {c.metric for c in curves}
    if len(metrics) != 1:
        raise SsftError(f"validation curve plot: curves measure different metrics ({', '.join(sorted(metrics))})")
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for curve in curves:
        xs, ys = zip(*curve.points)
        line, = ax.plot(xs, ys, marker="o", markersize=3, label=curve.label)
        for b in curve.boundaries:
            ax.axvline(b, color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"validation {metrics.pop()}")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return _save(fig, path)


@dataclass
class RunCurves:
    """What a run's ``curves.png`` draws: the training loss as logged (epoch, loss), each validation measure per
    evaluation ({measure: [(epoch, value)]}, the starting model at epoch 0), the epoch(s) the run selected (one per
    hybrid phase), the epochs where a sequential hybrid's next phase starts, and the selection measure."""

    loss: list[tuple[float, float]]
    validation: dict[str, list[tuple[float, float]]]
    selected: list[float]
    boundaries: list[float] = field(default_factory=list)
    selection_metric: str | None = None
    title: str = ""


def run_curves(info: Mapping, title: str = "") -> RunCurves:
    """The curves of one run from its run_info (``validation_history``, ``train_loss_history``, ``best_validation``;
    a hybrid's ``hybrid_phases``, a later phase's epochs shifted by the earlier phases' length)."""
    best = info.get("best_validation") or {}
    phases = info.get("hybrid_phases") or [{"epochs": 0, "validation_history": info.get("validation_history") or [],
                                            "train_loss_history": info.get("train_loss_history") or [],
                                            "best_validation": best}]
    loss: list[tuple[float, float]] = []
    validation: dict[str, list[tuple[float, float]]] = {}
    selected: list[float] = []
    boundaries: list[float] = []
    offset = 0.0
    for number, phase in enumerate(phases):
        if number:
            boundaries.append(offset)
        for entry in phase.get("train_loss_history") or []:
            loss.append((offset + float(entry["epoch"]), float(entry["loss"])))
        for entry in phase.get("validation_history") or []:
            if entry.get("epoch") is None:
                continue
            for key, value in entry.items():
                if key.startswith("eval_") and isinstance(value, (int, float)):
                    validation.setdefault(key.removeprefix("eval_"), []).append((offset + float(entry["epoch"]), float(value)))
        chosen = (phase.get("best_validation") or {}).get("epoch")
        if chosen is not None:
            selected.append(offset + float(chosen))
        offset += float(phase.get("epochs") or 0)
    return RunCurves(loss, validation, selected, boundaries, best.get("metric"), title)


def run_curves_figure(curves: RunCurves):
    """The ``matplotlib.figure.Figure`` of ``plot_run_curves``: the training loss (left) and every validation measure
    (right) against epoch, a dashed line at each selected epoch and a star on the selection measure there. Lines are
    labelled (``training loss``, each measure's name) so what is drawn can be read back."""
    from matplotlib.figure import Figure  # noqa: PLC0415  (heavy optional library, loaded on first use)

    fig = Figure(figsize=(10, 4))
    loss_ax, val_ax = fig.subplots(1, 2)
    if curves.loss:
        xs, ys = zip(*curves.loss)
        loss_ax.plot(xs, ys, marker="o", markersize=3, color="tab:red", label="training loss")
    else:
        loss_ax.text(0.5, 0.5, "no training loss logged\n(fewer steps than training.logging_steps)",
                     ha="center", va="center", transform=loss_ax.transAxes, fontsize=9)
    loss_ax.set_title("training loss")
    for measure, points in sorted(curves.validation.items()):
        xs, ys = zip(*points)
        width = 2.2 if measure == curves.selection_metric else 1.2
        val_ax.plot(xs, ys, marker="o", markersize=3, linewidth=width, label=measure)
    if not curves.validation:
        val_ax.text(0.5, 0.5, "no validation split", ha="center", va="center", transform=val_ax.transAxes, fontsize=9)
    chosen = dict(curves.validation.get(curves.selection_metric or "", []))
    for epoch in curves.selected:
        for ax in (loss_ax, val_ax):
            ax.axvline(epoch, color="grey", linestyle="--", linewidth=1, label="_selected epoch")
        if epoch in chosen:
            val_ax.plot([epoch], [chosen[epoch]], marker="*", markersize=14, color="gold", markeredgecolor="black",
                        linestyle="none", label=f"selected: epoch {epoch:g}")
    for boundary in curves.boundaries:
        for ax in (loss_ax, val_ax):
            ax.axvline(boundary, color="black", linestyle=":", linewidth=1, label="_next phase")
    val_ax.set_title("validation" + (f" (selection: {curves.selection_metric})" if curves.selection_metric else "")
                     + ", epoch 0 = the start")
    for ax in (loss_ax, val_ax):
        ax.set_xlabel("epoch")
        ax.set_xlim(left=-0.05)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    if curves.title:
        fig.suptitle(curves.title, fontsize=9)
    return fig


def plot_run_curves(curves: RunCurves, path: str | Path) -> Path:
    """A run's ``curves.png`` (``run_curves_figure``). Writes a PNG."""
    return _save(run_curves_figure(curves), path)


def sweep_table_figure(rows: Sequence[Mapping], title: str = ""):
    """The ``Figure`` of ``plot_sweep_table``: one panel per measure of the runs' own rows, one group of bars per
    run, one bar per row of its metrics.json (the model, the first stage, their interpolation, the start)."""
    from matplotlib.figure import Figure  # noqa: PLC0415  (heavy optional library, loaded on first use)

    rows = [r for r in rows if isinstance(r.get("metrics"), Mapping) and r["metrics"]]
    if not rows:
        raise SsftError("sweep table figure: no finished run to draw")
    names = list(dict.fromkeys(name for r in rows for name in r["metrics"]))
    measures = list(next(iter(rows[0]["metrics"].values())))
    fig = Figure(figsize=(max(4.0, 0.9 * len(rows) * max(1, len(names)) / 2) * len(measures), 4.0))
    axes = fig.subplots(1, len(measures), squeeze=False)[0]
    width = 0.8 / len(names)
    for ax, measure in zip(axes, measures):
        for i, name in enumerate(names):
            heights = [float(r["metrics"].get(name, {}).get(measure, math.nan)) for r in rows]
            xs = [x - 0.4 + width * (i + 0.5) for x in range(len(rows))]
            ax.bar(xs, [0 if math.isnan(h) else h for h in heights], width, label=name,
                   color="tab:grey" if i == 1 else f"C{i}")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([str(r.get("run", "")) for r in rows], rotation=30, ha="right", fontsize=7)
        ax.set_title(measure)
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def plot_sweep_table(rows: Sequence[Mapping], path: str | Path, title: str = "") -> Path:
    """A sweep's results table as bars (``sweep_table_figure``; ``rows``: ssft-sweep's result rows). Writes a PNG."""
    return _save(sweep_table_figure(rows, title), path)


def collapse_record(run_dir: str | Path) -> dict:
    """{"history", "losses", "warnings"} of ``collapse.json`` and {"kl_history", "stage_changes", "delta"} of
    ``daft.json`` of a run folder (either may be absent, not both): the input of ``plot_collapse_history``."""
    run = Path(run_dir)
    record: dict = {}
    for name in ("collapse.json", "daft.json"):
        path = run / name
        if path.is_file():
            try:
                record.update(json.loads(path.read_text(encoding="utf-8")))
            except json.JSONDecodeError as err:
                raise SsftError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    if not record:
        raise SsftError(f"{run}: neither collapse.json nor daft.json (train with the collapse_monitor / daft callbacks)")
    return record


def plot_collapse_history(runs: Mapping[str, Mapping], path: str | Path, delta: float | None = None,
                          title: str | None = None) -> Path:
    """Training histories of dense models side by side, ``runs`` = {label: record} where a record holds any of
    ``history`` (CollapseMonitorCallback.history), ``losses`` (its losses with collapse values), ``kl_history`` and
    ``stage_changes`` (DaftCallback's). Panels: total variance (log scale) and effective rank per tower (query
    solid, document dashed), training loss with its collapse value log(1 + |D⁻|) dotted, and the KL estimate with
    ``delta``; a vertical line where a DAFT run changes stage. Writes a PNG."""
    from matplotlib.figure import Figure  # noqa: PLC0415  (heavy optional library, loaded on first use)

    if not runs or not any(r.get("history") or r.get("losses") or r.get("kl_history") for r in runs.values()):
        raise SsftError("collapse history plot: no recorded history")
    with_kl = any(r.get("kl_history") for r in runs.values())
    n_panels = 4 if with_kl else 3
    fig = Figure(figsize=(4.2 * n_panels, 3.6))
    axes = fig.subplots(1, n_panels)
    colours = [f"C{i}" for i in range(10)]
    for (label, record), colour in zip(runs.items(), colours):
        history = record.get("history") or []
        if history:
            steps = [h["step"] for h in history]
            for side, style in (("query", "-"), ("document", "--")):
                axes[0].plot(steps, [max(h[side]["total_variance"], 1e-12) for h in history], style, color=colour,
                             marker="o", markersize=2, label=f"{label}: {side}")
                axes[1].plot(steps, [h[side]["effective_rank"] for h in history], style, color=colour, marker="o",
                             markersize=2, label=f"{label}: {side}")
        losses = record.get("losses") or []
        if losses:
            steps = [x["step"] for x in losses]
            axes[2].plot(steps, [x["loss"] for x in losses], "-", color=colour, marker="o", markersize=2, label=f"{label}: loss")
            axes[2].plot(steps, [x["collapse_value"] for x in losses], ":", color=colour, label=f"{label}: log(1+|D⁻|)")
        if with_kl and record.get("kl_history"):
            kl = record["kl_history"]
            axes[3].plot([h["step"] for h in kl], [h["kl"] for h in kl], "-", color=colour, marker="o", markersize=3, label=label)
        for change in record.get("stage_changes") or []:
            if change.get("stage") == "fine-tuning":
                for ax in axes:
                    ax.axvline(change["step"], color=colour, linestyle="-.", linewidth=0.8)
    axes[0].set_yscale("log")
    axes[0].set_title("total variance of the sample")
    axes[1].set_title("effective rank")
    axes[2].set_title("training loss vs collapse value")
    if with_kl:
        if delta is not None:
            axes[3].axhline(delta, color="grey", linestyle="--", linewidth=1, label=f"δ = {delta:g}")
        axes[3].set_title("DAFT: 1-NN KL(doc ‖ query)")
    for ax in axes:
        ax.set_xlabel("step")
        if ax.has_data():
            ax.legend(fontsize=6)
    if title:
        fig.suptitle(title, y=1.02)
    return _save(fig, path)


@dataclass
class LatencyPoint:
    """One model of the trade-off: its quality and its query encoder's ms per query at each batch size; ``extra``
    points (e.g. distilled students) get their own marker."""

    label: str
    quality: float
    ms_per_query: Mapping[int, float]
    extra: bool = False


def plot_latency_tradeoff(points: Sequence[LatencyPoint], path: str | Path, metric: str = "nDCG@10",
                          reference: tuple[str, Mapping[int, float]] | None = None, threads: int | None = None,
                          title: str | None = None) -> Path:
    """000 Fig. 6: ``metric`` against query encoding latency (ms per query, log scale), one panel per batch size
    the points share, each point labelled; ``reference`` = (label, {batch size: ms}) draws a vertical line (a
    latency without a quality of its own, e.g. the document tower used as query encoder). Writes a PNG."""
    from matplotlib.figure import Figure  # noqa: PLC0415  (heavy optional library, loaded on first use)

    if not points:
        raise SsftError("latency trade-off plot: no points")
    batch_sizes = sorted(set.intersection(*(set(p.ms_per_query) for p in points)))
    if not batch_sizes:
        raise SsftError("latency trade-off plot: the points share no batch size")
    fig = Figure(figsize=(5.0 * len(batch_sizes), 4.0))
    axes = fig.subplots(1, len(batch_sizes), squeeze=False)[0]
    for ax, batch in zip(axes, batch_sizes):
        for extra, marker, colour, name in ((False, "o", "tab:blue", "trained runs"), (True, "s", "tab:red", "extra runs")):
            chosen = [p for p in points if p.extra == extra]
            if not chosen:
                continue
            ax.scatter([p.ms_per_query[batch] for p in chosen], [p.quality for p in chosen], marker=marker, color=colour,
                       label=name, zorder=3)
            for p in chosen:
                ax.annotate(p.label, (p.ms_per_query[batch], p.quality), textcoords="offset points", xytext=(4, 4), fontsize=7)
        if reference is not None and batch in reference[1]:
            ax.axvline(reference[1][batch], color="grey", linestyle="--", linewidth=1,
                       label=f"{reference[0]} ({reference[1][batch]:.1f} ms)")
        from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: PLC0415  (heavy optional library, loaded on first use)

        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks of a log axis overlap one another
        ax.margins(x=0.25, y=0.12)  # room for the labels
        ax.set_xlabel("query encoding ms per query (log)" + (f", {threads} thread(s)" if threads else ""))
        ax.set_title(f"batch {batch}")
        ax.legend(fontsize=7, loc="best")
    axes[0].set_ylabel(metric)
    if title:
        fig.suptitle(title, y=1.02)
    return _save(fig, path)


__all__ = ["LatencyPoint", "RunCurves", "ValidationCurve", "collapse_record", "plot_ambiguity_ratios",
           "plot_collapse_history", "plot_latency_tradeoff", "plot_run_curves", "plot_sweep_table", "plot_validation_curves",
           "run_curves", "run_curves_figure", "sweep_table_figure", "validation_curve"]
