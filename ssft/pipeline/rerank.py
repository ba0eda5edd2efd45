"""Rerank a first stage (BM25, or a TREC run file) of a dataset split with a saved or loaded ranker: what ssft-rerank
and ``ssft.evaluate`` run. Every input is checked, loaded and refused before the output folder is touched; with an
``output`` folder (the output-folder rule of ``ssft.core.run_folder``) run.trec, per-query metrics and metrics.json
are written there (metrics.json last: its presence marks a finished result); without one nothing is written."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ssft.core import precision as precisions
from ssft.core.arguments import string_list
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_json
from ssft.core.output_names import run_file
from ssft.core.run_folder import RERANK_OUTPUTS, RESULT_MARKERS
from ssft.data.beir import load_dataset
from ssft.eval import rerank as reranking  # called through the module: tests interrupt it there
from ssft.eval.metrics import parse_measures
from ssft.firststage.runs import first_stage_run, report_name, save_indexes
from ssft.models.base import Ranker
from ssft.models.interop import openvino
from ssft.pipeline.rank import rank_queries
from ssft.pipeline.sources import ModelInput, dataset_sources, result_folder, whole_numbers
from ssft.training.prediction import prediction_trainer

logger = logging.getLogger("ssft")
DEFAULT_METRICS = ("P@20", "nDCG@5", "nDCG@10", "nDCG@20", "RR@10", "R@100")


def metric_list(metrics: str | Sequence[str] | None, where: str = "--metrics") -> list[str]:
    """``"nDCG@10,R@100"`` or a list of names (None: ``DEFAULT_METRICS``), each checked (one line naming ``where``)."""
    names = string_list(DEFAULT_METRICS if metrics is None else metrics, where)
    parse_measures(names, where)
    return names


def rerank(model: str | Path | Ranker, data: str, first_stage: str, split: str | None, output: Path | None = None, *,
           depth: int = 100, metrics: str | Sequence[str] | None = None, batch_size: int = 64, overwrite: bool = False,
           trust_remote_code: bool = False, merge_lora: bool = False, queries: str = "judged",
           precision: str = precisions.DEFAULT, backend: str | None = None,
           queries_file: str | Path | None = None) -> dict[str, dict[str, float]]:
    """Rerank ``first_stage``'s top-``depth`` of ``data``'s ``split`` with ``model``; returns metrics.json's content
    (``{split: {...}, first_stage_name: {...}}``). ``queries``: average over every judged query of the split, a query
    the run lacks scoring 0 (``judged``, as ssft-train does), or only over the run's queries (``run``). ``backend``:
    torch, openvino or auto (``ssft.models.interop.openvino``; None: auto); int8 runs on openvino, calibrated on pairs
    of the first stage being reranked. ``split`` None: no qrels, nothing evaluated -- the queries
    (the dataset's, or those of ``queries_file``) are ranked and the run written (``ssft.pipeline.rank``); returns ``{}``."""
    backend = backend or openvino.DEFAULT_BACKEND
    if split is None:
        if metrics is not None:
            raise SsftError("--metrics: nothing is evaluated without --split (no qrels); drop --metrics or name a split")
        rank_queries(model, data, first_stage, output, queries_file=queries_file, depth=depth, batch_size=batch_size,
                     overwrite=overwrite, trust_remote_code=trust_remote_code, merge_lora=merge_lora,
                     precision=precision, backend=backend)
        return {}
    if queries_file is not None:
        raise SsftError(f"--queries {queries_file}: with --split it is judged or run; a file of queries is ranked "
                        f"without --split (no qrels)")
    whole_numbers(depth=depth, batch_size=batch_size)
    precision = precisions.check(precision, "--precision")
    openvino.check_serving(backend, precision)
    metrics = metric_list(metrics)
    if not isinstance(first_stage, (str, Path)):
        raise SsftError(f"--first-stage: expected bm25 or a TREC run file, got {type(first_stage).__name__}")
    first_stage = str(first_stage)
    if queries not in ("judged", "run"):
        raise SsftError(f"--queries: expected judged or run, got '{queries}'")
    source = ModelInput(model)
    sources = source.sources + dataset_sources(data)
    if Path(first_stage).exists():
        sources += ((Path(first_stage), "the first-stage run file being read"),)
    # finished: metrics.json, or run.trec alone (a ranking without qrels, which has no metrics.json)
    folder = (result_folder(output, "ssft-rerank", RERANK_OUTPUTS, overwrite, sources, finished=RESULT_MARKERS)
              if output is not None else None)
    dataset = load_dataset(data)
    if folder is not None:
        folder.add_sources((dataset.path, "the dataset folder being read"))
    indexes: dict = {}
    name, first, qrels = _candidates(first_stage, dataset, split, depth, queries, indexes)
    ranker = source.load(trust_remote_code)
    if merge_lora:
        ranker.merge_adapter()
    pairs = [(dataset.queries[q], dataset.corpus[d].full_text) for q in sorted(first) if q in dataset.queries
             for d in first[q] if d in dataset.corpus]
    # on OpenVINO the transformer runs there (int8: calibrated on the pairs reranked); the head stays float32 torch
    ranker, backend, precision = openvino.serve(ranker, backend, precision, pairs, inputs=len(pairs))
    logger.info("scoring as %s", precisions.served_as(ranker))
    settings = dict(dataset=dataset, split=split, qrels=qrels, first_stage=first, first_stage_name=name, depth=depth,
                    metrics=metrics)
    if folder is None:
        results, _ = reranking.rerank_and_report(score=prediction_trainer(ranker, batch_size, None, precision).score,
                                       output_dir=Path("."), write=False, **settings)
        return results
    with folder:  # from here on, the output folder is written (and locked)
        folder.claim()
        if overwrite:
            folder.clear()
        folder.mark_unfinished()
        (output / "run.trec").unlink(missing_ok=True)  # a finished result's other mark: gone until this one is done
        results, _ = reranking.rerank_and_report(score=prediction_trainer(ranker, batch_size, output, precision).score,
                                       output_dir=output, **settings)
        # the output contract names the model's run plainly run.trec
        (output / run_file(split, split)).replace(output / "run.trec")
        atomic_write_json(output / "metrics.json", results)  # last: its presence marks a finished result
        save_indexes(indexes)  # a BM25 index built now, cached once the result is complete
    return results


def _candidates(first_stage: str, dataset, split: str, depth: int, queries: str, indexes: dict):
    """(the first stage's row name, its run, the qrels averaged over): ``queries`` judged keeps every judged query (a
    query the run lacks scores 0, said once), run keeps the run's."""
    qrels = dataset.qrels(split)
    name, first = first_stage_run(first_stage, dataset, indexes, {q: dataset.queries[q] for q in qrels}, depth)
    covered = sum(1 for q in qrels if first.get(q))
    if not covered:
        raise SsftError(f"{first_stage}: no query of the run is in {dataset.path}/qrels/{split}")
    if queries == "run":
        qrels = {q: rels for q, rels in qrels.items() if q in first}
    elif covered < len(qrels):
        logger.warning("the first stage has candidates for %d of the %d judged queries of '%s'; the other %d score 0 "
                       "(--queries run averages over the run's queries only)", covered, len(qrels), split,
                       len(qrels) - covered)
    return report_name(name, split), first, qrels


__all__ = ["DEFAULT_METRICS", "metric_list", "rerank"]
