"""Full retrieval with a single-vector bi-encoder over a faiss index (000 Eq. 3–4), maxP over passages (Eq. 2).

- ``encode_corpus`` / ``encode_query_texts`` / ``corpus_vectors``: the model's own encode path, documents in batches
  by exact token count so they pad little (``ssft.models.corpus``, re-exported here).
- ``build_index``: ``flat`` (exact inner product, the default), ``ivf`` (IVF-flat), ``hnsw``, ``pq``, ``ivfpq``;
  on faiss-gpu with a GPU present, flat and IVF indexes move to the GPU (``gpu=None`` decides by itself).
- ``retrieve``: the top-``depth`` documents of every query, scored as the model scores
  (``score_scale`` × dot product). With ``passage_words`` documents are split into windows of that many
  words and a document scores its best passage (maxP); the search asks for ``depth`` × (most passages of a
  document) passages, enough for the exact document top-``depth`` under an exact index.
- ``retrieve_and_report``: the output contract of ``ssft.eval.rerank.rerank_and_report`` (metrics.json
  content, run files, per-query metrics), with the first stage given for comparison only.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ssft.core.errors import SsftError
from ssft.core.output_names import per_query_file, run_file
from ssft.data.beir import IRDataset, Qrels
from ssft.data.trec import Run, top_k, write_run
from ssft.eval.colbert_index import memory_late_index
from ssft.eval.fusion import fuse_dense_sparse, tune_fusion_alpha
from ssft.eval.index import set_nprobe
from ssft.eval.metrics import evaluate_run, write_per_query
from ssft.eval.rerank import write_and_evaluate
from ssft.models.corpus import corpus_vectors, encode_corpus, encode_query_texts, multi_vector, split_passages

logger = logging.getLogger(__name__)

INDEX_KINDS = ("flat", "ivf", "hnsw", "pq", "ivfpq")
_GPU_RESOURCES = None


def build_index(vectors: np.ndarray, kind: str = "flat", nlist: int | None = None, pq_m: int = 16, hnsw_m: int = 32,
                nprobe: int | None = None, gpu: bool | None = None):
    """A faiss inner-product index holding ``vectors``; an IVF one searches ``nprobe`` lists (None: calibrated,
    ``ssft.eval.index.calibrate_nprobe``; on a GPU, where the index is not searched on the CPU first, 16)."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    if kind not in INDEX_KINDS:
        raise SsftError(f"index kind '{kind}': expected one of {', '.join(INDEX_KINDS)}")
    n, dim = vectors.shape
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    ip = faiss.METRIC_INNER_PRODUCT
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, ip)
    else:
        if kind in ("pq", "ivfpq") and dim % pq_m:
            raise SsftError(f"index kind '{kind}': the vector size {dim} is not a multiple of pq_m={pq_m}")
        nlist = nlist or max(1, min(int(4 * np.sqrt(n)), n // 39 or 1))  # faiss warns under 39 points per list
        bits = max(1, min(8, int(np.log2(n))))  # 2^bits centroids per sub-quantizer need as many training points
        if kind == "pq":
            index = faiss.IndexPQ(dim, pq_m, bits, ip)
        else:
            quantizer = faiss.IndexFlatIP(dim)
            index = (faiss.IndexIVFFlat(quantizer, dim, nlist, ip) if kind == "ivf"
                     else faiss.IndexIVFPQ(quantizer, dim, nlist, pq_m, bits, ip))
        index.train(vectors)
    use_gpu = gpu if gpu is not None else (hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0)
    if use_gpu and kind in ("flat", "ivf"):
        if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
            raise SsftError("gpu index requested but faiss has no GPU support here (install faiss-gpu on a GPU machine)")
        global _GPU_RESOURCES
        if _GPU_RESOURCES is None:  # one set of GPU resources for the process, alive as long as it is
            _GPU_RESOURCES = faiss.StandardGpuResources()
        index = faiss.index_cpu_to_gpu(_GPU_RESOURCES, 0, index)
    index.add(vectors)
    if kind in ("ivf", "ivfpq") and not use_gpu:
        set_nprobe(index, None if nprobe is None else min(nprobe, nlist), vectors)
    elif kind in ("ivf", "ivfpq"):  # a GPU index (faiss cannot reach its IVF part to calibrate): set on it directly
        index.nprobe = min(nprobe or 16, nlist)
    return index


def retrieve(model, dataset: IRDataset, queries: dict[str, str], depth: int = 100, batch_size: int = 64,
             index_kind: str = "flat", passage_words: int | None = None, passage_stride: int | None = None,
             doc_vectors: tuple[list[str], np.ndarray] | None = None, saved_index=None) -> Run:
    """Top-``depth`` documents of the corpus for every query (see the module docstring).
    ``doc_vectors`` = (unit ids, vectors) reuses an encoded corpus (units are passages under maxP); ``saved_index``
    (``ssft.eval.index.load_index``) searches an index ssft-encode built instead of encoding the corpus. A ColBERT
    model retrieves through its token index (``ssft.eval.colbert_index``): ``saved_index`` a ``LateIndex``, or one
    built now over the corpus."""
    if depth < 1:
        raise SsftError("retrieval depth must be >= 1")
    if multi_vector(model):
        late = saved_index if saved_index is not None else memory_late_index(model, dataset, index_kind, batch_size,
                                                                             passage_words, passage_stride)
        return late.retrieve(model, queries, depth, batch_size, passages=bool(passage_words))
    if saved_index is not None:
        unit_ids, vectors = saved_index.unit_ids, None
    elif doc_vectors is None:
        unit_ids, vectors = corpus_vectors(model, dataset, batch_size, passage_words, passage_stride)
    else:
        unit_ids, vectors = doc_vectors
    doc_of = [u.rsplit("#", 1)[0] if passage_words else u for u in unit_ids]  # ids "<document id>#<n>"
    per_doc = max(np.unique(doc_of, return_counts=True)[1]) if passage_words else 1
    qids = sorted(queries)
    if not qids or not unit_ids:
        return {}
    q_vectors = encode_query_texts(model, [queries[q] for q in qids], batch_size)
    index = saved_index if saved_index is not None else build_index(vectors, index_kind)
    k = min(len(unit_ids), depth * int(per_doc))
    scores, rows = index.search(np.ascontiguousarray(q_vectors), k)
    scale = float(getattr(model, "score_scale", 1.0))
    run: Run = {}
    for qid, row_scores, row_ids in zip(qids, scores, rows):
        best: dict[str, float] = {}
        for s, r in zip(row_scores, row_ids):
            if r < 0:  # faiss pads with -1 when an approximate index finds fewer
                continue
            d = doc_of[r]
            if d not in best:  # results come best first: the first passage of a document is its max (Eq. 2)
                best[d] = scale * float(s)
        run[qid] = dict(sorted(best.items(), key=lambda kv: -kv[1])[:depth])
    return run


def tune_fusion(model, dataset: IRDataset, qrels: Qrels, sparse: Run, depth: int, metric: str, batch_size: int = 64,
                **retrieve_options: Any) -> float:
    """003 Eq. 7's α tuned on a (validation) split: the model's dense top-``depth`` for the split's queries fused
    with ``sparse``'s top-``depth``, by ``metric``. The one tuning step of ssft-train (``eval.fusion: auto``) and
    ssft-retrieve (``--fusion auto``); ``retrieve_options`` go to ``retrieve`` (index kind, passages, vectors)."""
    queries = {q: dataset.queries[q] for q in qrels if q in dataset.queries}
    dense = retrieve(model, dataset, queries, depth, batch_size, **retrieve_options)
    return tune_fusion_alpha(dense, top_k(sparse, depth), qrels, metric)


def retrieve_and_report(
    *,
    ranker,
    dataset: IRDataset,
    split: str,
    qrels: Qrels,
    first_stage: Run,
    first_stage_name: str,
    depth: int,
    metrics: list[str],
    output_dir: Path,
    batch_size: int = 64,
    alpha: float | None = None,
    index_kind: str = "flat",
    fusion_alpha: float | None = None,
    write: bool = True,
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """``rerank_and_report``'s contract for full retrieval: the model retrieves the top-``depth`` of the whole
    corpus for the queries of ``qrels``; ``first_stage`` is evaluated beside it (and interpolated over the model's
    documents when ``alpha``). ``fusion_alpha``: also the dense–sparse fusion of 003 Eq. 7 over the union of both
    top-``depth`` lists, reported as ``{split}+{first_stage_name}.fusion``."""
    queries = {q: dataset.queries[q] for q in qrels if q in dataset.queries}
    model_run = retrieve(ranker, dataset, queries, depth, batch_size, index_kind)
    first_stage = top_k({q: first_stage[q] for q in qrels if first_stage.get(q)}, depth)
    info: dict[str, Any] = {"split": split, "queries": len(model_run), "depth": depth,
                            "retrieval": f"full corpus, faiss {index_kind}", "documents": len(dataset.corpus),
                            "first_stage": first_stage_name}
    results = write_and_evaluate(model_run, first_stage, qrels, split, first_stage_name, metrics, output_dir, alpha, info,
                                 tag="ssft-dense", write=write)
    if fusion_alpha is not None:
        results.update(write_fusion(model_run, first_stage, fusion_alpha, qrels, split, first_stage_name, metrics,
                                    output_dir, info, write=write))
    return results, info


def write_fusion(dense_run: Run, sparse_run: Run, alpha: float, qrels: Qrels, split: str, sparse_name: str,
                 metrics: list[str], output_dir: Path, info: dict[str, Any], tag: str = "ssft-dense",
                 write: bool = True) -> dict[str, dict[str, float]]:
    """003 Eq. 7 fusion of a dense and a sparse run: its metrics under ``{split}+{sparse_name}.fusion``, its TREC
    run and per-query metrics under ``output_dir`` (unless ``write`` is false: the other processes of a
    multi-process run), α recorded in ``info`` (``fusion_alpha``)."""
    fused = fuse_dense_sparse(dense_run, sparse_run, alpha)
    key = f"{split}+{sparse_name}.fusion"
    aggregate, per_query = evaluate_run(qrels, fused, metrics)
    info["fusion_alpha"] = alpha
    if write:
        write_run(fused, output_dir / run_file(key, split), tag=f"{tag}+{sparse_name}")
        write_per_query(per_query, output_dir / per_query_file(key, split))
    return {key: aggregate}


def evaluate_retrieval(model, dataset: IRDataset, qrels: Qrels, metrics: list[str], depth: int = 100,
                       batch_size: int = 64) -> dict[str, float]:
    """Aggregate metrics of full retrieval for the queries of ``qrels`` (validation during training)."""
    queries = {q: dataset.queries[q] for q in qrels if q in dataset.queries}
    return evaluate_run(qrels, retrieve(model, dataset, queries, depth, batch_size), metrics)[0]


__all__ = ["INDEX_KINDS", "build_index", "corpus_vectors", "encode_corpus", "encode_query_texts", "evaluate_retrieval",
           "retrieve", "retrieve_and_report", "split_passages", "write_fusion"]
