"""A trained LoRA run's update handed back at several scales (``adapter.delta_scale``), scored on dev data only: the
run's own held-out training queries (its ``data.holdout_queries``) and another collection's dev split, both by full
retrieval. What the quickstart's ``delta_scale`` was chosen on.

    SSFT_DATA_HOME=../shared/data python benchmarks/delta_scale_dev.py RUN [--scales 1,0.75,0.5,0.25] \
        [--other nfcorpus] [--work runs/delta_scale_dev]

RUN: a finished ``ssft-train`` folder of a dense recipe with ``data.holdout_queries`` (e.g. the quickstart's). For
each scale the run's model is loaded afresh and finished as a run with that ``delta_scale`` finishes
(``ssft.pipeline.run.finish_training``: every LoRA B matrix multiplied by it). ``ssft.evaluate`` then retrieves over
the whole corpus for the held-out queries (a BEIR folder written under ``--work``: the run's corpus, the held-out
queries and their judgements as a ``dev`` split) and for ``--other``'s dev split. Prints one line per scale: nDCG@10
on each.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import ssft
from ssft.config.recipe import load_recipe
from ssft.data.beir import load_dataset
from ssft.pipeline.inputs import split_queries
from ssft.pipeline.run import finish_training


def held_out_folder(run: Path, work: Path) -> Path:
    """A BEIR folder of the run's held-out training queries (its validation) over its corpus, as split ``dev``."""
    recipe = load_recipe(run / "recipe.yaml")
    dataset = load_dataset(recipe.data.dataset)
    _, held = split_queries(recipe.data, dataset)
    if not held or not recipe.data.holdout_queries:
        raise SystemExit(f"{run / 'recipe.yaml'}: data.holdout_queries is not set; nothing is held out to score")
    folder = work / f"{recipe.data.dataset}_holdout_{recipe.data.holdout_queries}_{recipe.data.sample_seed}"
    if not folder.exists():
        (folder / "qrels").mkdir(parents=True)
        source = Path(os.environ.get("SSFT_DATA_HOME", "")) / recipe.data.dataset / "corpus.jsonl"
        (folder / "corpus.jsonl").symlink_to(source.resolve())
        (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": dataset.queries[q]}) + "\n"
                                                      for q in held))
        (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{d}\t{s}\n" for q, rel in held.items() for d, s in rel.items()))
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--scales", default="1,0.75,0.5,0.25")
    p.add_argument("--other", default="nfcorpus", help="a collection the run did not train on, scored on its dev split")
    p.add_argument("--work", type=Path, default=Path("runs/delta_scale_dev"))
    a = p.parse_args()
    folder = held_out_folder(a.run, a.work)
    recipe = load_recipe(a.run / "recipe.yaml")
    for scale in (float(s) for s in a.scales.split(",")):
        model = ssft.load(a.run)
        recipe.adapter.options["delta_scale"] = scale
        finish_training(recipe, model)  # what the run does after training with this delta_scale
        own = ssft.evaluate(model, str(folder), split="dev", first_stage="full", depth=100)["dev"]["nDCG@10"]
        other = ssft.evaluate(model, a.other, split="dev", first_stage="full", depth=100)["dev"]["nDCG@10"]
        print(f"scale {scale:g}: held-out queries {own:.4f}, {a.other} dev {other:.4f}", flush=True)


if __name__ == "__main__":
    main()
