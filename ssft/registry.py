"""The registries' first home (``from ssft.registry import MODELS``); the code lives in ``ssft.config.registry``."""
from ssft.config.registry import ADAPTERS, CALLBACKS, LOSSES, MODELS

__all__ = ["ADAPTERS", "CALLBACKS", "LOSSES", "MODELS"]
