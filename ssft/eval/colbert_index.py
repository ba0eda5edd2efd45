"""Full retrieval with a late-interaction model (ColBERT) over a whole corpus: candidates from a faiss index over every
document token, then exact MaxSim over the candidates (ColBERT's end-to-end retrieval, Khattab & Zaharia 2020 §3.6).

- ``TokenStore``: every unit's scored token vectors (float16; ssft-encode's shards memory-mapped, or one array in
  memory) and the unit of each token row.
- ``LateIndex``: a faiss inner-product index over those token rows (any kind of ``ssft.eval.index``: ``flat`` exact,
  ``ivfpq`` / ``ivf`` / ``pq`` / ``hnsw`` approximate, or a factory string) and the store. A query's token vectors
  each fetch their ``token_k`` nearest document tokens; the units those tokens belong to are the candidates, and each
  candidate is scored exactly, sum over query tokens of the max dot product over its stored tokens -- the model's own
  MaxSim (``ssft.models.colbert.maxsim``) on the float16 vectors. The index only chooses candidates, so an
  approximate one costs recall (a document none of whose tokens is fetched), never a wrong score.
- ``exhaustive`` scores every unit (the reference the approximate index is measured against; fine for small corpora).
- ``PlaidLateIndex``: the same searches over a compressed ``ssft.eval.plaid.PlaidIndex`` (index kind ``plaid``):
  centroid ids and 2-bit residuals instead of a faiss index plus the float16 store, PLAID's centroid pruning, then
  MaxSim on the decompressed vectors of the few documents left (``ndocs`` / ``rescore`` / ``ncells`` /
  ``threshold``; ``token_k`` does not apply).
- ``load_late_index`` reads what ssft-encode wrote for a ColBERT model (index.faiss over the token rows, the shards
  as the store); ``memory_late_index`` encodes a corpus in memory (ssft-retrieve without ``--index-dir``).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ssft.core.errors import SsftError
from ssft.data.beir import IRDataset
from ssft.data.trec import Run
from ssft.eval.index import CALIBRATION_QUERIES, check_index, load_index, set_nprobe
from ssft.eval.plaid import PlaidIndex
from ssft.models.corpus import corpus_units, encode_query_tokens, encode_token_corpus, read_shards, read_token_lengths

logger = logging.getLogger(__name__)

DEFAULT_TOKEN_K = 512  # document tokens fetched per query token (recall@100 0.997 of exhaustive MaxSim on NFCorpus)
_SCORE_CHUNK = 1 << 18  # token rows scored at once (a (query tokens, rows) float32 block)


class TokenStore:
    """Every unit's token vectors: ``parts`` (float16 (rows, dim) arrays, whole units each, in unit order) and
    ``lengths`` (tokens per unit)."""

    def __init__(self, parts: list[np.ndarray], lengths: np.ndarray):
        self.parts = parts
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])  # unit i: token rows offsets[i]:offsets[i+1]
        self.part_starts = np.concatenate([[0], np.cumsum([p.shape[0] for p in parts])]).astype(np.int64)
        if self.part_starts[-1] != self.offsets[-1]:
            raise SsftError(f"the token store holds {self.part_starts[-1]} token vectors, its units {self.offsets[-1]}")
        self.token_unit = np.repeat(np.arange(len(self.lengths)), self.lengths)

    @property
    def units(self) -> int:
        return len(self.lengths)

    def tokens(self, unit: int) -> np.ndarray:
        """Unit ``unit``'s token vectors (tokens, dim), float16."""
        start, stop = int(self.offsets[unit]), int(self.offsets[unit + 1])
        part = int(np.searchsorted(self.part_starts, start, side="right")) - 1
        base = int(self.part_starts[part])
        return self.parts[part][start - base : stop - base]

    def maxsim(self, query: np.ndarray, units: np.ndarray) -> np.ndarray:
        """MaxSim of ``query`` (tokens, dim) against each of ``units``: the sum over query tokens of the max dot
        product over the unit's tokens (0 for a unit without tokens, as ``ssft.models.colbert.maxsim``)."""
        units = np.asarray(units, dtype=np.int64)
        scores = np.zeros(len(units), dtype=np.float32)
        query = np.ascontiguousarray(query, dtype=np.float32)
        has = np.flatnonzero(self.lengths[units] > 0)
        start = 0
        while start < len(has):  # chunks of about _SCORE_CHUNK token rows
            stop, rows = start, 0
            while stop < len(has) and (rows == 0 or rows + self.lengths[units[has[stop]]] <= _SCORE_CHUNK):
                rows += int(self.lengths[units[has[stop]]])
                stop += 1
            chunk = has[start:stop]
            matrices = [self.tokens(int(u)) for u in units[chunk]]
            tokens = np.concatenate(matrices).astype(np.float32)
            bounds = np.concatenate([[0], np.cumsum([len(m) for m in matrices])[:-1]])
            sims = query @ tokens.T  # (query tokens, rows)
            scores[chunk] = np.maximum.reduceat(sims, bounds, axis=1).sum(axis=0)
            start = stop
        return scores


