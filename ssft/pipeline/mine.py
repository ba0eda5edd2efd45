"""Mine hard negatives for training queries: what ssft-mine and ``ssft.mine`` run.

Retrieves the top-``depth`` documents of every judged query of the split with a miner — a dense model over the whole
corpus with faiss (an ssft run / model folder of architecture 'dense', a loaded dense ranker, or a sentence embedder by
hub id or folder with ``pooling``), or BM25 (the index cached under $SSFT_CACHE) — and keeps, per (query, judged
positive), the candidates that pass the false-negative filters (``ssft.eval.mining``). A ``teacher`` run rescores the
kept pairs. Both models serve at ``precision`` on ``backend`` (``ssft.models.interop.openvino.serve``, as every
serving path: int8 calibrated on the queries and corpus the miner encodes, and on the pairs the teacher rescores).
Writes the dataset (.jsonl, ``form`` ids or scored) and its ``.mining.json`` atomically, after everything
else succeeded, under the output-file rule of ``ssft.core.run_folder`` (a lock file beside it keeps out a second
writer; an existing pair is replaced only with ``overwrite`` and only when its .mining.json says ssft-mine wrote it)."""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ssft.core import precision as precisions
from ssft.core import progress
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_json, atomic_write_text
from ssft.core.run_folder import OutputFile, resolved
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset
from ssft.eval.mining import MiningFilters, mine, teacher_run, to_records
from ssft.eval.retrieve import retrieve
from ssft.firststage.bm25 import BM25
from ssft.models.base import Ranker, load_ranker, saved_model_folder
from ssft.models.bi import score_candidates
from ssft.models.frozen import dense_reference, load_dense_model
from ssft.models.interop import openvino
from ssft.pipeline.sources import dataset_sources, model_dir, whole_numbers
from ssft.training.prediction import prediction_trainer


