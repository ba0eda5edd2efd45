"""Your own queries over your own corpus: ``ssft.index(model, corpus, path=None)`` builds an ``Index`` once,
``Index.search(queries, top_k=10)`` answers any query afterwards, as sentence-transformers' ``util.semantic_search``
answers (``[[{"corpus_id", "score"}, ...], ...]``, best first, one list per query).

- The corpus: a dataset name, a BEIR folder, a ``.jsonl`` / ``.tsv`` file or a list of texts with optional ids
  (``ssft.data.corpus_file``). A list's entries are named by their positions (ints), as ``semantic_search`` names them.
- Dense models: a faiss index of any kind ``ssft-encode`` builds (``flat`` exact, ``ivf``, ``hnsw``, ``pq``,
  ``ivfpq`` or a factory string), scores ``score_scale`` x inner product (the model's own score). ColBERT models: a
  faiss index over every document token, candidates scored by exact MaxSim (``ssft.eval.colbert_index``); or
  ``kind="plaid"``: centroid ids + 2-bit residuals per token, searched with PLAID's centroid pruning, the few
  documents left scored by MaxSim on their decompressed tokens, the best of them again on their float16 tokens
  (``ssft.eval.plaid``).
- ``path``: the index is written there as ``ssft-encode`` writes one (float16 shards with checksums, ``encode.json``,
  ``index.faiss`` + ``index.json``; a corpus of your own as ``corpus.jsonl`` beside them), under the output-folder
  rule (``ssft.core.run_folder``). ``Index.load(path)`` reopens it -- or any ``ssft-encode`` folder: they are the same
  thing -- checked against the model's weights and the corpus's fingerprint; without ``path`` the index lives in
  memory only.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ssft.core import precision as precisions
from ssft.core.errors import SsftError
from ssft.data.beir import IRDataset, load_dataset
from ssft.data.corpus_file import read_corpus
from ssft.eval.colbert_index import DEFAULT_TOKEN_K, LateIndex, load_late_index, memory_late_index, train_and_fill
from ssft.eval.index import CORPUS_FILE, KINDS, load_index
from ssft.models.base import Ranker, load_ranker, saved_model_folder
from ssft.models.corpus import (
    corpus_difference,
    corpus_units,
    corpus_vectors,
    encode_query_texts,
    encode_query_tokens,
    multi_vector,
    read_manifest,
)
from ssft.models.embedding_cache import weights_fingerprint
from ssft.models.interop import openvino
from ssft.pipeline.encode import encode_corpus
from ssft.pipeline.sources import ModelInput

logger = logging.getLogger(__name__)

Hits = list[list[dict[str, Any]]]

# how ``Index.load`` loads a model it is given by name (a hub id, an imported checkpoint): ``ssft.api`` registers
# ``ssft.load``; a saved ssft model folder or run folder loads without it
_model_loaders: list[Callable[[str], Ranker]] = []


def register_model_loader(loader: Callable[[str], Ranker]) -> None:
    """The function ``Index.load`` loads a model named by a string with (``ssft.load``)."""
    _model_loaders[:] = [loader]


def check_index_model(ranker: Ranker, manifest: dict, index_dir: Path | str, late: bool) -> None:
    """Refused unless the index in ``index_dir`` (its encode.json ``manifest``) was encoded by ``ranker``'s
    document tower: the same weights, whatever precision, backend or int8 calibration either serves at (the
    queries may be served otherwise than the documents were encoded, the index's way by default)."""
    source = ranker if late else ranker.document_source()
    if "weights" not in manifest:
        raise SsftError(f"--index-dir: {index_dir} was written by an earlier ssft-encode (its encode.json names no "
                        f"model weights); encode it again into a new folder")
    if weights_fingerprint(source) != manifest["weights"]:
        raise SsftError(f"--index-dir: {index_dir} was encoded by another model (its encode.json names other "
                        f"weights); run ssft-encode with this model")


def _check_model(ranker: Ranker, name: Any) -> bool:
    late = multi_vector(ranker)
    if not ranker.full_retrieval and not late:
        raise SsftError(f"{name}: an index needs a dense or a ColBERT model (architecture 'dense' or 'colbert'), "
                        f"not '{ranker.architecture}'; rerank candidates with model.rank instead")
    return late


class Index:
    """A searchable corpus index of one model (module docstring). ``path``: its folder, or None (in memory)."""

    def __init__(self, ranker: Ranker, dataset: IRDataset, searcher: Any, unit_ids: list[str], *,
                 positions: bool = False, path: Path | None = None, passages: bool = False,
                 manifest: dict | None = None):
        self.model = ranker
        self.dataset = dataset
        self.path = path
        self.manifest = manifest or {}
        self._searcher = searcher
        self._late = isinstance(searcher, LateIndex)
        self._unit_ids = unit_ids
        self._doc_of = [u.rsplit("#", 1)[0] if passages else u for u in unit_ids]
        self._per_doc = int(max(np.unique(self._doc_of, return_counts=True)[1])) if passages and unit_ids else 1
        self._positions = positions

    @property
    def late(self) -> bool:
        """True for a ColBERT index (token vectors, MaxSim)."""
        return self._late

    def __len__(self) -> int:
        """Documents in the index."""
        return len(self.dataset.corpus)

    def __repr__(self) -> str:
        kind = "colbert" if self._late else "dense"
        where = f", path='{self.path}'" if self.path is not None else ""
        return f"Index({kind}, {len(self)} documents{where})"

    def _corpus_id(self, doc_id: str) -> int | str:
        return int(doc_id) if self._positions else doc_id

    def search(self, queries: str | Sequence[str], top_k: int = 10, batch_size: int = 64) -> Hits:
        """The ``top_k`` documents of the corpus for each query, best first, as ``util.semantic_search`` returns
        them: one list per query (a single query string gives one list) of ``{"corpus_id", "score"}``. ``corpus_id``:
        the document's id (its position for a corpus given as a list without ids); ``score``: the model's own score
        (a dense model's ``score_scale`` x inner product, a ColBERT model's MaxSim).

        Args:
            queries: a query text, or a list of them.
            top_k: documents returned per query.
            batch_size: queries encoded at once.

        Returns:
            One list per query of ``{"corpus_id", "score"}`` dicts, best first.
        """
        texts = [queries] if isinstance(queries, str) else queries
        if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Sequence):
            raise SsftError(f"queries: expected a text or a list of texts, got {type(queries).__name__}")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise SsftError(f"queries: item {i} is {type(text).__name__}, not a text")
        for value, name in ((top_k, "top_k"), (batch_size, "batch_size")):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise SsftError(f"{name}: expected a whole number >= 1, got {value!r}")
        top_k = int(top_k)
        if not texts:
            return []
        depth = min(len(self._unit_ids), top_k * self._per_doc)
        if self._late:
            matrices = encode_query_tokens(self.model, texts, int(batch_size))
            found = [[(int(u), float(s)) for u, s in hits] for hits in self._searcher.search(matrices, depth)]
        else:
            vectors = encode_query_texts(self.model, texts, int(batch_size))
            scores, rows = self._searcher.search(np.ascontiguousarray(vectors, dtype=np.float32), depth)
            scale = float(getattr(self.model, "score_scale", 1.0))
            found = [[(int(r), scale * float(s)) for s, r in zip(row_scores, row_ids) if r >= 0]
                     for row_scores, row_ids in zip(scores, rows)]
        out: Hits = []
        for hits in found:
            best: dict[str, float] = {}
            for unit, score in hits:  # best first: a document's first passage is its max
                best.setdefault(self._doc_of[unit], score)
            ranked = sorted(best.items(), key=lambda kv: -kv[1])[:top_k]
            out.append([{"corpus_id": self._corpus_id(d), "score": s} for d, s in ranked])
        return out

    def document(self, corpus_id: int | str) -> dict[str, str]:
        """``{"title", "text"}`` of a hit's document.

        Args:
            corpus_id: a hit's ``corpus_id`` (a document id, or a position for a corpus given as a list).

        Returns:
            ``{"title": ..., "text": ...}``.
        """
        doc = self.dataset.corpus[str(corpus_id)]
        return {"title": doc.title, "text": doc.text}

    @classmethod
    def load(cls, path: str | Path, model: str | Path | Ranker | None = None, *, precision: str | None = None,
             backend: str | None = None, token_k: int = DEFAULT_TOKEN_K) -> Index:
        """The index written in ``path`` (by ``ssft.index(..., path=...)`` or ``ssft-encode``), served with ``model``
        (default: the model it was built with, by the name it was given). Refused when ``model``'s weights are not
        the ones that encoded it, or its corpus changed since.

        Args:
            path: the index's folder.
            model: a loaded ranker or anything ``ssft.load`` takes; None: the model the index was built with.
            precision: how the queries are served: auto, fp32, bf16 or int8 (None: as the documents were encoded).
            backend: torch, openvino or auto (None: as the documents were encoded).
            token_k: ColBERT only: document tokens fetched per query token.

        Returns:
            The ``Index``, ready to ``search``.
        """
        folder = Path(path)
        manifest = read_manifest(folder)
        if manifest is None:
            raise SsftError(f"{folder}: no index here (no encode.json; build one with ssft.index(model, corpus, "
                            f"path=...) or ssft-encode)")
        settings = manifest.get("settings") or {}
        positions = bool(settings.get("positions"))
        if (folder / CORPUS_FILE).is_file() and not settings.get("data"):
            dataset, _ = read_corpus(folder / CORPUS_FILE)
        elif settings.get("data"):
            dataset = load_dataset(str(settings["data"]))
        else:
            raise SsftError(f"{folder}: its corpus ({CORPUS_FILE}) is missing; build the index again")
        difference = corpus_difference(manifest, dataset)
        if difference is not None:
            raise SsftError(f"{folder}: the corpus changed since the index was built ({difference}); build it again")
        ranker = _load_model(model if model is not None else settings.get("model"), folder)
        late = _check_model(ranker, model if model is not None else settings.get("model"))
        if late != bool(manifest.get("token_vectors")):
            raise SsftError(f"{folder}: holds {'token' if manifest.get('token_vectors') else 'single'} vectors, "
                            f"the model is {'a ColBERT' if late else 'a dense'} model; build an index with this model")
        check_index_model(ranker, manifest, folder, late)
        searcher = load_late_index(folder, token_k=token_k) if late else load_index(folder)
        index_backend, index_precision = precisions.parse_served(manifest["precision"])
        precision = precision or index_precision
        if backend is None:
            backend = "auto" if precision == "int8" and index_backend == "torch" else index_backend
        texts = [doc.full_text for doc in dataset.corpus.values()]
        ranker, _, _ = openvino.serve(ranker, backend, precision, lambda: openvino.corpus_calibration([], texts),
                                      inputs=0, where="backend")
        return cls(ranker, dataset, searcher, list(manifest["unit_ids"]), positions=positions, path=folder,
                   passages=bool(settings.get("passage_words")), manifest=manifest)


