"""One model on several datasets: one table of nDCG@10 / R@100 per dataset and their mean, BM25 beside the model
(``ssft-eval``; what a public ``ssft.evaluate`` calls).

For each dataset (anything ``ssft.data.beir.load_dataset`` reads: a BEIR folder or name, a hub id in the BeIR or MTEB
layout, an ``ir_datasets`` id) and its ``split`` (default ``test``):

- BM25 (bm25s, English stopwords; the index cached by corpus content) retrieves the top-``max(depth, 100)`` of every
  judged query: the baseline row, evaluated on its own ranking.
- The model either reranks BM25's top-``depth`` (``first_stage="bm25"``; any architecture; the candidates
  ``ssft-rerank --first-stage bm25`` and ``ssft-train`` rerank, so the numbers are theirs) or retrieves the top-``depth``
  of the whole corpus itself (``first_stage="full"``; a single-vector dense model, exact inner-product search).
- Metrics (ir_measures) average over every judged query of the split, a query without candidates scoring 0 (as
  ``ssft-train`` / ``ssft-rerank``); the model against BM25 is a paired t-test over those queries
  (``ssft.eval.significance.paired_ttest``, two-sided), per dataset and metric.

The model is a saved ssft model (a run folder or its ``model/``), or a sentence embedder by hub id / folder (e.g.
``sentence-transformers/all-MiniLM-L6-v2``: a dense model with ``pooling``, L2-normalised, as
``ssft.models.frozen.load_dense_model`` builds it). Every dataset is loaded and its split checked, and the model loaded,
before the output folder is touched; every row of the table is scored at one precision (recorded).

Outputs (``output_dir``, the output-folder rule of ``ssft.core.run_folder``, tool ``ssft-eval``): ``eval.md`` (the
table), ``eval.png`` (a bar figure, one panel per metric) and ``eval.json`` (everything, written last: its presence
marks a finished evaluation).
"""
from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ssft.config.metrics import parse_measures
from ssft.core import precision as precision_mod
from ssft.core.arguments import string_list, whole_number
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_file, atomic_write_json, atomic_write_text
from ssft.core.run_folder import OutputFolder, Source
from ssft.data.beir import IRDataset, Qrels, dataset_identity, load_dataset
from ssft.data.examples import PairDataset
from ssft.data.trec import Run, top_k
from ssft.eval.metrics import evaluate_run
from ssft.eval.retrieve import retrieve
from ssft.eval.significance import paired_ttest, significance_mark
from ssft.firststage.bm25 import BM25
from ssft.models.base import load_ranker, saved_model_folder
from ssft.models.frozen import dense_reference, load_dense_model
from ssft.models.interop import openvino
from ssft.training.prediction import prediction_trainer

logger = logging.getLogger(__name__)

TOOL = "ssft-eval"
EVAL_OUTPUTS = ("eval.json", "eval.md", "eval.png")
EVAL_MARKERS = ("eval.json",)
FIRST_STAGES = ("bm25", "full")
DEFAULT_METRICS = ("nDCG@10", "R@100")
BM25_DEPTH = 100  # BM25's own ranking is evaluated at least this deep (R@100)
TEST = "paired t-test over the judged queries, two-sided (ssft.eval.significance.paired_ttest)"
NOT_TESTED = {"pvalue": None, "statistic": None, "mark": ""}  # a metric not computed for the model (beyond_depth)


