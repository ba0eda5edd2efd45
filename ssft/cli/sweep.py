"""ssft-sweep GRID.yaml [--dry-run]: every combination of a grid's override values as one ssft-train run
(``ssft.pipeline.sweep``)."""
from __future__ import annotations

import logging
import sys

from ssft.cli._common import make_parser, parse_args
from ssft.core.errors import cli_entry


@cli_entry("ssft-sweep")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-sweep", "Run a grid of ssft-train recipes, resumably.")
    parser.add_argument("grid", help="grid YAML file")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and their state, train nothing")
    ns = parse_args(parser, argv)
    from ssft.pipeline.sweep import check_outputs, expand, load_grid, run_sweep, train_command
    from ssft.training.checkpoints import complete_checkpoints

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    grid = load_grid(ns.grid)
    if ns.dry_run:
        check_outputs(grid, check_lock=False)  # where a real run would write: refused in the same words, nothing written
        fold_dirs = [grid.output_root / "folds" / f"fold{i}" for i in range(grid.folds.k)] if grid.folds else None
        for run in expand(grid, fold_dirs):
            resumable = any(complete_checkpoints(f) for f in [run.run_dir, *run.run_dir.glob("phase-*")])
            state = "finished" if (run.run_dir / "metrics.json").is_file() else ("resumable" if resumable else "to run")
            print(f"{state}\t{run.name}\t{' '.join(train_command(grid.recipe, run)[3:])}")
        return 0
    rows = run_sweep(grid)
    failed = [r["run"] for r in rows if r["status"] != "ok"]
    print(f"{len(rows)} run(s) listed in {grid.results}; {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
