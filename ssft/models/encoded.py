"""``Encoded``: the representations a bi-encoder gives a batch of texts (what scoring, the negative cache and the
on-disk embedding cache hold)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Encoded:
    """Representations of a batch of texts: ``vectors`` (n, dim) for single-vector models, or (n, tokens, dim)
    with ``mask`` (n, tokens) marking the tokens that take part in scoring (multi-vector models)."""

    vectors: torch.Tensor
    mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.vectors.shape[0]

    def select(self, index: torch.Tensor) -> Encoded:
        return Encoded(self.vectors[index], None if self.mask is None else self.mask[index])

    def split(self) -> list[Encoded]:
        """One ``Encoded`` per text, multi-vector ones trimmed of their unused (masked) trailing tokens."""
        if self.mask is None:
            return [Encoded(self.vectors[i : i + 1]) for i in range(len(self))]
        # each row's last used token + 1 (1 for a row with none), for all rows at once: one device sync, not one per row
        width = self.mask.shape[1]
        used = self.mask.bool()
        last = width - used.flip(1).int().argmax(1)
        keep = torch.where(used.any(1), last, torch.ones_like(last)).tolist()
        return [Encoded(self.vectors[i : i + 1, :k], self.mask[i : i + 1, :k]) for i, k in enumerate(keep)]

    @staticmethod
    def stack(items: list[Encoded]) -> Encoded:
        """Inverse of ``split``: multi-vector items are padded (mask 0) to the longest."""
        if items[0].mask is None:
            return Encoded(torch.cat([it.vectors for it in items]))
        width = max(it.vectors.shape[1] for it in items)
        vectors = items[0].vectors.new_zeros(len(items), width, items[0].vectors.shape[-1])
        mask = items[0].mask.new_zeros(len(items), width)
        for i, it in enumerate(items):
            n = it.vectors.shape[1]
            vectors[i, :n] = it.vectors[0]
            mask[i, :n] = it.mask[0]
        return Encoded(vectors, mask)


__all__ = ["Encoded"]
