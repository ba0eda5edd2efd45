"""Execute one notebook of notebooks/ in full settings and record what it measured in BENCHMARKS.md.

    SSFT_DATA_HOME=../shared/data python benchmarks/run_notebook.py latency_tradeoff \\
        --env SSFT_LATENCY_RUNS=run1,run2 --env SSFT_LATENCY_EXTRA_RUNS=student1 --out /tmp/nb_full

The notebook runs headless (nbclient, the python3 kernel) with SSFT_NOTEBOOK_SMALL unset, its figures and
Markdown tables going to --out (SSFT_NOTEBOOK_OUT) and its own runs to --runs (SSFT_NOTEBOOK_RUNS). The executed
notebook is saved beside them; its PNG files are copied to benchmarks/figures/ and its tables (every *.md it
wrote) go into the section 'notebook_<name>' of BENCHMARKS.md with the command that produced them.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import add_notes_option, with_notes, write_section  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", help="name of a notebook in notebooks/ (without .ipynb)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="environment for the kernel")
    parser.add_argument("--out", type=Path, required=True, help="folder for the figures, tables and executed notebook")
    parser.add_argument("--runs", type=Path, default=None, help="where the notebook's own runs go (default OUT/runs)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    add_notes_option(parser)
    ns = parser.parse_args(argv)
    path = ROOT / "notebooks" / f"{ns.notebook}.ipynb"
    if not path.is_file():
        parser.error(f"{path}: no such notebook")
    env = {}
    for item in ns.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--env: expected NAME=VALUE, got '{item}'")
        env[name] = value

    import nbformat
    from nbclient import NotebookClient

    ns.out.mkdir(parents=True, exist_ok=True)
    os.environ.pop("SSFT_NOTEBOOK_SMALL", None)
    os.environ.update({"SSFT_NOTEBOOK_OUT": str(ns.out.resolve()), "MPLBACKEND": "Agg",
                       "SSFT_NOTEBOOK_RUNS": str((ns.runs or ns.out / "runs").resolve()), **env})
    nb = nbformat.read(path, as_version=4)
    started = time.time()
    NotebookClient(nb, timeout=ns.timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.time() - started
    nbformat.write(nb, ns.out / path.name)

    figures = ROOT / "benchmarks" / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    pngs = sorted(ns.out.glob("*.png"))
    for png in pngs:
        (figures / png.name).write_bytes(png.read_bytes())
    command = " ".join(["python benchmarks/run_notebook.py"] + [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)])
    lines = [f"## Notebook `{path.name}` in full settings", "", f"`{command}` — executed in {seconds:.0f} s "
             f"(CPU, 2 cores shared with other jobs); figures: " + ", ".join(f"`benchmarks/figures/{p.name}`" for p in pngs), ""]
    for table in sorted(ns.out.glob("*.md")):
        lines += [f"`{table.name}`:", "", table.read_text().strip(), ""]
    write_section(f"notebook_{ns.notebook}", with_notes("\n".join(lines), ns.notes))
    print(f"executed {path.name} in {seconds:.0f} s; {len(pngs)} figure(s) copied to {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
