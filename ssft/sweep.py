"""ssft-sweep's first home (``python -m ssft.sweep``, ``from ssft.sweep import load_grid``); the code lives in
``ssft.pipeline.sweep`` and ``ssft.cli.sweep``."""
import sys
import warnings

from ssft.cli.sweep import main
from ssft.pipeline.sweep import (
    Folds,
    Grid,
    Run,
    check_runs,
    expand,
    kfold_splits,
    load_grid,
    run_sweep,
    subprocess_runner,
    train_command,
    write_fold_datasets,
)

# an old path kept for code written against earlier releases; the project itself imports the new homes
warnings.warn(f"{__name__} is deprecated: import from ssft.pipeline.sweep and ssft.cli.sweep (the ssft-sweep command)",
              DeprecationWarning, stacklevel=2)

__all__ = ["Folds", "Grid", "Run", "check_runs", "expand", "kfold_splits", "load_grid", "main", "run_sweep",
           "subprocess_runner", "train_command", "write_fold_datasets"]

if __name__ == "__main__":
    sys.exit(main())