def mine_negatives(data: str, output: Path, *, split: str = "train", model: str | Path | Ranker | None = None,
                   depth: int = 100, range_min: int = 1, range_max: int | None = None,
                   absolute_margin: float | None = None, relative_margin: float | None = None,
                   max_score: float | None = None, num_negatives: int | None = None, min_negatives: int = 1,
                   min_relevance: int = 1, form: str | None = None, teacher: Path | Ranker | None = None,
                   pooling: str = "mean",
                   max_length: int = 256, query_max_length: int = 64, batch_size: int = 64,
                   precision: str = precisions.DEFAULT, backend: str = openvino.DEFAULT_BACKEND, overwrite: bool = False,
                   trust_remote_code: bool = False, command: list[str] | None = None) -> dict[str, Any]:
    """Mine (module docstring) with BM25 when ``model`` is None; returns what ``.mining.json`` holds."""
    whole_numbers(depth=depth, batch_size=batch_size, max_length=max_length, query_max_length=query_max_length)
    if output.suffix != ".jsonl":
        raise SsftError(f"--output: {output}: expected a .jsonl file")
    if form not in (None, "ids", "scored"):
        raise SsftError(f"--form: expected ids or scored, got '{form}'")
    if output.is_symlink() and output.exists():
        output = resolved(output)  # a link to an earlier output: that file is the one replaced (the link stays)
    info_path = output.with_suffix(".mining.json")
    named = (("--model", None if isinstance(model, Ranker) else model),
             ("--teacher", None if isinstance(teacher, Ranker) else teacher))
    sources = tuple((Path(p), f"the {flag} model being read") for flag, p in named
                    if p is not None and Path(p).exists()) + dataset_sources(data, "the dataset folder being mined")
    # never into what is read; an existing pair replaced only with overwrite and only when ssft-mine wrote it
    target = OutputFile(output, "ssft-mine", lambda: not_mined(output, info_path), companions=(info_path,),
                        sources=sources, overwrite=overwrite)
    target.check()
    form = form or ("scored" if teacher else "ids")
    filters = MiningFilters(range_min, range_max, absolute_margin, relative_margin, max_score, num_negatives,
                            min_negatives)
    filters.check()
    precision = precisions.check(precision, "--precision")
    openvino.check_serving(backend, precision)
    started = time.time()
    dataset = load_dataset(data)
    target.add_sources((dataset.path, "the dataset folder being mined"))
    qrels = dataset.qrels(split)
    teacher_model = _teacher(teacher, trust_remote_code) if teacher else None  # a bad teacher fails first
    with target:
        target.claim()  # one writer: a second ssft-mine onto this file is refused from here on
        served: dict[str, str] = {}  # how each model scored: .mining.json records it
        if model is None:
            retrieve_fn, score_fn, miner, index = _bm25_miner(dataset)
        else:
            mined = [dataset.queries[q] for q in sorted(qrels) if q in dataset.queries]
            (retrieve_fn, score_fn, miner, served["miner"]), index = _dense_miner(
                model, dataset, mined, pooling, max_length, query_max_length, batch_size, trust_remote_code, precision,
                backend), None
        with progress.stage("mining"):
            rows, report = mine(retrieve_fn, score_fn, dataset.queries, qrels, depth, filters, min_relevance)
        if not rows:
            raise SsftError(f"ssft-mine: the filters left no row with {min_negatives} negative(s) or more "
                            f"({report.as_dict()['removed']}); loosen them")
        teacher_scores = None
        if teacher_model is not None:
            teacher_scores, served["teacher"] = _teacher_scores(teacher_model, rows, dataset, precision, backend,
                                                                batch_size)
        records = to_records(rows, form, teacher_scores)
        info = {"tool": "ssft-mine", "dataset": data, "split": split, "miner": miner, "depth": depth, "form": form,
                "teacher": _teacher_name(teacher), "served": served, "filters": filters.__dict__ | {
                    "range_max": filters.range_max or depth}, **report.as_dict(),
                "seconds": round(time.time() - started, 1), "command": command or ["ssft-mine"]}
        if index is not None:
            index.save()  # the BM25 index built now: cached for the next run
        output.parent.mkdir(parents=True, exist_ok=True)
        # the mark first (it says ssft-mine wrote the pair), an earlier dataset of the pair removed before it: a kill
        # between leaves a .mining.json without its dataset, never a dataset described by another run's .mining.json
        output.unlink(missing_ok=True)
        atomic_write_json(info_path, info)
        atomic_write_text(output, "".join(json.dumps(r) + "\n" for r in records))
    return {**info, "output": str(output)}


def mining_summary(info: dict[str, Any]) -> str:
    """The line ssft-mine prints of a result of ``mine_negatives``."""
    removed = ", ".join(f"{k} {v}" for k, v in sorted(info["removed"].items())) or "nothing"
    return (f"ssft-mine: {info['rows']} rows of {info['queries']} queries, {info['negatives']} negatives "
            f"({info['negatives_per_row']} per row) from {info['candidates']} candidates ({info['judged_excluded']} "
            f"judged documents excluded first); removed: {removed}; {info['rows_dropped_too_few_negatives']} rows "
            f"dropped -> {info['output']}")


def not_mined(output: Path, info_path: Path) -> str | None:
    """What shows that ssft-mine did not write the files at ``output`` / ``info_path`` (None: it did): its
    ``.mining.json`` (``tool``, or an older one's ``command``) is the mark."""
    if not info_path.exists():
        return f"no {info_path.name} beside it"
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{info_path.name} is not ssft-mine's JSON"
    command = info.get("command") if isinstance(info, dict) else None
    if not isinstance(info, dict) or not (info.get("tool") == "ssft-mine" or (
            isinstance(command, list) and command[:1] == ["ssft-mine"])):
        return f"{info_path.name} does not name ssft-mine"
    return None


