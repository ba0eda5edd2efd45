"""Batches by exact token count, and the progress of the ranker's inference calls.

A batch is padded to its longest row, so the rows of a batch should be of about one length. Characters are a poor
proxy for tokens (a URL, a formula or a table is many tokens per character, plain prose few): batches cut in
character order pad more than those cut in token order.

- ``single_lengths`` / ``pair_lengths_of``: the exact row length the model's tokenisation gives each text or pair
  (special tokens included, truncated at ``max_length`` as the model truncates), read from the ranker's
  ``TokenCache`` (``ssft.data.tokens``): every distinct text goes through the tokenizer's fast batch call once, and
  the per-batch assembly then reads the stored ids (no second tokenisation).
- ``token_lengths``: a model's own ``token_lengths(texts, tower)`` where it has one (every ssft bi-encoder), else
  the attention masks of its ``tokenize_queries`` / ``tokenize_documents``.
- ``length_batches``: input indices ordered longest first by token count (ties by index: deterministic), cut into
  batches; callers write each batch's results back at its indices, so results come back in input order.
- ``inference_progress``: sentence-transformers' ``show_progress_bar`` on ssft's progress helper
  (``ssft.core.progress``): None (auto) shows progress past ``AUTO_PROGRESS_ITEMS`` items (a bar on a terminal or in
  a notebook, else ``ssft.progress`` log lines), True forces a bar, False is silent.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ssft.core import progress as progress_lines
from ssft.core.errors import SsftError
from ssft.data.tokens import pair_lengths

AUTO_PROGRESS_ITEMS = 256  # show_progress_bar=None: progress for calls of more items than this
_FALLBACK_CHUNK = 1024  # texts tokenised at once where a model gives no token counts of its own

__all__ = ["AUTO_PROGRESS_ITEMS", "as_float_tensor", "cached_lengths", "check_flag", "in_notebook", "inference_progress",
           "length_batches", "length_order", "padded_positions", "pair_lengths_of", "single_lengths", "token_lengths"]


# ---------------------------------------------------------------- batches
def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Batches of input indices, longest first by token count.

    Args:
        lengths: each item's token count (its padded-free row length).
        batch_size: items per batch (the last batch may hold fewer).

    Returns:
        Lists of indices into ``lengths``: all indices once, ordered by decreasing length, ties by increasing index,
        cut every ``batch_size``.
    """
    order = length_order(lengths)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def length_order(lengths: Sequence[int]) -> list[int]:
    """Input indices by decreasing token count, ties by increasing index (deterministic): the order
    ``length_batches`` cuts batches in."""
    return sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))


def padded_positions(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> int:
    """Token positions the model computes for ``batches``: each batch's rows times its longest row."""
    return sum(len(rows) * max(int(lengths[i]) for i in rows) for rows in batches if rows)


# ---------------------------------------------------------------- exact token counts
_CACHE_CHUNK = 8192  # texts handed to the tokenizer's batch call at once (its encodings of a whole corpus are large)


def cached_lengths(cache, texts: Sequence[str]) -> list[int]:
    """Each text's full token count without special tokens, from ``cache`` (a ``TokenCache``: texts it has not seen
    are tokenised, ``_CACHE_CHUNK`` at a time, and kept for the batches' assembly)."""
    texts = list(texts)
    out: list[int] = []
    for start in range(0, len(texts), _CACHE_CHUNK):
        out.extend(n for _, n in cache.ids(texts[start : start + _CACHE_CHUNK]))
    return out


def single_lengths(tokenizer, cache, texts: Sequence[str], max_length: int) -> list[int]:
    """Row length of each text as ``tokenizer(texts, truncation=True, max_length=max_length)`` builds it (special
    tokens included, padding not).

    Args:
        tokenizer: the tokenizer the model's rows come from.
        cache: its ``TokenCache`` (None: the tokenizer is called).
        texts: the texts (prompts already in front).
        max_length: the truncation length.

    Returns:
        One count per text.
    """
    texts = list(texts)
    if not texts:
        return []
    if cache is None or not cache.supported:
        return [len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_length, verbose=False)["input_ids"]]
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    keep = max(max_length - specials, 0)
    return [min(n, keep) + specials for n in cached_lengths(cache, texts)]


