"""Stages 5 and 6 of ssft-train: evaluate the trained model on the test split (reranking the first stage, or full
retrieval for a model with ``Ranker.full_retrieval``), then write what a finished run holds, metrics.json last.
Before training, ``evaluate_start`` scores the starting model on the test split (the ``start`` entry of metrics.json)
where it can rank (``Ranker.ranks_untrained``). Both score on the run's ``eval.backend`` (``scoring_backend``,
resolved once before training): on OpenVINO the start is converted, scored and put back on torch before training, the
trained model converted once its weights are final."""
from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

from ssft.analysis.figures import plot_run_curves, run_curves
from ssft.config.recipe import Recipe
from ssft.core import precision, progress
from ssft.core.io import atomic_write_json, atomic_write_text
from ssft.core.output_names import per_query_file, run_file
from ssft.core.run_folder import CURVES
from ssft.data.beir import dataset_identity
from ssft.data.examples import PairDataset
from ssft.data.trec import Run, read_run, top_k, write_run
from ssft.eval.metrics import evaluate_run, write_per_query
from ssft.eval.rerank import format_table, rerank_and_report, tune_alpha
from ssft.eval.retrieve import retrieve, retrieve_and_report, tune_fusion
from ssft.models.interop import openvino
from ssft.models.interop.card import versions
from ssft.pipeline.build import BuiltRun
from ssft.pipeline.inputs import RunInputs
from ssft.pipeline.schedule import TrainedRun
from ssft.training.prediction import prediction_trainer

logger = logging.getLogger("ssft")


def freeze(ranker) -> None:
    """After training: evaluation mode, no gradients (lets ColBERT reuse cached document embeddings), and a single
    LoRA adapter merged into the backbone (same scores, no LoRA overhead while reranking)."""
    ranker.eval()
    ranker.requires_grad_(False)
    if ranker.can_merge:
        ranker.merge_adapter()


START = "start"  # metrics.json's entry for the starting model; run.start.<split>.trec, per_query.start.<split>.tsv


def test_job_size(recipe: Recipe, inputs: RunInputs, ranker) -> int:
    """How many inputs scoring the test split takes: its reranked pairs, or the corpus and the queries encoded."""
    if ranker.full_retrieval:
        return len(inputs.dataset.corpus) + len(inputs.test_qrels)
    return sum(min(recipe.eval.depth, len(inputs.test_first.get(q) or ())) for q in inputs.test_qrels)


def _test_calibration(recipe: Recipe, inputs: RunInputs, ranker) -> list:
    """int8 on OpenVINO: the test split's reranked pairs, or its queries each with a document and the corpus's texts."""
    dataset = inputs.dataset
    if ranker.full_retrieval:
        return openvino.corpus_calibration([dataset.queries[q] for q in sorted(inputs.test_qrels) if q in dataset.queries],
                                           [dataset.corpus[d].full_text for d in sorted(dataset.corpus)])
    first = top_k({q: inputs.test_first[q] for q in inputs.test_qrels if inputs.test_first.get(q)}, recipe.eval.depth)
    return [(dataset.queries[q], dataset.corpus[d].full_text) for q in sorted(first) for d in first[q]
            if d in dataset.corpus]


def scoring_label(recipe: Recipe, backend: str) -> str:
    """How the start and the test split are scored, as checkpoints record it: ``bf16``, or ``openvino:bf16``."""
    return recipe.eval.precision if backend == "torch" else f"{backend}:{recipe.eval.precision}"


def serve_for_test(recipe: Recipe, inputs: RunInputs, ranker, backend: str) -> str:
    """The ranker put on ``backend`` at eval.precision to score the test split (int8 on OpenVINO: calibrated on its
    inputs); returns the precision its torch side computes in (what the head and the pooling run at)."""
    if backend == "torch":
        return recipe.eval.precision
    calibration = _test_calibration(recipe, inputs, ranker) if recipe.eval.precision == "int8" else None
    openvino.serve_openvino(ranker, recipe.eval.precision, calibration)
    return "fp32"


