"""Fine-tuning methods by name: full, lora, lora++, prefix, prompt, hidden_prefix, ss_hidden_prefix, ss_lora, hybrid."""
from ssft.adapters import full, hidden_prefix, hybrid, lora, prompt, semi_siamese  # noqa: F401  (registers the methods)
from ssft.adapters.base import Adapter, count_parameters

__all__ = ["Adapter", "count_parameters"]
