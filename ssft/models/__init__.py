"""Rankers by architecture name: cross (monoBERT)."""
from ssft.models import cross  # noqa: F401  (registers)
from ssft.models.base import Ranker, load_ranker

__all__ = ["Ranker", "load_ranker"]