def _bm25_miner(dataset):
    bm25 = BM25(dataset, save=False)

    def score_positives(wanted: dict[str, list[str]]) -> dict[str, dict[str, float]]:
        return {q: dict(zip(docs, bm25.scores_of(dataset.queries[q], docs)))
                for q, docs in progress.track(wanted.items(), "BM25 scores of the positives", unit="queries")}

    return bm25.search, score_positives, "bm25", bm25


def _dense_miner(model: str | Path | Ranker, dataset, mined_queries: list[str], pooling: str, max_length: int,
                 query_max_length: int, batch_size: int, trust_remote_code: bool, precision: str,
                 backend: str) -> tuple[Callable, Callable, str, str]:
    folder = None if isinstance(model, Ranker) else saved_model_folder(model)
    if isinstance(model, Ranker) or folder is not None:
        ranker = model if isinstance(model, Ranker) else load_ranker(folder, trust_remote_code=trust_remote_code)
        if not ranker.full_retrieval:
            raise SsftError(f"--model: {model if folder is not None else 'the model'} is a '{ranker.architecture}' "
                            f"model; mining over the corpus needs a dense model (or use --bm25)")
        miner = f"dense: {folder if folder is not None else ranker.spec.get('base_model')}"
    else:
        ranker = load_dense_model(dense_reference(str(model), pooling, max_length, query_max_length),
                                  trust_remote_code=trust_remote_code)
        miner = f"dense: {model} ({pooling} pooling, {max_length} / {query_max_length} tokens)"
    ranker.eval()
    for p in ranker.parameters():
        p.requires_grad_(False)
    # int8: calibrated on the queries it mines for and the corpus it encodes, as ssft-eval calibrates a retrieval
    # (the texts gathered only then)
    ranker, _, _ = openvino.serve(
        ranker, backend, precision,
        lambda: openvino.corpus_calibration(mined_queries, [d.full_text for d in dataset.corpus.values()]),
        inputs=len(mined_queries) + len(dataset.corpus))

    def retrieve_fn(queries: dict[str, str], depth: int):
        return retrieve(ranker, dataset, queries, depth, batch_size)

    def score_positives(wanted: dict[str, list[str]]):
        return score_candidates(ranker, wanted, dataset.queries, dataset, batch_size)

    return retrieve_fn, score_positives, miner, precisions.served_as(ranker)


def _teacher(teacher: Path | Ranker, trust_remote_code: bool) -> Ranker:
    ranker = teacher if isinstance(teacher, Ranker) else load_ranker(model_dir(teacher), trust_remote_code=trust_remote_code)
    ranker.eval()
    return ranker


def _teacher_scores(teacher: Ranker, rows: list, dataset, precision: str, backend: str,
                    batch_size: int) -> tuple[dict[str, dict[str, float]], str]:
    """The teacher's scores of the kept pairs, served at ``precision`` on ``backend`` (int8: calibrated on those
    pairs), and how it was served."""
    candidates = teacher_run(rows)
    pairs = PairDataset(candidates, 10 ** 9, dataset)
    teacher, _, torch_precision = openvino.serve(  # int8: the pair texts gathered only then
        teacher, backend, precision,
        lambda: [(dataset.queries[q], dataset.corpus[d].full_text) for q, docs in candidates.items() for d in docs],
        inputs=sum(len(docs) for docs in candidates.values()))
    with progress.stage("mining: teacher scores"):
        scores = pairs.to_run(prediction_trainer(teacher, batch_size, None, torch_precision).score(pairs))
    return scores, precisions.served_as(teacher)


def _teacher_name(teacher: Path | Ranker | None) -> str | None:
    """How .mining.json records the teacher: its path, or the loaded checkpoint's name."""
    if teacher is None or not isinstance(teacher, Ranker):
        return None if teacher is None else str(teacher)
    return str(teacher.spec.get("base_model") or teacher.architecture)


__all__ = ["mine_negatives", "mining_summary", "not_mined"]
