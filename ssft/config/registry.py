"""Name → class registries: a recipe names every model, adapter, loss and callback by one of these keys.

A leaf module: each entry is a dotted path (``"ssft.adapters.lora:Lora"``), imported only when ``get`` asks for
that name, so listing the names, testing ``name in REGISTRY`` and the unknown-name error import no plugin (and no
torch). A user plugin is added with ``register(name, target)``, the target a dotted path or the object itself
(``@MODELS.register("mine")`` as a decorator works too). Every class a registry returns declares its own name
(``Ranker.architecture``, ``Adapter.name``, ``RankingLoss.name``, a callback's ``name``), and what other
components need to know of it as capability flags on its base class (``Ranker.full_retrieval``,
``Adapter.needs_towers``, ``RankingLoss.needs_teacher`` ...): rules read those, never the names.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from ssft.core.errors import SsftError, closest


def import_from_string(target: str) -> Any:
    """The object a dotted path names: ``"package.module:Name"`` or ``"package.module.Name"`` (as
    sentence-transformers' ``import_from_string``); only that module (and what it imports) is imported."""
    module_name, colon, attribute = target.partition(":")
    if not colon:
        module_name, _, attribute = target.rpartition(".")
    if not module_name or not attribute:
        raise ImportError(f"'{target}' is not a dotted path (package.module:Name)")
    obj: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


class Registry:
    """Names of one kind of plugin (``kind``, as the unknown-name error says it), each with the dotted path of its
    class; ``name_attribute`` is the class attribute that holds the name the class declares for itself."""

    def __init__(self, kind: str, entries: dict[str, str] | None = None, name_attribute: str = "name"):
        self.kind = kind
        self.name_attribute = name_attribute
        self._entries: dict[str, Any] = {}  # name → dotted path (str) or the object, in registration order
        self._loaded: dict[str, Any] = {}
        for name, target in (entries or {}).items():
            self.register(name, target)

    def register(self, name: str, target: Any = None) -> Any:
        """Add ``name`` → ``target`` (a dotted path, imported on first use, or the object itself). Without a
        target, a decorator: ``@MODELS.register("mine")`` over a class registers that class."""
        if target is None:
            def add(obj: Any) -> Any:
                self.register(name, obj)
                return obj

            return add
        if name in self._entries:
            raise ValueError(f"{self.kind} '{name}' registered twice")
        self._entries[name] = target
        if not isinstance(target, str):
            self._loaded[name] = target
        return target

    def get(self, name: str, where: str = "") -> Any:
        """The class registered as ``name``, importing its module (only it) on first use."""
        at = f"{where}: " if where else ""
        if name not in self._entries:
            raise SsftError(f"{at}unknown {self.kind} '{name}'{closest(str(name), self._entries)}; "
                            f"known: {', '.join(self.names())}")
        if name not in self._loaded:
            target = self._entries[name]
            try:
                self._loaded[name] = import_from_string(target)
            except (ImportError, AttributeError) as err:
                raise SsftError(f"{at}{self.kind} '{name}' is registered as {target}, which cannot be imported: "
                                f"{err}") from err
        return self._loaded[name]

    def target(self, name: str) -> Any:
        """What ``name`` was registered with (a dotted path, or the object), without importing anything."""
        return self._entries[name]

    def names(self) -> list[str]:
        """Every registered name, sorted (imports nothing)."""
        return sorted(self._entries)

    def declared(self) -> list[str]:
        """Every registered name in registration order (imports nothing)."""
        return list(self._entries)

    def matching(self, predicate: Callable[[Any], bool], names: Iterable[str] | None = None) -> list[str]:
        """The names (in registration order, or of ``names``) whose class satisfies ``predicate``: imports them."""
        return [name for name in (self.declared() if names is None else names) if predicate(self.get(name))]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries

    def __iter__(self):
        return iter(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.declared())})"


MODELS = Registry("model architecture", {
    "cross": "ssft.models.cross:CrossEncoder",
    "twin": "ssft.models.twin:TwinBert",
    "colbert": "ssft.models.colbert:ColBert",
    "dense": "ssft.models.dense:DenseDualEncoder",
}, name_attribute="architecture")

ADAPTERS = Registry("fine-tuning method", {
    "full": "ssft.adapters.full:FullFineTuning",
    "lora": "ssft.adapters.lora:Lora",
    "lora++": "ssft.adapters.lora:LoraPlusPlus",
    "prefix": "ssft.adapters.prompt:PrefixTuning",
    "prompt": "ssft.adapters.prompt:PromptTuning",
    "hidden_prefix": "ssft.adapters.hidden_prefix:HiddenPrefixTuning",
    "ss_hidden_prefix": "ssft.adapters.semi_siamese:SsHiddenPrefixTuning",
    "ss_lora": "ssft.adapters.semi_siamese:SsLora",
    "hybrid": "ssft.adapters.hybrid:Hybrid",
})

LOSSES = Registry("loss", {
    "pairwise_softmax": "ssft.losses.pairwise_softmax:PairwiseSoftmaxLoss",
    "bce": "ssft.losses.bce:PointwiseBCELoss",
    "listwise_ce": "ssft.losses.listwise_ce:ListwiseSoftmaxCELoss",
    "contrastive": "ssft.losses.contrastive:ContrastiveLoss",
    "tct": "ssft.losses.tct:TightlyCoupledDistillationLoss",
    "margin_mse": "ssft.losses.margin_mse:MarginMSELoss",
    "listwise_kl": "ssft.losses.listwise_kl:ListwiseKLLoss",
})

CALLBACKS = Registry("callback", {
    "best_epoch": "ssft.training.callbacks.best_epoch:BestEpochCallback",
    "collapse_monitor": "ssft.training.callbacks.collapse_monitor:CollapseMonitorCallback",
    "daft": "ssft.training.callbacks.daft:DaftCallback",
    "negative_cache": "ssft.training.callbacks.negative_cache:NegativeCacheCallback",
})

__all__ = ["ADAPTERS", "CALLBACKS", "LOSSES", "MODELS", "Registry", "import_from_string"]
