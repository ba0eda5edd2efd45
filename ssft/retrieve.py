"""``ssft.retrieve(model, dataset, split="test", ...)``: full retrieval from Python (``ssft.api.retrieve``, whose docstring
says more). This module is also ssft-retrieve's first home (``python -m ssft.retrieve``); the code lives in
``ssft.cli.retrieve``. Calling the module is calling ``ssft.api.retrieve``."""
import sys

from ssft import _FunctionModule
from ssft.cli.retrieve import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
else:
    sys.modules[__name__].__class__ = _FunctionModule  # ssft.retrieve(...) is ssft.api.retrieve(...)
