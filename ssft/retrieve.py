"""ssft-retrieve's first home (``python -m ssft.retrieve``); the code lives in ``ssft.cli.retrieve``."""
import sys

from ssft.cli.retrieve import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