def pair_lengths_of(tokenizer, cache, first: Sequence[str], second: Sequence[str], max_length: int) -> list[int]:
    """Row length of each pair as ``tokenizer(first, second, truncation="longest_first", max_length=max_length)``
    builds it (a cross-encoder's input).

    Args:
        tokenizer: the tokenizer the model's rows come from.
        cache: its ``TokenCache`` (None: the tokenizer is called).
        first: the first text of each pair (the queries).
        second: the second text of each pair (the documents).
        max_length: the truncation length.

    Returns:
        One count per pair.
    """
    first, second = list(first), list(second)
    if not first:
        return []
    if cache is None or not cache.supported:
        out = tokenizer(first, second, truncation="longest_first", max_length=max_length, verbose=False)
        return [len(ids) for ids in out["input_ids"]]
    specials = tokenizer.num_special_tokens_to_add(pair=True)
    budget = max(max_length - specials, 0)
    distinct = list(dict.fromkeys(first + second))
    counts = dict(zip(distinct, cached_lengths(cache, distinct)))
    return [sum(pair_lengths(counts[a], counts[b], budget)) + specials for a, b in zip(first, second)]


def token_lengths(model, texts: Sequence[str], tower: str) -> list[int]:
    """Row length of each text in ``model``'s ``tower`` (``query`` or ``document``).

    Args:
        model: a bi-encoder (its own ``token_lengths``), or any model with ``tokenize_queries`` /
            ``tokenize_documents`` (their attention masks are counted: the texts are tokenised twice).
        texts: the texts.
        tower: ``query`` or ``document``.

    Returns:
        One count per text.
    """
    own = getattr(model, "token_lengths", None)
    if callable(own):
        return list(own(texts, tower))
    tokenize = model.tokenize_queries if tower == "query" else model.tokenize_documents
    texts = list(texts)
    out: list[int] = []
    for start in range(0, len(texts), _FALLBACK_CHUNK):
        mask = tokenize(texts[start : start + _FALLBACK_CHUNK])["attention_mask"]
        out.extend(int(n) for n in mask.sum(1).tolist())
    return out


# ---------------------------------------------------------------- progress
def in_notebook() -> bool:
    """True inside a Jupyter kernel (where tqdm.auto draws a widget)."""
    shell = sys.modules.get("IPython")
    if shell is None or "ipykernel" not in sys.modules:
        return False
    try:
        return type(shell.get_ipython()).__name__ == "ZMQInteractiveShell"
    except Exception:  # noqa: BLE001 - no IPython shell running
        return False


class _Bar:
    """A forced tqdm bar with ``Progress``'s interface (``update``, ``close``, a context manager)."""

    def __init__(self, what: str, total: int, unit: str):
        self._bar = tqdm(total=total, desc=what, unit=unit, leave=False, file=sys.stderr)

    def update(self, n: int = 1) -> None:
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def inference_progress(what: str, total: int, unit: str, show: bool | None):
    """The progress of one inference call of ``total`` items, as sentence-transformers' ``show_progress_bar``.

    Args:
        what: the stage's name (``encoding documents``).
        total: items the call computes.
        unit: what an item is (``texts``, ``pairs``).
        show: None (auto: shown past ``AUTO_PROGRESS_ITEMS`` items: a bar on a terminal or in a notebook, else
            ``ssft.progress`` log lines, under ssft's own switches), True (a bar, always) or False (silent).

    Returns:
        A context manager with ``update(n)``.
    """
    if show is True:
        return _Bar(what, total, unit)
    if show is None and total > AUTO_PROGRESS_ITEMS:
        if in_notebook() and progress_lines.enabled():
            return _Bar(what, total, unit)
        return progress_lines.Progress(what, total, unit)
    return progress_lines.Progress(what, total, unit, show=False)


def check_flag(value: Any, name: str) -> bool | None:
    """A ``show_progress_bar``-like flag: None, True or False (a one-line error naming ``name`` otherwise)."""
    if value is None or isinstance(value, bool):
        return value
    raise SsftError(f"{name} must be True, False or None, got {value!r}")


def as_float_tensor(values: Any, name: str) -> torch.Tensor:
    """Embeddings (a numpy array, a tensor, a list of either or of numbers) as a float32 CPU tensor."""
    try:
        if isinstance(values, torch.Tensor):
            return values.detach().float().cpu()
        if isinstance(values, (list, tuple)) and values and isinstance(values[0], torch.Tensor):
            return torch.stack([v.detach().float().cpu() for v in values])
        return torch.as_tensor(np.asarray(values, dtype=np.float32))
    except (TypeError, ValueError, RuntimeError) as err:
        raise SsftError(f"{name}: expected embeddings (an array or tensor of numbers), got "
                        f"{type(values).__name__} ({str(err).splitlines()[0] if str(err) else 'unreadable'})") from None
