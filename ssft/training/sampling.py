"""Training batches by token count: which items share a batch, and in what order the batches come.

``training.train_sampling_strategy: group_by_length`` batches training items of similar width together, each item
counted in the tokens the ranker computes for it with the documents it brings that epoch (``token_lengths``: a
batch pads every document to its longest one, so an item's width is set by its longest document, negatives
included), so that a batch computes little padding. ``TokenLengthGroupedSampler`` makes each epoch: the items shuffled, cut
into windows of ``window_batches`` batches, each window sorted longest first and cut into batches, then the full
batches of every window in a shuffled order (the one holding the longest item first, so that a batch too big for
memory fails at the first step, not late in the epoch), the one partial batch last. Every item comes once per epoch,
as under random sampling; what changes is which items share a batch — for a loss with in-batch negatives, which
documents each query is contrasted with. ``training.train_sampling_strategy: random`` switches it off.

transformers' own ``LengthGroupedSampler`` keeps each window's batches longest to shortest: on a training set
smaller than one window (50 batches) every epoch then runs from the longest items to the shortest.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence

import torch
from torch.utils.data import Sampler

logger = logging.getLogger(__name__)


def token_lengths(ranker, items: Sequence[tuple[str, str | Sequence[str]]]) -> list[int]:
    """Per (query, documents) item, the width its rows give a batch, in the ranker's tokens (each text counted once
    by its ``TokenCache``, cut where the ranker cuts it): a bi-encoder's query plus, for each document, the item's
    longest document (a batch pads its documents to the longest of them all); a cross-encoder's longest
    (query, document) pair, cut at ``max_length``, for each document. ``documents`` may be one text. Characters
    where the ranker has no token cache."""
    items = [(q, [d] if isinstance(d, str) else list(d)) for q, d in items]
    if not hasattr(ranker, "token_cache"):
        return [len(q) + len(docs) * max((len(d) for d in docs), default=0) for q, docs in items]
    cache = ranker.token_cache()
    texts = list(dict.fromkeys([q for q, _ in items] + [d for _, docs in items for d in docs]))
    count = dict(zip(texts, (n for _, n in cache.ids(texts))))
    q_max, d_max = ranker.query_max_length, ranker.max_length
    if getattr(ranker, "bi_encoder", True):
        return [min(count[q], q_max) + len(docs) * max((min(count[d], d_max) for d in docs), default=0)
                for q, docs in items]
    return [len(docs) * max((min(count[q] + count[d], d_max) for d in docs), default=0) for q, docs in items]


class TokenLengthGroupedSampler(Sampler[int]):
    """Item indices for batches of ``batch_size`` items of similar ``lengths``, the batches in a shuffled order (the
    module docstring). ``lengths``: one per item, or a function giving them, called at the start of each epoch
    (training groups draw new negatives every epoch; ``size`` is then the number of items). The order of an epoch is
    drawn from ``generator`` where given, else from ``seed`` + the epoch (``set_epoch``, which the Trainer calls
    before each epoch: a run resumed mid-epoch replays that epoch's order, as accelerate's seedable sampler does for
    shuffled batches), else from torch's global generator, as ``torch.utils.data.RandomSampler`` does."""

    def __init__(self, lengths: Sequence[int] | Callable[[], Sequence[int]], batch_size: int, window_batches: int = 50,
                 generator: torch.Generator | None = None, size: int | None = None, seed: int | None = None):
        if batch_size < 1 or window_batches < 1:
            raise ValueError(f"batch_size and window_batches must be at least 1, got {batch_size}, {window_batches}")
        if callable(lengths) and size is None:
            raise ValueError("lengths given as a function: size (the number of items) is needed too")
        self._lengths = lengths
        self.size = len(lengths) if size is None else int(size)
        self.batch_size, self.window_batches, self.generator = int(batch_size), int(window_batches), generator
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    @property
    def lengths(self) -> list[int]:
        """This epoch's length of each item (a function of them is called now, with a log line: counting a large
        training set's tokens takes a while before the epoch's first step)."""
        if callable(self._lengths):
            started = time.perf_counter()
            logger.info("grouping batches by token count: counting the tokens of %d training items (epoch %d)",
                        self.size, self.epoch)
            lengths = [int(n) for n in self._lengths()]
            logger.info("grouping batches by token count: %d items counted in %.1f s", len(lengths),
                        time.perf_counter() - started)
        else:
            lengths = [int(n) for n in self._lengths]
        if len(lengths) != self.size:
            raise ValueError(f"{len(lengths)} lengths for {self.size} items")
        return lengths

    def __len__(self) -> int:
        return self.size

    def batches(self) -> list[list[int]]:
        """One epoch's batches in order (the last one partial when ``batch_size`` does not divide the items)."""
        generator = self.generator
        if generator is None:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch if self.seed is not None
                                  else int(torch.empty((), dtype=torch.int64).random_().item()))
        lengths = self.lengths
        order = torch.randperm(self.size, generator=generator).tolist()
        window = self.batch_size * self.window_batches
        batches: list[list[int]] = []
        for start in range(0, len(order), window):
            chunk = sorted(order[start : start + window], key=lambda i: -lengths[i])  # stable: ties stay shuffled
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        full = [b for b in batches if len(b) == self.batch_size]
        partial = [b for b in batches if len(b) < self.batch_size]  # at most one: only the last window can be short
        full = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()]
        if full:
            longest = max(range(len(full)), key=lambda k: max(lengths[i] for i in full[k]))
            full[0], full[longest] = full[longest], full[0]
        return full + partial

    def __iter__(self) -> Iterator[int]:
        return iter([i for batch in self.batches() for i in batch])


__all__ = ["TokenLengthGroupedSampler", "token_lengths"]
