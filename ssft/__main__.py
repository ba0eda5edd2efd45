"""``python -m ssft RECIPE``: ssft-train."""
import sys

from ssft.cli.train import main

sys.exit(main())
