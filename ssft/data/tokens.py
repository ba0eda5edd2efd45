"""Tokenisation done once per text: ``TokenCache`` keeps each text's token ids (no special tokens) and builds model
inputs from them, identical to what the tokenizer returns for the same call.

Training draws new negatives every epoch and validation reranks the same pairs every epoch, so the same texts
are tokenised again and again; with the cache each distinct text goes through the tokenizer once and a batch is
assembled from stored ids (a cross-encoder batch of 64 pairs × 128 tokens: ~60 ms of tokenizer → a few ms).

- single texts: ``prefix + ids[:max_length - specials] + suffix`` (``[CLS] … [SEP]``);
- pairs: the tokenizer's ``longest_first`` truncation rule (``pair_lengths``) on the two texts' full lengths,
  then ``prefix + a + middle + b + suffix`` (``[CLS] a [SEP] b [SEP]``) with its segment ids.

The special-token template is read off the tokenizer itself (it encodes two one-token texts and locates them), so
BERT-, RoBERTa- and MPNet-style templates all work; a tokenizer whose template or padding cannot be read this way
(left padding or truncation, no pad token) is called directly instead (``supported`` is False).
"""
from __future__ import annotations

from array import array

import torch


def pair_lengths(n1: int, n2: int, budget: int) -> tuple[int, int]:
    """Tokens kept of each text of a pair under ``longest_first`` truncation to ``budget`` tokens (max_length less
    the special tokens), as the tokenizers library computes it: the shorter text is kept whole when the longer can
    give up enough; otherwise both get half the budget (the first text the smaller half when it is the shorter)."""
    if n1 + n2 <= budget:
        return n1, n2
    swap = n1 > n2
    if swap:
        n1, n2 = n2, n1
    n2 = n1 if n1 > budget else max(n1, budget - n1)
    if n1 + n2 > budget:
        n1 = budget // 2
        n2 = n1 + budget % 2
    return (n2, n1) if swap else (n1, n2)


