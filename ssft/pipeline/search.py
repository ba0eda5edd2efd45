"""Retrieve for queries without qrels: your own queries (a ``--queries`` file) over a whole corpus with a dense or
ColBERT model, nothing evaluated. What ``ssft-retrieve --queries FILE`` without ``--split`` runs.

The corpus is ``--corpus`` (a dataset name, a BEIR folder, a ``.jsonl`` / ``.tsv`` file; ``ssft.data.corpus_file``)
indexed now in memory, or the index in ``--index-dir`` (``ssft.index(..., path=...)`` or ``ssft-encode``: the same
folder, checked against the model and its corpus); the queries a ``--queries`` file (``ssft.data.query_file``).
The output folder follows ssft-retrieve's rule (``ssft.core.run_folder``): ``results.jsonl`` (each query's text and
top hits with ids, scores and titles, to read) first, then ``run.trec``, whose presence marks a finished result
(written last, atomically): an earlier one is replaced only with ``overwrite``."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from ssft.core import precision as precisions
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_file
from ssft.core.run_folder import RETRIEVE_OUTPUTS
from ssft.data.query_file import read_query_file
from ssft.data.trec import Run, write_run
from ssft.models.base import Ranker
from ssft.models.interop import openvino
from ssft.pipeline.corpus_index import DEFAULT_TOKEN_K, Index, build_index
from ssft.pipeline.sources import ModelInput, dataset_sources, result_folder, whole_numbers

logger = logging.getLogger("ssft")

RESULTS_FILE = "results.jsonl"
RESULTS_SHOWN = 10  # hits per query in results.jsonl (run.trec holds all --depth)
SNIPPET = 200  # characters of a hit's text in results.jsonl


def search_queries(model: str | Path | Ranker, queries_file: str | Path, output: Path | None = None, *,
                   corpus: str | None = None, index_dir: Path | None = None, depth: int = 100, index: str = "flat",
                   batch_size: int = 64, precision: str | None = None, backend: str | None = None,
                   token_k: int | None = None, overwrite: bool = False, trust_remote_code: bool = False) -> Run:
    """Retrieve the top-``depth`` documents of ``corpus`` (or of the index in ``index_dir``) for every query of
    ``queries_file`` (module docstring); returns the run and, with ``output``, writes it there with results.jsonl."""
    whole_numbers(depth=depth, batch_size=batch_size)
    if token_k is not None:
        whole_numbers(token_k=token_k)
    if (corpus is None) == (index_dir is None):
        raise SsftError("--corpus: name the corpus searched (a dataset, a BEIR folder, a .jsonl / .tsv file), or an "
                        "--index-dir built for it, not both" if corpus is not None else
                        "--corpus: retrieving your own --queries without --split needs --corpus (a dataset, a BEIR "
                        "folder, a .jsonl / .tsv file) or --index-dir")
    if precision is not None:
        precision = precisions.check(precision, "--precision")
    if backend is not None:
        openvino.check_serving(backend, precision)
    source = ModelInput(model)
    sources = source.sources + ((Path(queries_file), "the --queries file"),)
    if corpus is not None:
        sources += (((Path(corpus), "the corpus file being read"),) if Path(corpus).is_file()
                    else dataset_sources(corpus))
    if index_dir is not None:
        sources += ((index_dir, "the index folder being read (--index-dir)"),)
    folder = (result_folder(output, "ssft-retrieve", RETRIEVE_OUTPUTS, overwrite, sources, finished="run.trec")
              if output is not None else None)
    queries = read_query_file(queries_file)
    if index_dir is not None:
        searcher = Index.load(index_dir, source.ranker if source.ranker is not None else source.path,
                              precision=precision, backend=backend, token_k=token_k or DEFAULT_TOKEN_K)
    else:
        searcher = build_index(model, corpus, None, kind=index, batch_size=batch_size,
                               precision=precision or precisions.DEFAULT, backend=backend,
                               token_k=token_k or DEFAULT_TOKEN_K, trust_remote_code=trust_remote_code)
    qids = list(queries)
    hits = searcher.search([queries[q] for q in qids], top_k=depth, batch_size=batch_size)
    run: Run = {q: {str(h["corpus_id"]): float(h["score"]) for h in row} for q, row in zip(qids, hits)}
    logger.info("retrieved the top-%d of %d documents for %d queries, no qrels: nothing is evaluated", depth,
                len(searcher), len(qids))
    if folder is None:
        return run
    with folder:  # run.trec, which marks a finished result, goes first and comes back last
        folder.claim()
        if overwrite:
            folder.clear()
        (output / "run.trec").unlink(missing_ok=True)
        lines = []
        for qid, row in zip(qids, hits):
            shown = []
            for rank, hit in enumerate(row[:RESULTS_SHOWN], 1):
                document = searcher.document(hit["corpus_id"])
                shown.append({"rank": rank, "corpus_id": str(hit["corpus_id"]), "score": round(float(hit["score"]), 6),
                              "title": document["title"], "text": document["text"][:SNIPPET]})
            lines.append(json.dumps({"query_id": qid, "query": queries[qid], "hits": shown}, ensure_ascii=False))
        text = "".join(line + "\n" for line in lines)
        atomic_write_file(output / RESULTS_FILE, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        tag = "ssft-colbert" if searcher.late else "ssft-dense"
        write_run(run, output / "run.trec", tag=tag)
    return run


__all__ = ["RESULTS_FILE", "search_queries"]