def _load_model(model: str | Path | Ranker | None, folder: Path) -> Ranker:
    if model is None:
        raise SsftError(f"{folder}: records no model name (it was built from a model object); pass "
                        f"Index.load(path, model=...)")
    if isinstance(model, Ranker):
        return openvino.serving_copy(model)
    if saved_model_folder(Path(model)) is not None or (Path(model) / "model").is_dir():
        return ModelInput(Path(model)).load()
    if _model_loaders:
        return _model_loaders[0](str(model))
    return load_ranker(model)


def build_index(model: str | Path | Ranker, corpus: str | Path | Sequence[str] | IRDataset, path: Path | None = None,
                *, ids: Sequence[str] | None = None, kind: str = "flat", model_name: str | None = None,
                batch_size: int = 64, precision: str = precisions.DEFAULT, backend: str | None = None,
                token_k: int = DEFAULT_TOKEN_K, shard_size: int = 10_000, nprobe: int | None = None,
                trust_remote_code: bool = False) -> Index:
    """``ssft.index`` (module docstring): ``model`` a ranker (served as given: the caller hands a copy) or a path;
    ``model_name`` what ``Index.load`` loads it by later."""
    if kind not in KINDS and not str(kind)[:1].isupper():
        raise SsftError(f"index: expected one of {', '.join(KINDS)} or a faiss index_factory string, got '{kind}'")
    dataset, positions = read_corpus(corpus, ids)
    if path is not None:  # written as ssft-encode writes an index, then read back as any ssft-encode index is
        own = dataset if positions or ids is not None or not _is_dataset(corpus) else str(corpus)
        encode_corpus(model, own, Path(path), index=kind, nprobe=nprobe, shard_size=shard_size,
                      batch_size=batch_size, precision=precision, trust_remote_code=trust_remote_code,
                      backend=backend, model_name=model_name, extra_settings={"positions": positions} if positions else None)
        return Index.load(path, model if isinstance(model, Ranker) else (model_name or model), token_k=token_k)
    ranker = ModelInput(model).load(trust_remote_code)
    late = _check_model(ranker, ModelInput(model).name)
    if kind == "plaid" and not late:
        raise SsftError("index: kind 'plaid' indexes a ColBERT model's token vectors; a dense model takes flat, ivf, "
                        "hnsw, pq or ivfpq")
    unit_ids, texts = corpus_units(dataset)
    ranker, _, _ = openvino.serve(ranker, backend or openvino.DEFAULT_BACKEND, precision,
                                  lambda: openvino.corpus_calibration([], texts), inputs=len(texts), where="backend")
    if late:
        searcher: Any = memory_late_index(ranker, dataset, kind, batch_size, nprobe=nprobe, token_k=token_k)
    else:
        unit_ids, vectors = corpus_vectors(ranker, dataset, batch_size)
        searcher = train_and_fill(kind, [vectors], nprobe)
    return Index(ranker, dataset, searcher, unit_ids, positions=positions)


def _is_dataset(corpus: Any) -> bool:
    """A dataset name or a BEIR folder (kept by reference, as ssft-encode keeps it), not a file or a list."""
    return isinstance(corpus, (str, Path)) and not Path(corpus).is_file()


__all__ = ["DEFAULT_TOKEN_K", "Hits", "Index", "build_index", "check_index_model", "register_model_loader"]
