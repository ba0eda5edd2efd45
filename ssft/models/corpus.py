"""Encoding a corpus (or a list of queries) with a bi-encoder's own encode path: what full retrieval indexes and what
a frozen dense model keeps of its corpus.

- ``encode_corpus`` / ``encode_query_texts``: eval mode without autograd, documents sorted by length so batches pad
  little (vectors returned in the order of the texts).
- ``corpus_vectors``: (unit ids, vectors) of a whole corpus, documents or -- with ``passage_words`` -- ``doc#i``
  passages (``split_passages``); a frozen model reads them from the on-disk embedding cache when it has encoded this
  corpus before (``ssft.models.embedding_cache``).
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch

from ssft.data.beir import IRDataset
from ssft.models.embedding_cache import cached_documents
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


def corpus_vectors(model, dataset: IRDataset, batch_size: int = 64, passage_words: int | None = None,
                   passage_stride: int | None = None) -> tuple[list[str], np.ndarray]:
    """(unit ids, vectors) of the whole corpus: documents, or ``doc#i`` passages under maxP."""
    unit_ids, texts = [], []
    for did, doc in dataset.corpus.items():
        if passage_words:
            for i, passage in enumerate(split_passages(doc.full_text, passage_words, passage_stride)):
                unit_ids.append(f"{did}#{i}")
                texts.append(passage)
        else:
            unit_ids.append(did)
            texts.append(doc.full_text)

    def encode_all() -> list[Encoded]:
        logger.info("encoding %d %s with the document tower", len(texts), "passages" if passage_words else "documents")
        return [Encoded(torch.from_numpy(v[None])) for v in encode_corpus(model, texts, batch_size)]

    # a frozen model reads its corpus vectors from the on-disk cache when it has encoded this corpus before
    reps = cached_documents(model, unit_ids, texts, encode_all)
    return unit_ids, np.ascontiguousarray(torch.cat([r.vectors for r in reps]).float().cpu().numpy())


__all__ = ["corpus_vectors", "encode_corpus", "encode_query_texts", "split_passages"]