def evaluate_datasets(model: str | Path | Any, datasets: Sequence[str | IRDataset], *, first_stage: str = "bm25",
                      depth: int = 100, split: str = "test", metrics: Sequence[str] = DEFAULT_METRICS,
                      batch_size: int = 64, precision: str = "auto", output_dir: str | Path | None = None,
                      overwrite: bool = False, trust_remote_code: bool = False, pooling: str = "mean",
                      max_length: int = 256, query_max_length: int = 64,
                      backend: str = openvino.DEFAULT_BACKEND, model_name: str | None = None) -> dict[str, Any]:
    """Evaluate ``model`` on every dataset of ``datasets`` beside BM25 (module docstring); returns what ``eval.json``
    holds and, with ``output_dir``, writes ``eval.json``, ``eval.md`` and ``eval.png`` there. ``model``: a saved ssft
    model or run folder, a sentence embedder's hub id / folder (``pooling``, ``max_length``, ``query_max_length`` apply
    to it), or a loaded ranker. ``overwrite``: replace an earlier ``ssft-eval`` result in ``output_dir``. ``backend``:
    torch, openvino or auto (``ssft.models.interop.openvino.serve``: the job is every dataset's reranked pairs or
    corpus; int8 runs on openvino, calibrated on what is served: the (query, candidate) pairs reranked, or the queries
    and the corpus retrieved from). ``model_name``:
    how the table names a loaded ranker (default: its class)."""
    metrics = string_list(metrics, "--metrics")
    _check_settings(datasets, first_stage, depth, batch_size, metrics)
    precision_mod.check(precision, "precision")
    openvino.check_serving(backend, precision)
    folder = None
    if output_dir is not None:
        folder = OutputFolder(Path(output_dir), TOOL, EVAL_OUTPUTS, EVAL_MARKERS, where="--output",
                              sources=_model_sources(model), finished="eval.json", overwrite=overwrite)
        folder.check()
    loaded = []
    seen: dict[str, str] = {}  # the dataset's folder (links followed) -> how it was named
    for spec in datasets:  # every dataset and its split before anything is computed
        dataset = spec if isinstance(spec, IRDataset) else load_dataset(str(spec))
        name = spec if isinstance(spec, str) else dataset.name
        where = os.path.realpath(dataset.path)
        if where in seen:  # "mini" and "mini/", or a folder and a link to it: one dataset averaged with itself
            raise SsftError(f"--datasets: '{name}' is the dataset '{seen[where]}' again ({where}); name each once")
        seen[where] = str(name)
        qrels = dataset.qrels(split)
        loaded.append((name, dataset, qrels))
        if folder is not None:
            folder.add_sources((dataset.path, f"the dataset being evaluated ({loaded[-1][0]})"))
    ranker, shown = _load_model(model, trust_remote_code, pooling, max_length, query_max_length)
    model_name = model_name if model_name and not isinstance(model, (str, Path)) else shown
    if first_stage == "full" and not getattr(ranker, "full_retrieval", False):
        raise SsftError(f"--first-stage full: full retrieval needs a single-vector dense model (architecture 'dense'), "
                        f"not '{getattr(ranker, 'architecture', type(ranker).__name__)}'; use --first-stage bm25")
    job = sum(len(d.corpus) + len(q) if first_stage == "full" else len(q) * depth for _, d, q in loaded)
    indexes: list[BM25] = []  # BM25 indexes built now: saved to the on-disk cache once the result is complete
    stages = _first_stages(loaded, first_stage, depth, indexes)
    ranker, _, resolved = openvino.serve(ranker, backend, precision, lambda: _calibration(loaded, stages, first_stage),
                                         inputs=job)
    logger.info("evaluating %s on %d datasets (%s, depth %d) as %s", model_name, len(loaded), first_stage, depth,
                precision_mod.served_as(ranker))
    if folder is None:
        return _evaluate(ranker, model_name, loaded, stages, first_stage, depth, split, metrics, batch_size, resolved)
    with folder:  # from here on the folder is ours (locked); a failure before the results leaves it as it was
        folder.claim()
        try:
            result = _evaluate(ranker, model_name, loaded, stages, first_stage, depth, split, metrics, batch_size,
                               resolved)
        except BaseException:
            folder.abandon()
            raise
        if overwrite:
            folder.clear()
        (folder.path / "eval.json").unlink(missing_ok=True)  # eval.json marks a finished result: written last
        atomic_write_text(folder.path / "eval.md", markdown_table(result) + "\n")
        plot_eval(result, folder.path / "eval.png")
        atomic_write_json(folder.path / "eval.json", result)
        for index in indexes:  # a BM25 index built now goes to the on-disk cache once the result is complete
            index.save()
    return result


