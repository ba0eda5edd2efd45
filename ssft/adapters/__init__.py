"""Fine-tuning methods by name: full, lora, lora++, prefix, prompt, hidden_prefix, ss_hidden_prefix, ss_lora, hybrid
(``ssft.config.registry.ADAPTERS`` maps each name to its class; a method's module is imported when it is used)."""
from ssft.adapters.base import Adapter, count_parameters

__all__ = ["Adapter", "count_parameters"]
