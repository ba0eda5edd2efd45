"""Encoding a corpus (or a list of queries) with a bi-encoder's own encode path: what full retrieval indexes and what
a frozen dense model keeps of its corpus.

- ``encode_corpus`` / ``encode_query_texts``: eval mode without autograd, documents sorted by length so batches pad
  little (vectors returned in the order of the texts).
- ``corpus_vectors``: (unit ids, vectors) of a whole corpus, documents or -- with ``passage_words`` -- ``doc#i``
  passages (``split_passages``); a frozen model reads them from the on-disk embedding cache when it has encoded this
  corpus before (``ssft.models.embedding_cache``).
- ``encode_shards``: corpus encoding as its own step, for corpora past one process's patience (``ssft-encode``): the
  units cut into fixed shards, each process of ``accelerate launch --num_processes N`` encoding every N-th shard,
  each shard written as float16 ``shards/NNNNN.npy`` atomically (complete or absent), so a killed run resumes by
  skipping the shards already written; ``read_shards`` gives them back in order.
"""
from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from ssft.core import distributed
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_file, atomic_write_json
from ssft.core.precision import model_precision
from ssft.data.beir import IRDataset
from ssft.models.embedding_cache import cached_documents, corpus_fingerprint, model_fingerprint
from ssft.models.encoded import Encoded

logger = logging.getLogger(__name__)


def _encode(encode_fn, texts: list[str], batch_size: int) -> np.ndarray:
    out = []
    for start in range(0, len(texts), batch_size):
        out.append(encode_fn(texts[start : start + batch_size]).vectors.float().cpu().numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 0), dtype=np.float32)


@contextmanager
def _inference(model) -> Iterator[None]:
    """Eval mode without autograd, the previous mode restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def encode_corpus(model, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """Document vectors (n, dim) float32 in the order of ``texts`` (encoded in length order)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    with _inference(model):
        vectors = _encode(model.encode_documents, [texts[i] for i in order], batch_size)
    out = np.empty_like(vectors)
    out[order] = vectors
    return out


def encode_query_texts(model, texts: list[str], batch_size: int = 64) -> np.ndarray:
    with _inference(model):
        return _encode(model.encode_queries, texts, batch_size)


def split_passages(text: str, words: int, stride: int | None = None) -> list[str]:
    """Windows of ``words`` words every ``stride`` words (default: no overlap); a short text is one passage."""
    tokens = text.split()
    stride = stride or words
    if len(tokens) <= words:
        return [text]
    return [" ".join(tokens[i : i + words]) for i in range(0, max(len(tokens) - words, 0) + stride, stride)
            if tokens[i : i + words]]


def corpus_units(dataset: IRDataset, passage_words: int | None = None,
                 passage_stride: int | None = None) -> tuple[list[str], list[str]]:
    """(unit ids, texts) of the whole corpus: documents, or ``doc#i`` passages under maxP."""
    unit_ids, texts = [], []
    for did, doc in dataset.corpus.items():
        if passage_words:
            for i, passage in enumerate(split_passages(doc.full_text, passage_words, passage_stride)):
                unit_ids.append(f"{did}#{i}")
                texts.append(passage)
        else:
            unit_ids.append(did)
            texts.append(doc.full_text)
    return unit_ids, texts


def corpus_vectors(model, dataset: IRDataset, batch_size: int = 64, passage_words: int | None = None,
                   passage_stride: int | None = None) -> tuple[list[str], np.ndarray]:
    """(unit ids, vectors) of the whole corpus: documents, or ``doc#i`` passages under maxP."""
    unit_ids, texts = corpus_units(dataset, passage_words, passage_stride)

    def encode_all() -> list[Encoded]:
        logger.info("encoding %d %s with the document tower", len(texts), "passages" if passage_words else "documents")
        return [Encoded(torch.from_numpy(v[None])) for v in encode_corpus(model, texts, batch_size)]

    # a frozen model reads its corpus vectors from the on-disk cache when it has encoded this corpus before
    reps = cached_documents(model, unit_ids, texts, encode_all)
    return unit_ids, np.ascontiguousarray(torch.cat([r.vectors for r in reps]).float().cpu().numpy())


SHARDS_FORMAT = "ssft-encoded-corpus/1"
MANIFEST = "encode.json"


def _shard_path(folder: Path, shard: int) -> Path:
    return folder / "shards" / f"{shard:05d}.npy"