def _first_stages(loaded: list[tuple[str, IRDataset, Qrels]], first_stage: str, depth: int,
                  indexes: list) -> list[tuple[Run, Run | None, float]]:
    """Each dataset's BM25 ranking of its judged queries (the baseline row, top-``max(depth, 100)``), the candidates
    the model reranks (``first_stage`` bm25: BM25's top-``depth`` of the queries that have any; else None) and the
    seconds BM25 took. Built BM25 indexes are appended to ``indexes``."""
    stages = []
    for _, dataset, qrels in loaded:
        started = time.perf_counter()
        queries = {q: dataset.queries[q] for q in qrels}
        bm25 = BM25(dataset, save=False)
        if bm25.indexed:
            indexes.append(bm25)
        sparse = bm25.search(queries, max(depth, BM25_DEPTH))
        candidates = None
        if first_stage == "bm25":
            # the candidates ssft-train / ssft-rerank rerank: BM25 searched at the depth itself (among documents tied at
            # the cut-off, a deeper search's top-k may hold others)
            searched = sparse if depth >= BM25_DEPTH else bm25.search(queries, depth)
            candidates = top_k({q: searched[q] for q in qrels if searched.get(q)}, depth)
        stages.append((sparse, candidates, time.perf_counter() - started))
    return stages


def _calibration(loaded: list[tuple[str, IRDataset, Qrels]], stages: list[tuple[Run, Run | None, float]],
                 first_stage: str) -> list:
    """int8 on OpenVINO, what the job serves: reranking, every (query, candidate) pair reranked on every dataset;
    full retrieval, each dataset's judged queries, each paired with a document of its corpus, and its documents."""
    items: list = []
    for (_, dataset, qrels), (_, candidates, _) in zip(loaded, stages):
        if first_stage == "bm25":
            items += [(dataset.queries[q], dataset.corpus[d].full_text) for q in sorted(candidates)
                      for d in candidates[q] if d in dataset.corpus]
        else:
            items += openvino.corpus_calibration([dataset.queries[q] for q in sorted(qrels) if q in dataset.queries],
                                                 [dataset.corpus[d].full_text for d in sorted(dataset.corpus)])
    return items


