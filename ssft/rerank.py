"""ssft-rerank's first home (``python -m ssft.rerank``); the code lives in ``ssft.cli.rerank``."""
import sys

from ssft.cli.rerank import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
