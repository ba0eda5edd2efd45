"""Shared test steps."""
from __future__ import annotations

from pathlib import Path

import torch

from ssft.models import load_ranker


def assert_save_load_round_trip(ranker, folder: Path, queries: list[str], documents: list[str]):
    """Move every trainable weight off its initial value (so a weight lost in saving would show), save, load,
    and check the loaded ranker scores the pairs identically and trains nothing. Returns the loaded ranker."""
    with torch.no_grad():
        for p in ranker.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    ranker.eval()
    with torch.no_grad():
        expected = ranker(**ranker.tokenize(queries, documents))
    ranker.save(folder)
    loaded = load_ranker(folder)
    assert type(loaded) is type(ranker)
    with torch.no_grad():
        got = loaded(**loaded.tokenize(queries, documents))
    torch.testing.assert_close(got, expected)
    assert not any(p.requires_grad for p in loaded.parameters())
    return loaded
