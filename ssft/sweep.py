"""ssft-sweep's first home (``python -m ssft.sweep``, ``from ssft.sweep import load_grid``); the code lives in
``ssft.pipeline.sweep`` and ``ssft.cli.sweep``."""
import sys

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

__all__ = ["Folds", "Grid", "Run", "check_runs", "expand", "kfold_splits", "load_grid", "main", "run_sweep",
           "subprocess_runner", "train_command", "write_fold_datasets"]

if __name__ == "__main__":
    sys.exit(main())