def _check_settings(datasets: Sequence, first_stage: str, depth: int, batch_size: int, metrics: list[str]) -> None:
    if not isinstance(first_stage, str) or first_stage not in FIRST_STAGES:
        raise SsftError(f"--first-stage: expected one of {', '.join(FIRST_STAGES)}, got {first_stage!r}")
    for flag, value in (("--depth", depth), ("--batch-size", batch_size)):
        whole_number(value, flag)
    if any(not isinstance(d, (str, IRDataset)) for d in datasets):
        raise SsftError("--datasets: expected dataset names or paths (strings)")
    names = [d if isinstance(d, str) else d.name for d in datasets]
    if not names or any(not str(n).strip() for n in names):
        raise SsftError("--datasets: name at least one dataset (comma-separated, e.g. nfcorpus,scifact)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SsftError(f"--datasets: {', '.join(repeated)} named twice")
    if not metrics:
        raise SsftError("--metrics: name at least one metric (e.g. nDCG@10,R@100)")
    parse_measures(metrics, "--metrics")


def _model_sources(model: Any) -> tuple[Source, ...]:
    """What the output folder must not be, hold or lie inside: the model's folder (and the run folder around it)."""
    if not isinstance(model, (str, Path)):
        return ()
    path = Path(model).expanduser()
    folder = saved_model_folder(path)
    sources: list[Source] = []
    if folder is not None:
        sources.append((folder, "the model folder being read"))
        if folder != path:
            sources.append((path, "the run folder being read"))
    elif path.exists():
        sources.append((path, "the model being read"))
    return tuple(sources)


def _load_model(model: Any, trust_remote_code: bool, pooling: str, max_length: int, query_max_length: int):
    """(ranker, the name the table gives it): a saved ssft model, a sentence embedder by name, or a loaded ranker."""
    if not isinstance(model, (str, Path)):
        return model, type(model).__name__
    folder = saved_model_folder(Path(model).expanduser())
    if folder is not None:
        ranker = load_ranker(folder, trust_remote_code=trust_remote_code)
        shown = folder.parent.name if folder.name == "model" else folder.name
        return ranker, shown
    for flag, value in (("--max-length", max_length), ("--query-max-length", query_max_length)):
        if value < 1:
            raise SsftError(f"{flag} must be >= 1")
    reference = dense_reference(str(model), pooling, max_length, query_max_length)
    return load_dense_model(reference, trust_remote_code=trust_remote_code), str(model).rstrip("/").split("/")[-1]


def _evaluate(ranker, model_name: str, loaded: list[tuple[str, IRDataset, Qrels]],
              stages: list[tuple[Run, Run | None, float]], first_stage: str, depth: int, split: str,
              metrics: list[str], batch_size: int, precision: str) -> dict[str, Any]:
    # the ranker serves for good (ssft.models.interop.openvino.serve); ``precision``: what its torch side computes in
    scorer = None if first_stage == "full" else prediction_trainer(ranker, batch_size, None, precision).score
    beyond = beyond_depth(metrics, depth)
    rows = []
    for (name, dataset, qrels), (sparse, candidates, bm25_seconds) in zip(loaded, stages):
        started = time.perf_counter() - bm25_seconds
        if first_stage == "full":
            model_run = retrieve(ranker, dataset, {q: dataset.queries[q] for q in qrels}, depth, batch_size)
        else:
            model_run = _rerank(scorer, dataset, candidates, depth)
        model_scores, model_per_query = evaluate_run(qrels, model_run, metrics)
        bm25_scores, bm25_per_query = evaluate_run(qrels, sparse, metrics)
        for m in beyond:  # the model ranked only the top-depth: no value to set beside BM25's deeper ranking
            model_scores[m] = None
        rows.append({
            "dataset": name, "identity": dataset_identity(dataset), "split": split,
            "queries": len(model_per_query), "documents": len(dataset.corpus),
            "model": model_scores, "bm25": bm25_scores,
            "significance": {m: NOT_TESTED if m in beyond else _test(model_per_query, bm25_per_query, m)
                             for m in metrics},
            "seconds": round(time.perf_counter() - started, 1), "warnings": list(dataset.warnings),
        })
        logger.info("%s: %s", name, ", ".join(f"{m} {_value(model_scores[m], 4)} (BM25 {bm25_scores[m]:.4f})"
                                              for m in metrics))
    mean = {side: {m: None if side == "model" and m in beyond else sum(r[side][m] for r in rows) / len(rows)
                   for m in metrics} for side in ("model", "bm25")}
    what = (f"reranking the BM25 top-{depth}" if first_stage == "bm25"
            else f"full retrieval of the corpus, top-{depth} (faiss flat, exact)")
    return {"model": model_name, "first_stage": first_stage, "depth": depth, "bm25_depth": max(depth, BM25_DEPTH),
            "split": split, "metrics": metrics, "precision": precision_mod.served_as(ranker), "what": what, "test": TEST,
            "not_computed": {m: f"its cutoff is deeper than the depth ({depth})" for m in beyond},
            "datasets": rows, "mean": mean}


def beyond_depth(metrics: Sequence[str], depth: int) -> list[str]:
    """The metrics whose cutoff exceeds ``depth`` (R@100 of a top-5 ranking): the model ranks only its top-``depth``,
    so its value would measure the depth, not the model; they are not computed for the model (nor tested)."""
    return [name for name, measure in zip(metrics, parse_measures(list(metrics), "--metrics"))
            if isinstance(measure.params.get("cutoff"), int) and measure.params["cutoff"] > depth]


def _value(value: float | None, digits: int) -> str:
    """A metric's value, or n/a where it is not computed (``beyond_depth``)."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def _rerank(score, dataset: IRDataset, candidates: Run, depth: int) -> Run:
    pairs = PairDataset(candidates, depth, dataset)
    return pairs.to_run(score(pairs)) if len(pairs) else {}


def _test(model: dict[str, dict[str, float]], baseline: dict[str, dict[str, float]], metric: str) -> dict[str, Any]:
    """The paired test of one metric; p None where it cannot be computed (fewer than 2 queries, no variance)."""
    try:
        res = paired_ttest({q: v[metric] for q, v in model.items()}, {q: v[metric] for q, v in baseline.items()},
                           alternative="two-sided")
    except SsftError:
        return {"pvalue": None, "statistic": None, "mark": ""}
    p = None if math.isnan(res.pvalue) else res.pvalue
    t = None if math.isnan(res.statistic) else res.statistic
    return {"pvalue": p, "statistic": t, "mark": significance_mark(p)}


# ---------------------------------------------------------------- the table and the figure


def markdown_table(result: dict[str, Any]) -> str:
    """The result as a Markdown table: per dataset (and their mean) each metric for BM25 and the model, the model's
    value marked * / ** where the paired test against BM25 gives p <= 0.05 / 0.01."""
    metrics, model = result["metrics"], result["model"]
    head = ["dataset", "queries", "documents"]
    for m in metrics:
        head += [f"BM25 {m}", f"{model} {m}"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (2 + 2 * len(metrics))]
    for row in result["datasets"]:
        cells = [f"`{row['dataset']}` ({row['split']})", f"{row['queries']:,}", f"{row['documents']:,}"]
        for m in metrics:
            cells += [f"{row['bm25'][m]:.3f}", f"{_value(row['model'][m], 3)}{row['significance'][m]['mark']}"]
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["mean", "", ""]
    for m in metrics:
        cells += [f"{result['mean']['bm25'][m]:.3f}", _value(result['mean']['model'][m], 3)]
    lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"{model}: {result['what']}, {result['precision']}; BM25: bm25s top-{result['bm25_depth']}. "
                 f"\\* / \\*\\*: p <= 0.05 / 0.01, {result['test']}.")
    not_computed = result.get("not_computed") or {}
    if not_computed:
        lines.append(f"n/a: {', '.join(not_computed)} not computed for {model} (a cutoff deeper than the "
                     f"{result['depth']} documents it ranks per query; run with --depth {_deepest(not_computed)} "
                     f"or more), nor tested.")
    return "\n".join(lines)


def _deepest(metrics: Sequence[str]) -> int:
    """The deepest cutoff of ``metrics`` (ir_measures names with a cutoff)."""
    return max(measure.params["cutoff"] for measure in parse_measures(list(metrics), "--metrics"))


def plot_eval(result: dict[str, Any], path: Path) -> Path:
    """A bar figure: one panel per metric, BM25 and the model side by side per dataset and for the mean."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415  (heavy optional library)
    from matplotlib.figure import Figure  # noqa: PLC0415

    metrics = result["metrics"]
    labels = [r["dataset"] for r in result["datasets"]] + ["mean"]
    fig = Figure(figsize=(max(4.0, 1.3 * len(labels)) * len(metrics), 3.6))
    FigureCanvasAgg(fig)
    width = 0.38
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        bm25 = [r["bm25"][metric] for r in result["datasets"]] + [result["mean"]["bm25"][metric]]
        model = [r["model"][metric] or 0.0 for r in result["datasets"]] + [result["mean"]["model"][metric] or 0.0]
        marks = [r["significance"][metric]["mark"] for r in result["datasets"]] + [""]
        xs = list(range(len(labels)))
        ax.bar([x - width / 2 for x in xs], bm25, width, label="BM25", color="#9e9e9e")
        bars = ax.bar([x + width / 2 for x in xs], model, width, label=result["model"], color="#1f77b4")
        if metric in (result.get("not_computed") or {}):
            marks = ["n/a"] * len(marks)
        for bar, mark in zip(bars, marks):
            if mark:
                ax.annotate(mark, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        ax.set_title(metric)
        ax.set_ylim(0, min(1.0, max(bm25 + model + [0.05]) * 1.2))
        if i == 0:
            ax.legend(fontsize=8)
    fig.suptitle(f"{result['model']}: {result['what']}", fontsize=9)
    fig.tight_layout()
    atomic_write_file(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    return path


__all__ = ["DEFAULT_METRICS", "EVAL_OUTPUTS", "FIRST_STAGES", "TOOL", "beyond_depth", "evaluate_datasets", "markdown_table",
           "plot_eval"]