def _top(units: np.ndarray, scores: np.ndarray, depth: int) -> list[tuple[int, float]]:
    """The best ``depth`` (unit, score), best first; ties by unit row (a stable order for equal scores)."""
    order = np.lexsort((units, -scores))[:depth]
    return [(int(units[i]), float(scores[i])) for i in order]


class LateIndex:
    """A faiss index over a ``TokenStore``'s token rows, searched for candidates that MaxSim then scores exactly."""

    def __init__(self, index: Any, store: TokenStore, unit_ids: list[str], info: dict[str, Any] | None = None,
                 token_k: int = DEFAULT_TOKEN_K, manifest: dict[str, Any] | None = None):
        if index.ntotal != len(store.token_unit):
            raise SsftError(f"the token index holds {index.ntotal} vectors, the store {len(store.token_unit)}")
        self.index, self.store, self.unit_ids = index, store, unit_ids
        self.info = info or {}
        self.manifest = manifest or {}  # encode.json of an index ssft-encode built (model fingerprint, precision)
        self.token_k = token_k
        self.last_candidates: list[int] = []  # candidates scored per query of the last search (for reports)

    def candidates(self, queries: list[np.ndarray], token_k: int | None = None) -> list[np.ndarray]:
        """The units any of each query's token vectors fetched among its ``token_k`` nearest document tokens."""
        if not queries:
            return []
        k = max(1, min(int(token_k or self.token_k), int(self.index.ntotal)))
        stacked = np.ascontiguousarray(np.concatenate(queries), dtype=np.float32)
        _, rows = self.index.search(stacked, k)
        out, start = [], 0
        for q in queries:
            hits = rows[start : start + len(q)].ravel()
            out.append(np.unique(self.store.token_unit[hits[hits >= 0]]))
            start += len(q)
        return out

    def search(self, queries: list[np.ndarray], depth: int, token_k: int | None = None) -> list[list[tuple[int, float]]]:
        """For each query's token matrix, the top-``depth`` (unit row, exact MaxSim) among its candidates."""
        found = self.candidates(queries, token_k)
        self.last_candidates = [len(c) for c in found]
        return [_top(units, self.store.maxsim(q, units), depth) for q, units in zip(queries, found)]

    def exhaustive(self, queries: list[np.ndarray], depth: int) -> list[list[tuple[int, float]]]:
        """For each query, the top-``depth`` of every unit by exact MaxSim (no index: the reference)."""
        every = np.arange(self.store.units)
        return [_top(every, self.store.maxsim(q, every), depth) for q in queries]

    def retrieve(self, model, queries: dict[str, str], depth: int, batch_size: int = 64, passages: bool = False,
                 token_k: int | None = None) -> Run:
        """The top-``depth`` documents of the corpus for every query, scored by ``model``'s MaxSim; with ``passages``
        a document scores its best passage (units ``<document id>#<n>``, maxP)."""
        qids = sorted(queries)
        if not qids or not self.unit_ids:
            return {}
        doc_of = [u.rsplit("#", 1)[0] if passages else u for u in self.unit_ids]
        per_doc = int(max(np.unique(doc_of, return_counts=True)[1])) if passages else 1
        matrices = encode_query_tokens(model, [queries[q] for q in qids], batch_size)
        run: Run = {}
        for qid, hits in zip(qids, self.search(matrices, min(len(doc_of), depth * per_doc), token_k)):
            best: dict[str, float] = {}
            for unit, score in hits:  # best first: a document's first passage is its max
                best.setdefault(doc_of[unit], score)
            run[qid] = dict(list(best.items())[:depth])
        return run


