"""Rankers by architecture name: cross (monoBERT), twin (TwinBERT), colbert (ColBERT), dense (dual encoder)."""
from ssft.models import colbert, cross, dense, twin  # noqa: F401  (registers)
from ssft.models.base import Ranker, load_ranker

__all__ = ["Ranker", "load_ranker"]
