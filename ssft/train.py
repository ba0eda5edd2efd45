"""``ssft.train(recipe, overrides=None, *, overwrite=False, resume_with_changes=False) -> ssft.Run``: train and evaluate
what a recipe describes (``ssft.api.train``, whose docstring says more).

This module is also ssft-train's first home, kept so what users typed still works: ``python -m ssft.train RECIPE``,
``accelerate launch ssft/train.py RECIPE`` (ssft installed with ``pip install -e .``) and
``from ssft.train import run_recipe``. Calling the module is calling ``ssft.api.train``: ``ssft.train`` is both."""
import sys

from ssft import _FunctionModule
from ssft.cli.train import main
from ssft.firststage.runs import first_stage_run
from ssft.pipeline.run import run_recipe

__all__ = ["first_stage_run", "main", "run_recipe"]


if __name__ == "__main__":
    sys.exit(main())
else:
    sys.modules[__name__].__class__ = _FunctionModule  # ssft.train(...) is ssft.api.train(...)
