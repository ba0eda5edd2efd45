"""Name → class registries: a recipe names every model, adapter, loss and callback by one of these keys."""
from __future__ import annotations

from typing import Any, Callable

from ssft.core.errors import SsftError, closest


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[Any], Any]:
        def add(obj):
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' registered twice")
            self._entries[name] = obj
            return obj

        return add

    def get(self, name: str, where: str = "") -> Any:
        _import_builtin()
        if name not in self._entries:
            at = f"{where}: " if where else ""
            raise SsftError(
                f"{at}unknown {self.kind} '{name}'{closest(name, self._entries)}; known: {', '.join(sorted(self._entries))}"
            )
        return self._entries[name]

    def names(self) -> list[str]:
        _import_builtin()
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        _import_builtin()
        return name in self._entries


MODELS = Registry("model architecture")
ADAPTERS = Registry("fine-tuning method")
LOSSES = Registry("loss")
CALLBACKS = Registry("callback")


def _import_builtin() -> None:
    # Importing the packages runs their @register decorators.
    import ssft.adapters  # noqa: F401
    import ssft.training.callbacks  # noqa: F401
    import ssft.losses  # noqa: F401
    import ssft.models  # noqa: F401
