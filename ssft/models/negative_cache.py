"""Negative cache (Lindgren et al. 2021, used by DAFT 000 §4.1): a streaming cache of document representations.

- The cache holds ``size`` documents of the corpus (000's cache fraction α = size / corpus), encoded with the
  document tower and stored detached.
- After every training step ``refresh`` re-encodes a refresh fraction ρ of the entries, oldest first
  (round robin), so the cache follows the document tower as it trains.
- ``sample`` draws negatives per query by the Gumbel-max trick: the top-k of score/τ_s + Gumbel noise is a
  sample without replacement from softmax(score/τ_s) — documents the query scores high are drawn more often.
  The query's own positives are never drawn.
- ``negative_scores`` returns the drawn negatives' scores for the loss. The cached vectors carry no gradient,
  so through them the loss trains the query tower (and the shared projection only through the query side);
  the document tower learns from the in-batch documents. This is the plain form of the method, not the
  gradient-corrected variant of Lindgren et al.'s paper.
"""
from __future__ import annotations

import logging
import math
import random

import torch

from ssft.core.errors import SsftError
from ssft.models.dense import row_keys

logger = logging.getLogger(__name__)


class NegativeCache:
    def __init__(self, texts: list[str], num_negatives: int = 16, refresh_fraction: float = 0.1,
                 sample_temperature: float = 1.0, batch_size: int = 64, seed: int = 0):
        if not texts:
            raise SsftError("negative cache: no documents to cache")
        if num_negatives < 1:
            raise SsftError("negative cache: num_negatives must be >= 1")
        if not 0.0 < refresh_fraction <= 1.0:
            raise SsftError("negative cache: refresh fraction must be in (0, 1]")
        self.texts = list(texts)
        self.num_negatives = num_negatives
        self.refresh_fraction = refresh_fraction
        self.sample_temperature = sample_temperature
        self.batch_size = batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.vectors: torch.Tensor | None = None
        self.keys: list[bytes] = []
        self.row_of: dict[bytes, list[int]] = {}
        self.next_row = 0  # where the next refresh starts
        self.refreshed_rows = 0  # total re-encoded entries (tests and logs)

    @classmethod
    def from_corpus(cls, corpus_texts: list[str], size: int, seed: int = 0, **kwargs) -> NegativeCache:
        """A cache of ``size`` documents drawn at random (fixed seed) from the corpus."""
        texts = corpus_texts if size >= len(corpus_texts) else random.Random(seed).sample(corpus_texts, size)
        return cls(texts, seed=seed, **kwargs)

    def __len__(self) -> int:
        return len(self.texts)

    def _encode_rows(self, model, rows: list[int]) -> None:
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(rows), self.batch_size):
                    chunk = rows[start : start + self.batch_size]
                    batch = model._to_device(model.tokenize_documents([self.texts[r] for r in chunk]))
                    vectors = model.encode_tokens(batch["input_ids"], batch["attention_mask"], "document").vectors.detach()
                    if self.vectors is None:
                        self.vectors = vectors.new_zeros(len(self.texts), vectors.shape[-1])
                        self.keys = [b""] * len(self.texts)
                    self.vectors[torch.tensor(chunk, device=self.vectors.device)] = vectors.to(self.vectors.device)
                    for r, key in zip(chunk, row_keys(batch["input_ids"], batch["attention_mask"])):
                        self.keys[r] = key
        finally:
            model.train(was_training)
        self.row_of = {}
        for r, key in enumerate(self.keys):
            self.row_of.setdefault(key, []).append(r)

    def fill(self, model) -> None:
        """Encode every entry (at the start of training)."""
        self._encode_rows(model, list(range(len(self.texts))))
        logger.info("negative cache: %d documents encoded", len(self.texts))

    def refresh(self, model) -> list[int]:
        """Re-encode the next ceil(ρ · size) entries; returns their rows."""
        if self.vectors is None:
            self.fill(model)
            return list(range(len(self.texts)))
        count = max(1, math.ceil(self.refresh_fraction * len(self.texts)))
        rows = [(self.next_row + i) % len(self.texts) for i in range(count)]
        self.next_row = (self.next_row + count) % len(self.texts)
        self._encode_rows(model, rows)
        self.refreshed_rows += count
        return rows

    def sample(self, query_vectors: torch.Tensor, exclude: list[set[bytes]], scale: float = 1.0) -> torch.Tensor:
        """(queries, k) cache rows drawn by Gumbel-max from softmax(scale · q·c / τ_s), excluded keys never drawn."""
        if self.vectors is None:
            raise RuntimeError("negative cache used before fill()")
        with torch.no_grad():
            logits = scale * query_vectors.detach().to(self.vectors.device) @ self.vectors.T / self.sample_temperature
            for i, keys in enumerate(exclude):
                rows = [r for key in keys for r in self.row_of.get(key, [])]
                if rows:
                    logits[i, rows] = float("-inf")
            uniform = torch.rand(logits.shape, generator=self.generator).clamp_(1e-12, 1.0 - 1e-12).to(logits.device)
            gumbel = -torch.log(-torch.log(uniform))
            k = min(self.num_negatives, len(self.texts))
            return (logits + gumbel).topk(k, dim=1).indices

    def negative_scores(self, query_vectors: torch.Tensor, exclude: list[set[bytes]], scale: float) -> torch.Tensor:
        """(queries, k) scores scale · q·c of sampled cached negatives (gradient to the queries only); -inf where
        a query had fewer than k documents it may draw."""
        rows = self.sample(query_vectors, exclude, scale)
        cached = self.vectors.to(query_vectors.device)[rows.to(query_vectors.device)]  # (queries, k, dim)
        scores = scale * torch.einsum("qd,qkd->qk", query_vectors, cached.to(query_vectors.dtype))
        for i, keys in enumerate(exclude):  # top-k may reach excluded rows when fewer than k remain
            banned = {r for key in keys for r in self.row_of.get(key, [])}
            if banned:
                mask = torch.tensor([int(r) in banned for r in rows[i].tolist()], device=scores.device)
                scores[i] = scores[i].masked_fill(mask, float("-inf"))
        return scores


__all__ = ["NegativeCache"]