def evaluate_start(recipe: Recipe, inputs: RunInputs, built: BuiltRun, out: Path, write: bool, resumed: bool,
                   file_precision: str | None = None, batch_size: int | None = None, backend: str = "torch"
                   ) -> tuple[dict[str, float] | None, dict[str, Any]]:
    """The starting model (before the first training step) on the test split, scored like the trained one (reranking
    the same first-stage top-k, or full retrieval, in the run's resolved ``eval.precision``: one precision per table;
    ``batch_size``: the trained model's scoring batch, ``eval.batch_size`` when None): (its metrics or None, run_info's
    ``start`` record). Not scored where the starting model cannot rank (``Ranker.ranks_untrained`` false: a freshly
    initialised random head). A resumed run reads the start's run file written before it was killed when that was
    scored in this precision (``file_precision``, as the checkpoint records it); else it scores the start again, which
    it can: the checkpoint's weights are loaded only once training starts, after this."""
    e, ranker, split = recipe.eval, built.ranker, recipe.data.test_split
    if not e.start:
        why = "not scored: eval.start is false"
        logger.info("start (test): %s", why)
        return None, {"scored": False, "reason": why}
    if not ranker.ranks_untrained:
        why = (f"not scored: the {ranker.architecture} ranker starts with a freshly initialised (random) scoring head, "
               "so the starting model cannot rank")
        logger.info("start (test): %s", why)
        return None, {"scored": False, "reason": why}
    path = out / run_file(START, split)
    reread = resumed and file_precision == scoring_label(recipe, backend)
    if resumed and not path.is_file():
        why = "not scored: resumed from checkpoints written before the starting model was scored"
        logger.warning("start (test): %s", why)
        return None, {"scored": False, "reason": why}
    if reread:
        run = read_run(path)
    else:
        if resumed:
            logger.info("start (test): its run file was scored as %s, this run scores as %s: scored again",
                        file_precision or "an unrecorded precision", scoring_label(recipe, backend))
        with progress.stage("start (test)"):
            torch_precision = serve_for_test(recipe, inputs, built.ranker, backend)
            try:
                run = start_run(recipe, inputs, built, out, batch_size, torch_precision)
            finally:  # training goes on in torch
                if backend != "torch":
                    openvino.unserve(built.ranker)
    metrics, per_query = evaluate_run(inputs.test_qrels, run, e.metrics)
    if write and not reread:
        write_run(run, path, tag="ssft-start")
        write_per_query(per_query, out / per_query_file(START, split))
    logger.info("start (test, before training): %s", ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    return metrics, {"scored": True, "split": split}


def start_run(recipe: Recipe, inputs: RunInputs, built: BuiltRun, out: Path, batch_size: int | None = None,
              torch_precision: str | None = None) -> Run:
    """The untrained model's test run: full retrieval, or the first stage's top-``eval.depth`` reranked, in
    ``eval.precision`` and batches as the trained model's (``evaluate``), so that an unchanged model scores the same
    (``torch_precision``: what the torch side computes in when another runtime serves the transformer)."""
    e, ranker = recipe.eval, built.ranker
    torch_precision = torch_precision or e.precision
    was_training = ranker.training
    ranker.eval()
    try:
        if ranker.full_retrieval:
            queries = {q: inputs.dataset.queries[q] for q in inputs.test_qrels if q in inputs.dataset.queries}
            with precision.inference(ranker, torch_precision) as model:
                return retrieve(model, inputs.dataset, queries, e.depth, e.batch_size)
        first = top_k({q: inputs.test_first[q] for q in inputs.test_qrels if inputs.test_first.get(q)}, e.depth)
        pairs = PairDataset(first, e.depth, inputs.dataset)
        scorer = prediction_trainer(ranker, batch_size or e.batch_size, output_dir=out, precision=torch_precision)
        return pairs.to_run(scorer.score(pairs))
    finally:
        ranker.train(was_training)


def evaluate(recipe: Recipe, inputs: RunInputs, built: BuiltRun, trained: TrainedRun, out: Path,
             write: bool, backend: str = "torch") -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """metrics.json's content and run_info's evaluation part; run files and per-query metrics under ``out``
    (``write``: only the main process writes); the trained model scored on ``backend`` (eval.backend resolved)."""
    e, ranker = recipe.eval, built.ranker
    torch_precision = serve_for_test(recipe, inputs, ranker, backend)
    trained.trainer.precision = torch_precision  # the interpolation's validation scoring and the test split
    options: dict[str, Any] = {"alpha": interpolation_weight(recipe, inputs, trained)}
    common = dict(dataset=inputs.dataset, split=recipe.data.test_split, qrels=inputs.test_qrels,
                  first_stage=inputs.test_first, first_stage_name=inputs.test_name, depth=e.depth, metrics=e.metrics,
                  output_dir=out, write=write)
    if not ranker.full_retrieval:  # the trainer scores in eval.precision
        with progress.stage("test"):
            return rerank_and_report(score=trained.trainer.score, **common, **options)
    with precision.inference(ranker, torch_precision) as model:
        if e.fusion is not None:  # 003 Eq. 7: dense top-k ∪ first-stage top-k
            options["fusion_alpha"] = fusion_weight(recipe, inputs, model)
        with progress.stage("test"):
            return retrieve_and_report(ranker=model, batch_size=e.batch_size, **common, **options)


def interpolation_weight(recipe: Recipe, inputs: RunInputs, trained: TrainedRun) -> float | None:
    """``eval.interpolation``: the weight given, or (``auto``) the one tuned on the validation split."""
    alpha = recipe.eval.interpolation
    if alpha != "auto":
        return alpha
    pairs = trained.trainer.eval_dataset
    with progress.stage("interpolation tuning (validation)"):
        validation_run = pairs.to_run(trained.trainer.score(pairs))
    alpha = tune_alpha(validation_run, inputs.validation_first, inputs.validation_qrels, recipe.eval.selection_metric)
    logger.info("interpolation weight tuned on %s: alpha = %.2f", recipe.data.validation_split, alpha)
    return alpha


def fusion_weight(recipe: Recipe, inputs: RunInputs, ranker) -> float:
    """``eval.fusion``: 003 Eq. 7's α as given, or (``auto``) tuned on the validation split."""
    alpha = recipe.eval.fusion
    if alpha == "auto":
        with progress.stage("fusion tuning (validation)"):
            alpha = tune_fusion(ranker, inputs.dataset, inputs.validation_qrels, inputs.validation_first,
                                inputs.validation_depth, recipe.eval.selection_metric, recipe.eval.batch_size)
        logger.info("dense-sparse fusion weight tuned on %s: alpha = %g", recipe.data.validation_split, alpha)
    return float(alpha)


def run_info(recipe: Recipe, inputs: RunInputs, built: BuiltRun, trained: TrainedRun, evaluation: dict[str, Any],
             notes: list[str], started: float, extra: dict[str, Any]) -> dict[str, Any]:
    e, p, best = recipe.eval, built.parameters, trained.best
    info = {**evaluation, "trainable_parameters": p.trainable, "total_parameters": p.total,
            "trainable_parameters_per_tower": p.per_tower, "train_seconds": round(trained.train_seconds, 1),
            "wall_seconds": round(time.time() - started, 1), "train_loss": trained.train_loss,
            "best_validation": {"metric": e.selection_metric, "value": best.best_value, "epoch": best.best_epoch,
                                "candidates": ("epoch 0 (the starting model) and the trained epochs" if e.start
                                               else "the trained epochs only (eval.start: false)")},
            "start_selected": trained.start_selected, "weights_changed": trained.weights_changed,
            "validation_history": best.history,
            "train_loss_history": best.losses if trained.phases is None else None, "notes": notes,
            "dataset": dataset_identity(inputs.dataset), "data_warnings": inputs.dataset.warnings,
            "versions": versions()}  # the model card of an export names them
    if trained.phases is not None:
        info["hybrid_phases"] = trained.phases
    if trained.resumed_from:
        info["resumed_from"] = trained.resumed_from
    info.update({k: v for k, v in extra.items() if v})
    return info


def write_finished_run(out: Path, recipe: Recipe, results: dict, info: dict, default_checkpoints: bool) -> None:
    """run_info.json, curves.png, the model card, then metrics.json (its presence marks a finished run); the
    checkpoints that only served to resume go once the run is finished."""
    atomic_write_json(out / "run_info.json", info)
    write_curves(out, recipe, info)
    write_model_card(out, recipe, results, info)
    atomic_write_json(out / "metrics.json", results)
    if default_checkpoints:
        for folder in [*out.glob("checkpoint-*"), *out.glob("phase-*")]:
            shutil.rmtree(folder, ignore_errors=True)


def write_curves(out: Path, recipe: Recipe, info: dict) -> None:
    """curves.png: the training loss and every validation measure against epoch, the start as epoch 0, the selected
    epoch marked (``ssft.analysis.figures.plot_run_curves``). A figure that cannot be drawn costs the run nothing
    but a warning: the weights and metrics it took the training to make are still written."""
    title = f"{recipe.model.architecture} + {recipe.adapter.method} on {recipe.data.dataset} ({recipe.model.name})"
    try:
        plot_run_curves(run_curves(info, title), out / CURVES)
    except Exception as err:  # matplotlib's errors are many; the run's results matter more
        logger.warning("%s not written: %s: %s", CURVES, type(err).__name__, err)


def print_summary(recipe: Recipe, results: dict, info: dict, out: Path, started: float) -> None:
    e, best = recipe.eval, info["best_validation"]
    print()
    for note in info["notes"]:
        print(note)
    if best["value"] is not None:
        print(f"best validation {e.selection_metric} = {best['value']:.4f} at epoch {best['epoch']:g}"
              + ("" if e.start else " (among the trained epochs: eval.start false)"))
    after = (info.get("finished_validation") or {}).get(e.selection_metric)
    if after is not None:
        print(f"validation {e.selection_metric} of the weights handed back, after the adapter's last step "
              f"({'; '.join(info.get('finished') or [])}) = {after:.4f}")
    if info.get("weights_changed") is False and not info.get("start_selected"):
        print("WARNING: the trained weights are the starting model's, unchanged: this run did not fine-tune it")
    if info.get("start_selected"):
        print(f"WARNING: training never beat the starting model on validation {e.selection_metric}: this run hands "
              "back the STARTING weights (epoch 0)")
    print(format_table(results, e.metrics))
    print(f"trainable parameters {info['trainable_parameters']:,} / {info['total_parameters']:,}; train "
          f"{info['train_seconds']:.0f} s, total {time.time() - started:.0f} s; outputs in {out}")


def write_model_card(out: Path, recipe: Recipe, results, info) -> None:
    metrics = recipe.eval.metrics
    lines = [
        f"# ssft {recipe.model.architecture} ranker: {recipe.model.name} + {recipe.adapter.method}",
        "",
        f"Trained with `ssft-train` on {recipe.data.dataset} ({recipe.data.train_split}), loss `{recipe.loss.name}`, "
        f"seed {recipe.seed}." + (" The weights are the starting model's, unchanged: the run did not fine-tune them."
                                  if not info.get("weights_changed", True) or info.get("start_selected") else ""),
        f"Trainable parameters: {info['trainable_parameters']:,} of {info['total_parameters']:,}.",
        "",
        "| run | " + " | ".join(metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for name, vals in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{vals[m]:.4f}" for m in metrics) + " |")
    lines += ["", "Load: `ssft.models.load_ranker('model')`; rerank: `ssft-rerank RUN_DIR --data ... --first-stage ... "
                  "--split ...`.", ""]
    lines += [f"- {n}" for n in info["notes"]]
    atomic_write_text(out / "README.md", "\n".join(lines) + "\n")
