"""Rankers by architecture name: cross (monoBERT), twin (TwinBERT), colbert (ColBERT), dense (dual encoder)
(``ssft.config.registry.MODELS`` maps each name to its class; an architecture's module is imported when it is used)."""
from ssft.models.base import Ranker, load_ranker

__all__ = ["Ranker", "load_ranker"]
