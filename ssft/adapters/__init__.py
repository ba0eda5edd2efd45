"""Fine-tuning methods by name: full, lora, lora++, prefix, prompt."""
from ssft.adapters import full, lora, prompt  # noqa: F401  (registers the methods)
from ssft.adapters.base import Adapter, count_parameters

__all__ = ["Adapter", "count_parameters"]
