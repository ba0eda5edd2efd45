"""A trained LoRA run's update handed back at several scales (``adapter.delta_scale``), scored on dev data only: the
run's own validation queries and another collection's queries, under one first stage. What the quickstart's and the
ColBERT recipe's ``delta_scale`` were chosen on.

    SSFT_DATA_HOME=../shared/data python benchmarks/delta_scale_dev.py RUN [--scales 1,0.75,0.5,0.25] \
        [--other nfcorpus] [--other-split dev] [--first-stage full] [--depth 100] [--work runs/delta_scale_dev]

RUN: a finished ``ssft-train`` folder of a LoRA recipe. For each scale the run's model is loaded afresh and finished
as a run with that ``delta_scale`` finishes (``ssft.pipeline.run.finish_training``: every LoRA B matrix, and the
ranker's parameters that start at zero, such as a gated cross-encoder's gates, multiplied by it). ``ssft.evaluate``
then scores the run's own validation queries (with ``data.holdout_queries``: a BEIR folder written under ``--work`` of
the run's corpus, the held-out queries and their judgements as a ``dev`` split; else the whole
``data.validation_split``) and ``--other``'s ``--other-split`` (a collection the run did not train on, so any of its
splits but the test is dev data). Prints one line per scale: nDCG@10 on each.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import ssft
from ssft.adapters.lora import LoraOptions
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


def scale_list(text: str) -> list[float]:
    """``--scales``: comma-separated values of ``adapter.delta_scale``, each in (0, 1]."""
    try:
        scales = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    for scale in scales:  # the rule adapter.delta_scale has in a recipe
        problem = LoraOptions(delta_scale=scale).problem()
        if problem:
            raise argparse.ArgumentTypeError(f"{scale:g}: {problem[1]}")
    return scales


def dev_parser(description: str, other: str | None, depth: int) -> argparse.ArgumentParser:
    """The arguments every dev-data study of a finished run takes: the run, another collection and its split, the
    depth scored and the work folder (where the held-out queries are written)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("run", type=Path)
    p.add_argument("--other", default=other, help="a collection the run did not train on")
    p.add_argument("--other-split", default="dev", help="its split scored (not test)")
    p.add_argument("--depth", type=int, default=depth, help="documents retrieved, or BM25's top-k reranked")
    p.add_argument("--work", type=Path, default=Path("runs/delta_scale_dev"))
    return p


def dev_arguments(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``p``'s arguments parsed; a test split refused (test splits are looked at once, to report)."""
    a = p.parse_args(argv)
    if a.other_split == "test":
        raise SystemExit("--other-split: test splits are looked at once, to report; choose on another split")
    return a


def main(argv: list[str] | None = None) -> None:
    p = dev_parser(__doc__.split("\n\n")[0], other="nfcorpus", depth=100)
    p.add_argument("--scales", type=scale_list, default="1,0.75,0.5,0.25",
                   help="comma-separated, each in (0, 1]; the start is 1e-6 or so (nearly none of the update)")
    p.add_argument("--first-stage", default="full", help="full (retrieval over the whole corpus) or bm25")
    a = dev_arguments(p, argv)
    recipe = load_recipe(a.run / "recipe.yaml")
    if recipe.data.holdout_queries:
        own_data, own_split, own_name = str(held_out_folder(a.run, a.work)), "dev", "held-out queries"
    else:
        own_split = recipe.data.validation_split
        own_data, own_name = recipe.data.dataset, f"{recipe.data.dataset} {own_split}"
    for scale in a.scales:
        model = ssft.load(a.run)
        recipe.adapter.options["delta_scale"] = scale
        finish_training(recipe, model)  # what the run does after training with this delta_scale
        own = ssft.evaluate(model, own_data, split=own_split, first_stage=a.first_stage,
                            depth=a.depth)[own_split]["nDCG@10"]
        other = ssft.evaluate(model, a.other, split=a.other_split, first_stage=a.first_stage,
                              depth=a.depth)[a.other_split]["nDCG@10"]
        print(f"scale {scale:g}: {own_name} {own:.4f}, {a.other} {a.other_split} {other:.4f}", flush=True)


if __name__ == "__main__":
    main()
