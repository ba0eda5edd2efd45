"""ssft-rerank's first home (``python -m ssft.rerank``); the code lives in ``ssft.cli.rerank``."""
import sys
import warnings

from ssft.cli.rerank import main

# an old path kept for code written against earlier releases; the project itself imports the new homes
warnings.warn(f"{__name__} is deprecated: import from ssft.cli.rerank (the ssft-rerank command)", DeprecationWarning,
              stacklevel=2)

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