class PlaidLateIndex(LateIndex):
    """A ``LateIndex`` over a ``PlaidIndex``: its own candidate stages and MaxSim on decompressed vectors. With a
    float16 ``store`` (the shards of the folder it was built from) and ``exact``, the best ``2 x depth`` documents
    by decompressed MaxSim are scored again on their float16 tokens, the model's own MaxSim, and ranked by it: the
    same documents (a subset of those decompressed), the scores a faiss token index gives."""

    def __init__(self, plaid: Any, unit_ids: list[str], info: dict[str, Any] | None = None,
                 manifest: dict[str, Any] | None = None, store: TokenStore | None = None, exact: bool = True,
                 **options: Any):
        if plaid.units != len(unit_ids):
            raise SsftError(f"the PLAID index holds {plaid.units} units, the corpus {len(unit_ids)}")
        if store is not None and not np.array_equal(store.lengths, np.diff(plaid.offsets)):
            raise SsftError("the PLAID index and the token store hold different tokens per unit")
        self.index, self.plaid, self.store, self.unit_ids = plaid, plaid, store, unit_ids
        self.info = info or {}
        self.manifest = manifest or {}
        self.token_k = None
        self.exact = bool(exact) and store is not None
        self.options = options  # ncells, ndocs, rescore, threshold: PlaidIndex.search's
        self.last_candidates: list[int] = []  # documents decompressed and scored per query of the last search
        self.last_stats: list[dict[str, int]] = []  # documents at each stage per query

    def candidates(self, queries: list[np.ndarray], token_k: int | None = None) -> list[np.ndarray]:
        raise SsftError("a plaid index has no token candidates (token_k); it searches with ncells and ndocs")

    def search(self, queries: list[np.ndarray], depth: int, token_k: int | None = None,
               **options: Any) -> list[list[tuple[int, float]]]:
        """For each query's token matrix, the top-``depth`` (unit row, MaxSim); ``token_k`` is ignored (a faiss
        token index's option)."""
        exact = bool(options.pop("exact", self.exact)) and self.store is not None
        settings = {**self.options, **options}
        if exact and not settings.get("rescore"):  # stage 4 keeps at least the documents re-scored exactly
            ndocs = settings.get("ndocs") or self.plaid.meta.get("ndocs")
            settings["rescore"] = max(2 * depth, int(ndocs or 0) // 4) if ndocs else None
        found = self.plaid.search(queries, 2 * depth if exact else depth, **settings)
        self.last_stats = list(self.plaid.last_stats)
        self.last_candidates = [s["rescored"] for s in self.last_stats]
        if not exact:
            return found
        out = []
        for query, hits in zip(queries, found):
            units = np.array([u for u, _ in hits], dtype=np.int64)
            out.append(_top(units, self.store.maxsim(query, units), depth))
        return out

    def exhaustive(self, queries: list[np.ndarray], depth: int) -> list[list[tuple[int, float]]]:
        """For each query, the top-``depth`` of every unit by MaxSim on the decompressed vectors (what ``search``
        approximates without ``exact``)."""
        every = np.arange(self.plaid.units)
        return [_top(every, self.plaid.maxsim(q, every), depth) for q in queries]


def train_and_fill(kind: str, vectors: list[np.ndarray], nprobe: int | None = None, max_train: int = 200_000) -> Any:
    """A faiss inner-product index of ``kind`` (``ssft.eval.index`` kinds or a factory string) over the rows of
    ``vectors`` (float16 or float32 arrays), trained on an even sample of at most ``max_train`` rows; an IVF index
    searches ``nprobe`` lists (None: ``calibrate_nprobe``'s count)."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    rows, dim = sum(v.shape[0] for v in vectors), vectors[0].shape[1]
    spec, need = check_index(kind, rows, dim)
    index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        step = max(1, -(-rows // max(max_train, need)))
        index.train(np.ascontiguousarray(np.concatenate([v[::step] for v in vectors]), dtype=np.float32))
    for part in vectors:
        index.add(np.ascontiguousarray(part, dtype=np.float32))
    rows_step = max(1, rows // CALIBRATION_QUERIES)
    set_nprobe(index, nprobe, np.concatenate([v[::rows_step] for v in vectors]))
    return index


def memory_late_index(model, dataset: IRDataset, kind: str = "flat", batch_size: int = 64,
                      passage_words: int | None = None, passage_stride: int | None = None, nprobe: int | None = None,
                      token_k: int = DEFAULT_TOKEN_K) -> LateIndex:
    """The corpus (documents, or passages) encoded now into a token store and a faiss index of ``kind``."""
    unit_ids, texts = corpus_units(dataset, passage_words, passage_stride)
    if not unit_ids:
        raise SsftError(f"{dataset.path}: the corpus is empty")
    logger.info("encoding the token vectors of %d %s", len(texts), "passages" if passage_words else "documents")
    matrices = encode_token_corpus(model, texts, batch_size)
    store = TokenStore([np.concatenate(matrices).astype(np.float16)], np.array([len(m) for m in matrices]))
    if kind == "plaid":

        plaid = PlaidIndex.build(store.parts, store.lengths)
        return PlaidLateIndex(plaid, unit_ids, {"kind": kind, **plaid.meta}, store=store)  # the store is in memory
    return LateIndex(train_and_fill(kind, store.parts, nprobe), store, unit_ids, {"kind": kind}, token_k)


def load_late_index(folder: Path, dataset: IRDataset | None = None, token_k: int = DEFAULT_TOKEN_K,
                    mmap: bool = True, exact: bool = True) -> LateIndex:
    """The ColBERT index ssft-encode wrote in ``folder`` (checked as ``ssft.eval.index.load_index`` checks a dense
    one), its shards memory-mapped as the token store; a ``plaid`` index serves from its compressed tokens alone."""
    saved = load_index(folder, mmap=mmap, dataset=dataset)
    if not saved.manifest.get("token_vectors"):
        raise SsftError(f"--index-dir {folder}: holds single vectors of a dense model, not the token vectors a "
                        f"ColBERT model retrieves from; run ssft-encode with this model")
    if saved.info.get("kind") == "plaid":  # the shards memory-mapped: only the final few documents' are read
        store = TokenStore(list(read_shards(Path(folder), saved.manifest)),
                           read_token_lengths(Path(folder), saved.manifest)) if exact else None
        return PlaidLateIndex(saved.index, saved.unit_ids, saved.info, saved.manifest, store)
    store = TokenStore(list(read_shards(Path(folder), saved.manifest)), read_token_lengths(Path(folder), saved.manifest))
    return LateIndex(saved.index, store, saved.unit_ids, saved.info, token_k, saved.manifest)


__all__ = ["DEFAULT_TOKEN_K", "LateIndex", "PlaidLateIndex", "TokenStore", "load_late_index", "memory_late_index",
           "train_and_fill"]
