"""ssft: semi-Siamese fine-tuning of neural rankers on the Hugging Face stack.

The public API (``ssft.api``; imported on first use, so ``import ssft`` stays fast and loads no torch)::

    import ssft

    run = ssft.train("recipes/quickstart.yaml", {"training.num_train_epochs": 1})   # -> ssft.Run
    model = ssft.load(run.output_dir)                                                # -> ssft.Ranker
    model.rank("a query", ["doc a", "doc b"])      # [{"corpus_id": 1, "score": 3.2}, ...], best first
    model.predict([("a query", "doc a")])          # one score per pair
    ssft.evaluate(model, "nfcorpus", split="test", first_stage="bm25", depth=100)

    index = ssft.index(model, "nfcorpus")          # your own queries over a corpus (dataset, file or list of texts)
    index.search(["vitamin d and bones"], top_k=10)  # [[{"corpus_id": "MED-10", "score": ...}, ...]]

and ``ssft.retrieve``, ``ssft.encode``, ``ssft.export``, ``ssft.mine``: what the console scripts run;
``ssft.load_dataset(name)`` gives a dataset's ``(corpus, queries, qrels)``, ``ssft.read_run`` a TREC run.
"""
from __future__ import annotations

import importlib
import inspect
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it (imported when the name is first used); ``train`` and ``retrieve`` are also the
# modules ssft.train / ssft.retrieve of earlier releases (``from ssft.train import run_recipe``): those modules are
# callable (``_FunctionModule``), so ``ssft.train`` is the same object however it was first imported
_LAZY = {
    "load": "ssft.api", "evaluate": "ssft.api", "encode": "ssft.api",
    "export": "ssft.api", "mine": "ssft.api", "Run": "ssft.api", "Ranker": "ssft.models.base",
    "index": "ssft.api", "Index": "ssft.api", "load_dataset": "ssft.api", "read_run": "ssft.api",
}
__all__ = ["Index", "Ranker", "Run", "__version__", "encode", "evaluate", "export", "index", "load", "load_dataset",
           "mine", "read_run", "retrieve", "train"]

if TYPE_CHECKING:  # editors and documentation tools see the names without importing them at run time
    from ssft.api import Index, Run, encode, evaluate, export, index, load, load_dataset, mine, read_run, retrieve, train
    from ssft.models.base import Ranker


class _FunctionModule(types.ModuleType):
    """A module of an earlier release that is now also an API function: calling ``ssft.train`` calls
    ``ssft.api.train``, while ``ssft.train.run_recipe`` and ``python -m ssft.train`` work as before."""

    def _function(self):
        return getattr(importlib.import_module("ssft.api"), self.__name__.rpartition(".")[2])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function()(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self._function())


def __getattr__(name: str) -> Any:
    if name in ("train", "retrieve"):
        return importlib.import_module(f"ssft.{name}")  # the module sets itself here as it is imported
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ssft' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
