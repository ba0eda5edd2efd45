"""Full retrieval over a corpus with a dense or a ColBERT model: what ssft-retrieve and ``ssft.retrieve`` run.

The corpus is encoded with the document tower into a faiss index (or read from the index ssft-encode built in
``index_dir``), the top-``depth`` documents of every query of the split retrieved and evaluated; ``fusion`` also runs
BM25 and fuses both (003 Eq. 7, ``ssft.eval.retrieve``). A ColBERT model searches a faiss index over the corpus's
token vectors for candidates and scores them by exact MaxSim (``ssft.eval.colbert_index``; ``token_k`` document
tokens fetched per query token). Every flag is checked and the output folder refused before
anything is encoded; with an ``output`` folder run.trec, per-query metrics and metrics.json are written there, without
one nothing is written."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ssft.core import precision as precisions
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_json
from ssft.core.output_names import per_query_file, run_file
from ssft.core.run_folder import RESULT_MARKERS, RETRIEVE_OUTPUTS
from ssft.data.beir import load_dataset
from ssft.data.trec import write_run
from ssft.eval.colbert_index import DEFAULT_TOKEN_K, load_late_index, memory_late_index
from ssft.eval.index import load_index
from ssft.eval.metrics import evaluate_run, parse_measures, write_per_query
from ssft.eval.retrieve import INDEX_KINDS, corpus_vectors, retrieve, tune_fusion, write_fusion
from ssft.firststage.bm25 import BM25
from ssft.models.base import Ranker
from ssft.models.corpus import multi_vector
from ssft.models.interop import openvino
from ssft.pipeline.corpus_index import check_index_model
from ssft.pipeline.rerank import metric_list
from ssft.pipeline.sources import ModelInput, dataset_sources, result_folder, whole_numbers
from ssft.teachers.dense import load_teacher, teacher_reference


def parse_fusion(value: str | None, tune_split: str | None) -> float | str | None:
    """--fusion: None, 'auto' (needs --tune-split), or a weight >= 0."""
    if value is None:
        if tune_split is not None:
            raise SsftError("--tune-split is for --fusion auto")
        return None
    if value == "auto":
        if not tune_split:
            raise SsftError("--fusion auto tunes the weight on another split: give --tune-split (e.g. dev)")
        return "auto"
    try:
        alpha = float(value)
    except ValueError:
        raise SsftError(f"--fusion: expected a weight >= 0 or 'auto', got '{value}'") from None
    if not alpha >= 0:
        raise SsftError(f"--fusion: expected a weight >= 0 or 'auto', got '{value}'")
    return alpha


def retrieve_corpus(model: str | Path | Ranker, data: str, split: str, output: Path | None = None, *, depth: int = 100,
                    index: str = "flat", index_dir: Path | None = None, passage_words: int | None = None,
                    passage_stride: int | None = None, metrics: str | Sequence[str] | None = None,
                    fusion: str | None = None, tune_split: str | None = None, tune_metric: str = "nDCG@10",
                    documents_from: str | None = None, teacher_pooling: str = "mean", batch_size: int = 64,
                    precision: str | None = None, backend: str | None = None, overwrite: bool = False,
                    trust_remote_code: bool = False,
                    on_tuned: Any = None, token_k: int | None = None) -> dict[str, dict[str, float]]:
    """Retrieve and evaluate (module docstring); returns metrics.json's content. ``precision`` None: the index's when
    ``index_dir`` is given, else auto; ``backend`` None: the index's, else auto (int8 runs on openvino, calibrated on
    the split's queries and the corpus). ``on_tuned(alpha)`` is told the weight ``fusion='auto'``
    picked. ``token_k`` (ColBERT only): document tokens fetched per query token (default ``DEFAULT_TOKEN_K``)."""
    asked, asked_backend = precision, backend
    precision, backend, fusion = _checked_flags(depth, batch_size, token_k, precision, backend, index, index_dir,
                                                passage_words, fusion, tune_split)
    # the output folder is checked after the flags, before anything is loaded; never what is read
    source = ModelInput(model)
    folder = _result_folder(source, data, index_dir, documents_from, output, overwrite)
    metrics = metric_list(metrics)
    if fusion == "auto":
        parse_measures([tune_metric], "--tune-metric")
    dataset = load_dataset(data)
    if folder is not None:
        folder.add_sources((dataset.path, "the dataset folder being read"))
    qrels = dataset.qrels(split)
    tune_qrels = dataset.qrels(tune_split) if fusion == "auto" else None
    ranker = source.load(trust_remote_code)
    late = multi_vector(ranker)
    _check_ranker(ranker, source.name, late, token_k, documents_from)
    if documents_from:
        ranker.inherit_documents(load_teacher(teacher_reference(documents_from, teacher_pooling,
                                                                ranker.spec["max_length"], ranker.spec["query_max_length"]),
                                              trust_remote_code=trust_remote_code))
    queries = {q: dataset.queries[q] for q in qrels if q in dataset.queries}
    saved = doc_vectors = None
    if index_dir is not None:  # refused when the dataset is not the corpus indexed
        saved = (load_late_index(index_dir, dataset, token_k or DEFAULT_TOKEN_K) if late
                 else load_index(index_dir, dataset=dataset))
        index_backend, index_precision = precisions.parse_served(saved.manifest["precision"])
        # the queries served as the index was encoded, unless told otherwise (int8 asked of a torch index: OpenVINO,
        # int8's only backend); its passages always
        precision = asked or index_precision
        if not asked_backend:
            backend = "auto" if precision == "int8" and index_backend == "torch" else index_backend
        passage_words, passage_stride = (saved.manifest.get("settings", {}).get(key)
                                         for key in ("passage_words", "passage_stride"))
        check_index_model(ranker, saved.manifest, index_dir, late)  # the same model, however its queries are served
    ranker = _served(ranker, backend, precision, dataset, queries, encoding=saved is None)
    if saved is None and late:  # the corpus's token vectors encoded now, indexed in memory
        saved = memory_late_index(ranker, dataset, index, batch_size, passage_words, passage_stride,
                                  token_k=token_k or DEFAULT_TOKEN_K)
    elif saved is None:
        doc_vectors = corpus_vectors(ranker, dataset, batch_size, passage_words, passage_stride)
    run = retrieve(ranker, dataset, queries, depth, batch_size, index, passage_words, passage_stride,
                   doc_vectors=doc_vectors, saved_index=saved)
    aggregate, per_query = evaluate_run(qrels, run, metrics)
    results = {split: aggregate}

    def fuse(info: dict, out: Path | None) -> None:
        if fusion is not None:
            _fuse(ranker, dataset, qrels, tune_qrels, queries, run, fusion, split, metrics, results, info, out, depth,
                  tune_split, tune_metric, batch_size, index, passage_words, passage_stride, doc_vectors, saved, on_tuned)

    if folder is None:
        fuse({}, None)
        return results
    _write_outputs(folder, output, overwrite, fuse, run, per_query, split, "ssft-colbert" if late else "ssft-dense",
                   results, {"tuned_on": tune_split, "depth": depth})
    return results


def _write_outputs(folder, output: Path, overwrite: bool, fuse, run, per_query, split: str, tag: str,
                   results: dict, fusion_context: dict) -> None:
    """The output folder written (and locked): metrics.json is marked unfinished first and comes back last."""
    with folder:
        folder.claim()
        if overwrite:
            folder.clear()
        folder.mark_unfinished()
        info: dict = {}
        fuse(info, output)  # BM25 and the fused runs beside the model's, when asked for
        write_run(run, output / "run.trec", tag=tag)
        write_per_query(per_query, output / per_query_file(split, split))
        if info:
            atomic_write_json(output / "fusion.json", {**info, **fusion_context})
        atomic_write_json(output / "metrics.json", results)


def _checked_flags(depth, batch_size, token_k, precision, backend, index, index_dir, passage_words, fusion,
                   tune_split) -> tuple[str, str, float | str | None]:
    """The flags checked before anything is read: (precision, backend, fusion) as asked or their defaults."""
    whole_numbers(depth=depth, batch_size=batch_size)
    if token_k is not None:
        whole_numbers(token_k=token_k)
    precision = precisions.check(precision or precisions.DEFAULT, "--precision")
    backend = openvino.check_serving(backend or openvino.DEFAULT_BACKEND, precision)
    if index_dir is not None and passage_words is not None:
        raise SsftError("--passage-words: an index built by ssft-encode keeps its own passages; drop --passage-words")
    if index not in INDEX_KINDS:
        raise SsftError(f"--index: expected one of {', '.join(INDEX_KINDS)}, got '{index}'")
    if passage_words is not None and passage_words < 1:
        raise SsftError("--passage-words must be >= 1")
    return precision, backend, parse_fusion(fusion, tune_split)


def _result_folder(source: ModelInput, data: str, index_dir: Path | None, documents_from: str | None,
                   output: Path | None, overwrite: bool):
    """The output folder (None without ``output``), refused where it is or holds what the retrieval reads."""
    if output is None:
        return None
    sources = source.sources + dataset_sources(data)
    if index_dir is not None:
        sources += ((index_dir, "the index folder being read (--index-dir)"),)
    if documents_from and Path(documents_from).exists():
        sources += ((Path(documents_from), "the --documents-from model being read"),)
    # finished: metrics.json, or run.trec alone (own queries without qrels: ssft.pipeline.search)
    return result_folder(output, "ssft-retrieve", RETRIEVE_OUTPUTS, overwrite, sources, finished=RESULT_MARKERS)


def _check_ranker(ranker: Ranker, name: str, late: bool, token_k: int | None, documents_from: str | None) -> None:
    if not ranker.full_retrieval and not late:
        raise SsftError(f"{name}: full retrieval needs a dense or a ColBERT model (architecture 'dense' or "
                        f"'colbert'), not '{ranker.architecture}'; use ssft-rerank")
    if token_k is not None and not late:
        raise SsftError("--token-k: document tokens fetched per query token, for a ColBERT model only")
    if late and documents_from:
        raise SsftError("--documents-from: a dense model's query tower against another model's documents; a ColBERT "
                        "model scores its own token vectors")


def _served(ranker: Ranker, backend: str, precision: str, dataset, queries: dict[str, str], encoding: bool) -> Ranker:
    """A model that only serves, switched for good, its inherited document encoder too (``openvino.serve``: the job
    is the queries, and the corpus when it is ``encoding`` now; int8 calibrated on the queries and corpus served)."""
    inputs = len(queries) + (len(dataset.corpus) if encoding else 0)
    ranker, _, _ = openvino.serve(ranker, backend, precision, lambda: _calibration(dataset, queries), inputs=inputs)
    return ranker


def _calibration(dataset, queries: dict[str, str]) -> list:
    """int8 calibration on the OpenVINO backend: the queries served, each with a document of the corpus (both towers
    see their inputs), and documents of the corpus."""
    return openvino.corpus_calibration(list(queries.values()),
                                       [dataset.corpus[d].full_text for d in sorted(dataset.corpus)])


def _fuse(ranker, dataset, qrels, tune_qrels, queries, run, fusion, split, metrics, results, info, output, depth,
          tune_split, tune_metric, batch_size, index, passage_words, passage_stride, doc_vectors, saved, on_tuned) -> None:
    """BM25 beside the dense run, fused (``ssft.eval.retrieve.write_fusion``); with ``output``, their files there."""
    bm25 = BM25(dataset)
    if fusion == "auto":
        tune_queries = {q: dataset.queries[q] for q in tune_qrels if q in dataset.queries}
        fusion = tune_fusion(ranker, dataset, tune_qrels, bm25.search(tune_queries, depth), depth, tune_metric,
                             batch_size, index_kind=index, passage_words=passage_words, passage_stride=passage_stride,
                             doc_vectors=doc_vectors, saved_index=saved)
        if on_tuned is not None:
            on_tuned(fusion)
    sparse = bm25.search(queries, depth)
    results["bm25"] = evaluate_run(qrels, sparse, metrics)[0]
    results.update(write_fusion(run, sparse, fusion, qrels, split, "bm25", metrics, output, info,
                                write=output is not None))
    if output is not None:
        write_run(sparse, output / run_file("bm25", split), tag="bm25")


__all__ = ["parse_fusion", "retrieve_corpus"]
