"""Rank without relevance judgements: score a first stage's candidates for queries that have no qrels and write the
TREC run, nothing evaluated. What ``ssft-rerank`` without ``--split`` runs (and ``ssft.rank``).

The queries are the dataset's own (every query the first stage has candidates for) or a ``--queries`` file of raw
texts (``ssft.data.query_file``: queries.jsonl, ``id<TAB>text`` lines, or one text a line, numbered); the
documents' texts come from the dataset's corpus. The first stage is ``bm25`` (retrieved now for those queries) or a
TREC run file whose query ids are those of the queries. The output folder follows ssft-rerank's rule
(``ssft.core.run_folder``), ``run.trec`` marking a finished result (written last, atomically): an earlier one is
replaced only with ``overwrite``."""
from __future__ import annotations

import logging
from pathlib import Path

from ssft.core import precision as precisions
from ssft.core.errors import SsftError
from ssft.core.run_folder import RERANK_OUTPUTS
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset
from ssft.data.query_file import read_query_file
from ssft.data.trec import Run, top_k, write_run
from ssft.firststage.runs import first_stage_run, save_indexes
from ssft.models.base import Ranker
from ssft.models.interop import openvino
from ssft.pipeline.sources import ModelInput, dataset_sources, result_folder, whole_numbers
from ssft.training.prediction import prediction_trainer

logger = logging.getLogger("ssft")


def rank_queries(model: str | Path | Ranker, data: str, first_stage: str, output: Path | None = None, *,
                 queries_file: str | Path | None = None, depth: int = 100, batch_size: int = 64,
                 overwrite: bool = False, trust_remote_code: bool = False, merge_lora: bool = False,
                 precision: str = precisions.DEFAULT, backend: str = openvino.DEFAULT_BACKEND) -> Run:
    """Rank ``first_stage``'s top-``depth`` candidates of each query with ``model`` (module docstring); returns the
    run (query id → document id → score) and, with ``output``, writes it as ``output/run.trec``."""
    whole_numbers(depth=depth, batch_size=batch_size)
    precision = precisions.check(precision, "--precision")
    openvino.check_serving(backend, precision)
    source = ModelInput(model)
    sources = source.sources + dataset_sources(data)
    for path, what in ((first_stage, "the first-stage run file being read"), (queries_file, "the --queries file")):
        if path is not None and Path(path).exists():
            sources += ((Path(path), what),)
    folder = (result_folder(output, "ssft-rerank", RERANK_OUTPUTS, overwrite, sources, finished="run.trec")
              if output is not None else None)
    dataset = load_dataset(data)
    if folder is not None:
        folder.add_sources((dataset.path, "the dataset folder being read"))
    queries = read_query_file(queries_file) if queries_file is not None else dict(dataset.queries)
    where = f"--queries {queries_file}" if queries_file is not None else f"{dataset.path} (queries)"
    indexes: dict = {}
    _, run = first_stage_run(first_stage, dataset, indexes, queries, depth)
    candidates = top_k({q: docs for q, docs in run.items() if q in queries and docs}, depth)
    if not candidates:
        if any(q in queries for q in run) or first_stage == "bm25":  # the queries are there; no document matched
            raise SsftError(f"{first_stage}: found no candidate document for any of the {len(queries)} queries of "
                            f"{where} (no query shares a word with the corpus); nothing to rank")
        raise SsftError(f"{first_stage}: none of its query ids is a query of {where}")
    if queries_file is not None and len(candidates) < len(queries):
        logger.warning("the first stage has candidates for %d of the %d queries of %s; the others are not ranked",
                       len(candidates), len(queries), queries_file)
    ranker = source.load(trust_remote_code)
    if merge_lora:
        ranker.merge_adapter()
    pairs = PairDataset(candidates, depth, dataset, queries)
    # as ssft-rerank with a split: int8 calibrated on the pairs being ranked
    ranker, backend, precision = openvino.serve(
        ranker, backend, precision, lambda: [(queries[q], dataset.corpus[d].full_text) for q, d in pairs.pairs],
        inputs=len(pairs))
    logger.info("ranking %d pairs (%d queries, top-%d of %s) on %s, no qrels: nothing is evaluated", len(pairs),
                len(candidates), depth, first_stage, backend)
    if folder is None:
        return pairs.to_run(prediction_trainer(ranker, batch_size, None, precision).score(pairs))
    with folder:  # from here on, the output folder is written (and locked); run.trec goes first, comes back last
        folder.claim()
        if overwrite:
            folder.clear()
        (output / "run.trec").unlink(missing_ok=True)
        ranked = pairs.to_run(prediction_trainer(ranker, batch_size, output, precision).score(pairs))
        write_run(ranked, output / "run.trec", tag="ssft")
        save_indexes(indexes)  # a BM25 index built now, cached once the result is complete
    return ranked


__all__ = ["rank_queries"]