class TokenCache:
    def __init__(self, tokenizer, max_tokens: int):
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens  # ids kept per text; the full length is kept beside them
        # 4 bytes a token (array, not a list of ints); grows with the distinct texts seen (corpus + queries)
        self._ids: dict[str, tuple[array, int]] = {}
        self.supported = self._read_templates()

    def __len__(self) -> int:
        return len(self._ids)

    def _read_templates(self) -> bool:
        tok = self.tokenizer
        if getattr(tok, "padding_side", "right") != "right" or getattr(tok, "truncation_side", "right") != "right":
            return False
        if tok.pad_token_id is None:
            return False
        try:
            a = tok("a", add_special_tokens=False)["input_ids"]
            b = tok("b", add_special_tokens=False)["input_ids"]
            if len(a) != 1 or len(b) != 1 or a == b:
                return False
            single = tok("a")
            pair = tok("a", "b")
        except Exception:  # noqa: BLE001 - an unusual tokenizer: fall back to calling it
            return False
        ids = single["input_ids"]
        if ids.count(a[0]) != 1:
            return False
        i = ids.index(a[0])
        self._single = (ids[:i], ids[i + 1:])
        ids = pair["input_ids"]
        if ids.count(a[0]) != 1 or ids.count(b[0]) != 1 or ids.index(a[0]) > ids.index(b[0]):
            return False
        ia, ib = ids.index(a[0]), ids.index(b[0])
        self._pair = (ids[:ia], ids[ia + 1:ib], ids[ib + 1:])
        self._with_types = "token_type_ids" in pair
        if self._with_types:
            types = pair["token_type_ids"]
            self._pair_types = (types[:ia], types[ia], types[ia + 1:ib], types[ib], types[ib + 1:])
            self._single_types = single["token_type_ids"]
            if len(set(self._single_types)) != 1:
                return False
        return True

    # ------------------------------------------------------------ ids
    def ids(self, texts: list[str]) -> list[tuple[array, int]]:
        """(ids cut at ``max_tokens``, full length) of each text; texts not seen before are tokenised together."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._ids]
        if missing:
            encoded = self.tokenizer(missing, add_special_tokens=False, verbose=False)["input_ids"]
            for text, ids in zip(missing, encoded):
                self._ids[text] = (array("i", ids[: self.max_tokens]), len(ids))
        return [self._ids[t] for t in texts]

    # ------------------------------------------------------------ model inputs
    def _tensors(self, rows: list[list[int]], types: list[list[int]] | None) -> dict[str, torch.Tensor]:
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        out = {"input_ids": torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)}
        if types is not None:
            out["token_type_ids"] = torch.tensor([t + [0] * (width - len(t)) for t in types], dtype=torch.long)
        lengths = torch.tensor([len(r) for r in rows])
        out["attention_mask"] = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
        return out

    def single(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        """= ``tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")``."""
        if not self.supported or max_length > self.max_tokens + len(self._single[0]) + len(self._single[1]):
            return dict(self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"))
        rows = self._single_rows(texts, max_length)
        types = [[self._single_types[0]] * len(r) for r in rows] if self._with_types else None
        return self._tensors(rows, types)

    def pairs(self, first: list[str], second: list[str], max_length: int) -> dict[str, torch.Tensor]:
        """= ``tokenizer(first, second, padding=True, truncation="longest_first", max_length=max_length,
        return_tensors="pt")``."""
        if not self.supported or max_length > self.max_tokens:
            return dict(self.tokenizer(first, second, padding=True, truncation="longest_first", max_length=max_length,
                                       return_tensors="pt"))
        prefix, middle, suffix = self._pair
        budget = max_length - len(prefix) - len(middle) - len(suffix)
        rows, types = [], [] if self._with_types else None
        for (a, na), (b, nb) in zip(self.ids(first), self.ids(second)):
            k1, k2 = pair_lengths(na, nb, budget)
            rows.append(prefix + a[:k1].tolist() + middle + b[:k2].tolist() + suffix)
            if types is not None:
                tp, ta, tm, tb, ts = self._pair_types
                types.append(tp + [ta] * k1 + tm + [tb] * k2 + ts)
        return self._tensors(rows, types)

    def two_segments(self, first: list[str], second: list[str], first_length: int, max_length: int
                     ) -> dict[str, torch.Tensor]:
        """Each pair as two single-text rows side by side, ``[CLS] a [SEP] [CLS] b [SEP]``: ``a`` as ``single`` cuts
        it at ``first_length`` tokens, ``b`` at what is left of ``max_length``; ``token_type_ids`` say which text a
        token belongs to (0: ``a``, 1: ``b``), so a text that holds a special token's literal cannot move the border."""
        heads, rows = self._two_segment_rows(first, second, first_length, max_length)
        return self._tensors(rows, [[0] * len(a) + [1] * (len(row) - len(a)) for a, row in zip(heads, rows)])

    def two_segment_lengths(self, first: list[str], second: list[str], first_length: int, max_length: int) -> list[int]:
        """The row length ``two_segments`` builds for each pair (its rows, unpadded)."""
        return [len(row) for row in self._two_segment_rows(first, second, first_length, max_length)[1]]

    def _two_segment_rows(self, first: list[str], second: list[str], first_length: int, max_length: int
                          ) -> tuple[list[list[int]], list[list[int]]]:
        """(the first texts' rows, the pairs' rows): ``[CLS] a [SEP]`` then ``[CLS] b [SEP]`` cut to what is left."""
        heads = self._single_rows(first, first_length)
        if self.supported:
            self.ids(second)  # the texts not seen yet go through the tokenizer together, not one by one below
        return heads, [a + self._single_rows([b], max_length - len(a))[0] for a, b in zip(heads, second)]

    def _single_rows(self, texts: list[str], max_length: int) -> list[list[int]]:
        if not self.supported or max_length > self.max_tokens + len(self._single[0]) + len(self._single[1]):
            return self.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
        prefix, suffix = self._single
        keep = max_length - len(prefix) - len(suffix)
        return [prefix + ids[:keep].tolist() + suffix for ids, _ in self.ids(texts)]


__all__ = ["TokenCache", "pair_lengths"]