def shard_complete(folder: Path, shard: int, rows: int) -> bool:
    """True when shard ``shard`` is on disk whole: ``rows`` float16 vectors (a file cut short reads as absent)."""
    try:
        vectors = np.load(_shard_path(folder, shard), mmap_mode="r")
    except (OSError, ValueError, EOFError):
        return False
    return vectors.dtype == np.float16 and vectors.ndim == 2 and vectors.shape[0] == rows


def encode_shards(model, unit_ids: list[str], texts: list[str], folder: Path, shard_size: int = 10_000,
                  batch_size: int = 64, settings: dict | None = None) -> dict:
    """Encode ``texts`` with ``model``'s document tower into ``folder/shards/`` (float16, ``shard_size`` units each),
    this process taking every world-size-th shard (``ssft.core.distributed``), shards already complete skipped (a
    resumed run); returns the manifest (``encode.json``: model and corpus fingerprints, precision, shard size, unit
    ids and ``settings``). A folder holding another model's or corpus's shards is refused. The main process writes
    the manifest; all wait for every shard before returning."""
    if shard_size < 1:
        raise SsftError("shard size must be >= 1")
    folder = Path(folder)
    source = model.document_source() if hasattr(model, "document_source") else model  # whose documents these are
    manifest = {"format": SHARDS_FORMAT, "model": model_fingerprint(source), "precision": model_precision(source),
                "corpus": corpus_fingerprint(unit_ids, texts), "units": len(unit_ids), "shard_size": shard_size,
                "settings": settings or {}}
    found = read_manifest(folder)
    if found is not None and {k: found.get(k) for k in manifest} != manifest:
        differs = next(k for k in manifest if found.get(k) != manifest[k])
        raise SsftError(f"{folder}: holds shards of another encoding ({differs} differs); name another folder or "
                        f"remove it")
    shards = (len(unit_ids) + shard_size - 1) // shard_size
    rank, world = distributed.rank(), distributed.world_size()
    mine = [s for s in range(shards) if s % world == rank]
    todo = [s for s in mine if not shard_complete(folder, s, min(shard_size, len(unit_ids) - s * shard_size))]
    if len(todo) < len(mine):
        logger.info("process %d: %d of its %d shards already encoded, skipped", rank, len(mine) - len(todo), len(mine))
    if rank == 0:
        atomic_write_json(folder / MANIFEST, {**manifest, "unit_ids": unit_ids})
    for shard in tqdm(todo, desc=f"encoding (process {rank})" if world > 1 else "encoding", unit="shard",
                      disable=not todo):
        rows = slice(shard * shard_size, min((shard + 1) * shard_size, len(unit_ids)))
        vectors = encode_corpus(model, texts[rows], batch_size).astype(np.float16)
        atomic_write_file(_shard_path(folder, shard), lambda tmp, v=vectors: _save_npy(tmp, v))
    distributed.barrier()
    return {**manifest, "unit_ids": unit_ids, "shards": shards}


def _save_npy(path: str, vectors: np.ndarray) -> None:
    with open(path, "wb") as fh:  # np.save(path) would append .npy to the temporary name
        np.save(fh, vectors)


def read_manifest(folder: Path) -> dict | None:
    """``encode.json`` of an encoded-corpus folder, or None."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SsftError(f"{path}: not a readable manifest of encoded shards") from None
    if not isinstance(manifest, dict) or manifest.get("format") != SHARDS_FORMAT:
        raise SsftError(f"{path}: not a manifest of ssft-encode shards (format {SHARDS_FORMAT})")
    return manifest


def read_shards(folder: Path, manifest: dict) -> Iterator[np.ndarray]:
    """The shards of ``folder`` in order (float16, memory-mapped); a missing or short shard is an error."""
    size, units = manifest["shard_size"], manifest["units"]
    for shard in range((units + size - 1) // size):
        rows = min(size, units - shard * size)
        if not shard_complete(folder, shard, rows):
            raise SsftError(f"{_shard_path(folder, shard)}: missing or incomplete; run ssft-encode again to finish it")
        yield np.load(_shard_path(folder, shard), mmap_mode="r")


__all__ = ["corpus_units", "corpus_vectors", "encode_corpus", "encode_query_texts", "encode_shards", "read_manifest",
           "read_shards", "shard_complete", "split_passages"]
