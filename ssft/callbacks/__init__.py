"""Trainer callbacks by name."""
from ssft.callbacks import best_epoch  # noqa: F401
