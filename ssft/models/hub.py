"""Model-name resolution lives in ``ssft.core.hub`` (the recipe checks lengths with it); this module keeps the
names at their first home."""
from ssft.core.hub import ALIASES, PIP_SHIPPED, PIP_SPLIT_ZIP, max_input_length, resolve_model

__all__ = ["ALIASES", "PIP_SHIPPED", "PIP_SPLIT_ZIP", "max_input_length", "resolve_model"]
