"""The quickstart's learning rate on validation queries only: what validation says of runs of recipes/quickstart.yaml
that differ only in ``training.learning_rate`` (or the adapter), every epoch, the start scored once; the test split is
not used. The SciFact arms (BENCHMARKS.md § quickstart_dev_scifact):

    SSFT_DATA_HOME=../shared/data ssft-train recipes/quickstart.yaml training.learning_rate=5e-4 \
        data.test_split=train data.max_test_queries=20 training.output_dir=runs/trials/sf-ss-5e-4
    SSFT_DATA_HOME=../shared/data ssft-train recipes/quickstart.yaml training.learning_rate=2e-4 eval.start=false \
        data.test_split=train data.max_test_queries=20 training.output_dir=runs/trials/sf-ss-2e-4
    python benchmarks/quickstart_dev.py --runs runs/trials/sf-ss-5e-4,runs/trials/sf-ss-2e-4 \
        --section quickstart_dev_scifact [--notes benchmarks/notes/quickstart_dev_scifact.md] [--write]

(``data.test_split=train``: the run's closing test scores 20 training queries instead of a test query.) The NFCorpus
arms of the earlier quickstart (BENCHMARKS.md § quickstart_dev, 800 queries, 1 epoch):

Runs (one seed each; ``eval.start=false data.test_split=dev`` where the start is already known, so no test query is
looked at):

    SSFT_DATA_HOME=../shared/data ssft-train recipes/quickstart.yaml training.output_dir=runs/trials/qs-lr5e-4
    SSFT_DATA_HOME=../shared/data ssft-train recipes/quickstart.yaml training.learning_rate=1e-4 \
        training.output_dir=runs/trials/qs-lr1e-4 eval.start=false data.test_split=dev
    SSFT_DATA_HOME=../shared/data ssft-train recipes/quickstart.yaml adapter=full training.learning_rate=2e-5 \
        training.output_dir=runs/trials/qs-full-2e-5 eval.start=false data.test_split=dev
    python benchmarks/quickstart_dev.py --runs runs/trials/qs-lr5e-4,runs/trials/qs-lr1e-4,runs/trials/qs-full-2e-5 [--write]

Each run folder's validation history is read from its ``best_epoch.json`` (the run's root or its last checkpoint),
its ``run_info.json``, or its ``metrics.json`` dev row; the start (epoch 0) from whichever run scored it.
``--write``: BENCHMARKS.md § quickstart_dev (``--section``: another section, ``--title``: its title).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_notes_option, add_section_options, with_notes, write_section  # noqa: E402

METRICS = ("nDCG@10", "R@100", "RR@10")


def history(run: Path) -> list[dict]:
    """The run's validation rows (epoch, metrics), epoch 0 the start where it was scored."""
    files = sorted(run.glob("checkpoint-*/best_epoch.json"), key=lambda p: int(p.parent.name.split("-")[-1]))
    files = [run / "best_epoch.json", *files[::-1]]
    for f in files:
        if f.is_file():
            rows = json.loads(f.read_text())["history"]
            return [{"epoch": r["epoch"], **{m: r.get(f"eval_{m}") for m in METRICS}} for r in rows]
    info = run / "run_info.json"
    if info.is_file() and json.loads(info.read_text()).get("validation_history"):
        rows = json.loads(info.read_text())["validation_history"]
        return [{"epoch": r["epoch"], **{m: r.get(f"eval_{m}") for m in METRICS}} for r in rows]
    metrics = json.loads((run / "metrics.json").read_text())
    split = yaml.safe_load((run / "recipe.yaml").read_text())["data"]["validation_split"]
    return [{"epoch": 1.0, **{m: metrics[split].get(m) for m in METRICS}}]


def setting(recipe: dict) -> str:
    """What the arms share, read from a run's recipe.yaml."""
    d, t = recipe["data"], recipe["training"]
    validation = (f"{d['holdout_queries']} of the training queries held out of training (data.holdout_queries)"
                  if d.get("holdout_queries") else f"the {d['validation_split']} queries")
    queries = f"{d['max_train_queries']} training queries" if d.get("max_train_queries") else "every other training query"
    return (f"all-MiniLM-L6-v2, dense, {queries}, {d.get('num_negatives', 1)} {d.get('negatives', 'bm25')} negative(s) "
            f"+ in-batch, batches of {t['per_device_train_batch_size']} queries, {t['num_train_epochs']} epoch(s); "
            f"validation on {validation}")


def adapter_label(adapter: str | dict) -> str:
    """The adapter column: the method, and the layers it adapts where the recipe names them."""
    if isinstance(adapter, str):
        return adapter
    label = adapter["method"]
    for key in ("target_modules", "shared_modules"):
        if adapter.get(key):
            label += f", {key}: {' + '.join(adapter[key])}"
    return label


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="comma-separated run folders of recipes/quickstart.yaml")
    add_section_options(p, "quickstart_dev", "")  # empty: the title names the runs' dataset (below)
    add_notes_option(p)
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    start, rows, recipes = None, [], []
    for folder in a.runs.split(","):
        run = Path(folder)
        recipe = yaml.safe_load((run / "recipe.yaml").read_text())
        recipes.append(recipe)
        lr = recipe["training"]["learning_rate"]
        adapter = adapter_label(recipe["adapter"])
        for h in history(run):
            if h["epoch"] == 0:
                start = h
            else:
                rows.append((lr, recipe["seed"], h, adapter))
    if start is None:
        raise SystemExit("no run scored the start (epoch 0) on validation")
    dataset = recipes[0]["data"]["dataset"]
    settings = sorted({setting(r) for r in recipes})
    fmt = lambda v: "—" if v is None else f"{v:.4f}"  # noqa: E731
    title = a.title or f"The quickstart's learning rate on {dataset} (validation only)"
    lines = [f"## {title}", "",
             f"recipes/quickstart.yaml's set-up ({'; or '.join(settings)}); full retrieval; one seed per arm; "
             "semi-Siamese LoRA hetero_value unless the adapter column says otherwise. The test split is not used here.",
             "", "| model | adapter | learning rate | epoch | seed | " + " | ".join(METRICS) + " |",
             "|---|---|---:|---:|---:|" + "---:|" * len(METRICS),
             "| start (all-MiniLM-L6-v2) | — | — | 0 | — | " + " | ".join(fmt(start[m]) for m in METRICS) + " |"]
    for lr, seed, h, adapter in rows:
        lines.append(f"| trained | {adapter} | {lr:g} | {h['epoch']:g} | {seed} | "
                     + " | ".join(fmt(h[m]) for m in METRICS) + " |")
    best = max(rows, key=lambda r: r[2]["nDCG@10"])
    beats = best[2]["nDCG@10"] > start["nDCG@10"]
    verdict = "beats" if beats else "does not beat"
    lines += ["", f"The best arm measured ({best[3]}, learning rate {best[0]:g}, epoch {best[2]['epoch']:g}) {verdict} "
              f"the start on validation nDCG@10 ({best[2]['nDCG@10']:.5f} against {start['nDCG@10']:.5f}). A run "
              "keeps the best of the start and its epochs (validation's epoch 0 is the start)"
              + ("." if beats else ", so at these settings the quickstart hands back its start."), ""]
    body = with_notes("\n".join(lines), a.notes)
    print(body)
    if a.write:
        write_section(a.section, body)


if __name__ == "__main__":
    main()
