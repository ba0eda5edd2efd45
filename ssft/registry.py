"""The registries' first home (``from ssft.registry import MODELS``); the code lives in ``ssft.config.registry``."""
import warnings

from ssft.config.registry import ADAPTERS, CALLBACKS, LOSSES, MODELS

# an old path kept for code written against earlier releases; the project itself imports the new homes
warnings.warn(f"{__name__} is deprecated: import from ssft.config.registry", DeprecationWarning,
              stacklevel=2)

__all__ = ["ADAPTERS", "CALLBACKS", "LOSSES", "MODELS"]
