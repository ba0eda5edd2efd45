"""ssft-train's first home, kept so what users typed still works: ``python -m ssft.train RECIPE``,
``accelerate launch ssft/train.py RECIPE`` (ssft installed with ``pip install -e .``) and
``from ssft.train import run_recipe``. The code lives in ``ssft.cli.train`` and ``ssft.pipeline.run``."""
import sys

from ssft.cli.train import main
from ssft.firststage.runs import first_stage_run
from ssft.pipeline.run import run_recipe

__all__ = ["first_stage_run", "main", "run_recipe"]

if __name__ == "__main__":
    sys.exit(main())
