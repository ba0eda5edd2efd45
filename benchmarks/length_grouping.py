"""Training batches grouped by token count (``training.train_sampling_strategy: group_by_length``,
``ssft.training.sampling``) against shuffled batches (``random``): where grouping saves padding, and whether it
changes what a recipe trains.

    SSFT_DATA_HOME=../shared/data python benchmarks/length_grouping.py --recipe recipes/quickstart.yaml \\
        --seeds 42,43,44 --random-runs runs/bench/efficacy_v2/quickstart --out runs/bench/grouping --write

1. **Padding** (nothing trained): for each ``--padding`` case (recipe:document tokens), one epoch of the recipe's
   own training groups (query, positive, its negatives) batched at the recipe's batch size, shuffled and grouped
   (seed 0), with the token counts the ranker computes: the token positions a bi-encoder computes (each batch's
   queries padded to its longest query, its documents to its longest document) against the tokens it needs. The
   ratio of the two arms' positions bounds what grouping can save in the encoder's matrix products.
2. **Quality and training time**: for each ``--recipe`` case (``recipe`` or ``recipe:document tokens``,
   comma-separated; ``@42+43``: that case's own seeds instead of ``--seeds``), ``ssft-train RECIPE seed=S
   [model.max_length=N]`` with ``training.train_sampling_strategy=`` each arm, every seed; test nDCG@10 (mean ± sd
   over seeds; two-sided paired t-test over the queries, each query's value averaged over seeds) and training
   CPU-seconds (the ``ssft-train`` child's user + sys). ``--random-runs`` / ``--grouped-runs``: folders of finished
   runs of that arm for the first case (``seed-S/``, as ``benchmarks/efficacy.py`` leaves them), reused instead of
   training again.
3. **Speed** (``--speed recipe:document tokens``, comma-separated): one epoch of the recipe's training groups at that
   length (its model, adapter and loss; nothing validated or evaluated), once per arm and repeat, interleaved, in
   bf16 where the CPU computes it natively (as ``training.bf16: auto``): CPU-seconds of the whole epoch (every step,
   the same items in both arms), median over ``--repeats``. ``--speed-st``: sentence-transformers' trainer on the same
   items as a third arm (``st_epoch_seconds``; a dense recipe that trains every weight).
"""
from __future__ import annotations

import argparse
import json
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from scipy import stats
from transformers import TrainingArguments

from ssft.config.recipe import load_recipe
from ssft.config.registry import MODELS
from ssft.core import precision
from ssft.core.output_names import per_query_file
from ssft.eval.significance import read_per_query
from ssft.pipeline.build import build, training_source
from ssft.pipeline.inputs import load_inputs
from ssft.training.sampling import TokenLengthGroupedSampler, token_lengths
from ssft.training.trainer import RankingTrainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_notes_option, add_section_options, command, with_notes, write_section  # noqa: E402

METRIC = "nDCG@10"
ARMS = ("random", "group_by_length")
ST_ARM = "sentence_transformers"  # --speed-st: SentenceTransformerTrainer on the same items
DEFAULT_PADDING = ("recipes/quickstart.yaml:256", "recipes/quickstart.yaml:512", "recipes/ss_lora_colbert.yaml:128")


# ---------------------------------------------------------------------------------------------- 1. padding
def padding_case(recipe_path: str, max_length: int) -> dict[str, Any]:
    recipe = load_recipe(Path(recipe_path), [f"model.max_length={max_length}"])
    inputs = load_inputs(recipe)
    groups = training_source(recipe, inputs).training_set(recipe.data.sample_seed)
    model = MODELS.get(recipe.model.architecture).build(recipe.model, "full", {})
    if not getattr(model, "bi_encoder", False):
        raise SystemExit(f"{recipe_path}: the padding count is written for bi-encoders")
    items = [groups[i] for i in range(len(groups))]
    cache = model.token_cache()
    query_tokens = [min(n, model.query_max_length) for _, n in cache.ids([it["query"] for it in items])]
    doc_tokens = [[min(n, model.max_length) for _, n in cache.ids(it["documents"])] for it in items]
    batch = int(recipe.training.get("per_device_train_batch_size", 8))
    lengths = token_lengths(model, groups.item_texts())

    def computed(batches: list[list[int]]) -> int:
        return sum(len(b) * max(query_tokens[i] for i in b)
                   + sum(len(doc_tokens[i]) for i in b) * max(max(doc_tokens[i]) for i in b) for b in batches)

    shuffled = torch.randperm(len(items), generator=torch.Generator().manual_seed(0)).tolist()
    random_batches = [shuffled[i : i + batch] for i in range(0, len(shuffled), batch)]
    grouped = TokenLengthGroupedSampler(lengths, batch, generator=torch.Generator().manual_seed(0)).batches()
    needed = sum(query_tokens) + sum(sum(d) for d in doc_tokens)
    at_max = sum(n == model.max_length for d in doc_tokens for n in d) / sum(len(d) for d in doc_tokens)
    return {"recipe": recipe_path, "dataset": str(recipe.data.dataset), "max_length": max_length,
            "query_max_length": model.query_max_length, "items": len(items), "batch": batch,
            "documents_per_item": len(doc_tokens[0]), "documents_cut": at_max, "needed": needed,
            "random": computed(random_batches), "grouped": computed(grouped)}


# ---------------------------------------------------------------------------------------------- 3. speed
def epoch_seconds(recipe_path: str, max_length: int, arm: str, scratch: Path, queries: int | None = None
                  ) -> dict[str, float]:
    """CPU and wall seconds of one training epoch of the recipe at ``max_length`` under ``arm`` (on ``queries`` of
    its training queries where given)."""
    recipe = load_recipe(Path(recipe_path), [f"model.max_length={max_length}"]
                         + ([f"data.max_train_queries={queries}"] if queries else []))
    inputs = load_inputs(recipe)
    built = build(recipe, inputs)
    bf16 = {"bf16": True, "use_cpu": True} if precision.bf16_native("cpu") else {}
    args = TrainingArguments(output_dir=str(scratch), num_train_epochs=1, report_to=[], save_strategy="no",
                             logging_strategy="no", disable_tqdm=True, remove_unused_columns=False, seed=recipe.seed,
                             learning_rate=float(recipe.training.get("learning_rate", 1e-4)),
                             per_device_train_batch_size=int(recipe.training.get("per_device_train_batch_size", 8)),
                             train_sampling_strategy=arm, dataloader_pin_memory=False, **bf16)
    trainer = RankingTrainer(model=built.ranker, args=args, train_dataset=built.source.training_set(recipe.data.sample_seed),
                             objective=built.objective, head_learning_rate=recipe.model.head_learning_rate)
    cpu, wall = time.process_time(), time.perf_counter()
    trainer.train()
    return {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "steps": trainer.state.global_step}


def st_epoch_seconds(recipe_path: str, max_length: int, scratch: Path, queries: int | None = None) -> dict[str, float]:
    """CPU and wall seconds of one epoch of sentence-transformers' trainer on the same items as ``epoch_seconds``'
    (the recipe's training groups at epoch 0: query, positive, its negatives), a dense recipe's counterpart:
    ``SentenceTransformerTrainer`` + ``MultipleNegativesRankingLoss`` (scale 20, in-batch and the hard negatives, as
    ssft's contrastive loss), every weight trained, its default batch sampler, the same batch size, learning rate
    and precision, ``max_seq_length`` at ``max_length``."""
    from datasets import Dataset  # noqa: PLC0415  (sentence-transformers' side: loaded only for it)
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer  # noqa: PLC0415
    from sentence_transformers.losses import MultipleNegativesRankingLoss  # noqa: PLC0415
    from sentence_transformers.training_args import SentenceTransformerTrainingArguments  # noqa: PLC0415

    from ssft.core.hub import resolve_model  # noqa: PLC0415

    recipe = load_recipe(Path(recipe_path), [f"model.max_length={max_length}"]
                         + ([f"data.max_train_queries={queries}"] if queries else []))
    if recipe.model.architecture != "dense" or recipe.adapter.method != "full":
        raise SystemExit(f"--speed-st: {recipe_path}: sentence-transformers' trainer is the counterpart of a dense "
                         "recipe that trains every weight (adapter: full)")
    groups = build(recipe, load_inputs(recipe)).source.training_set(recipe.data.sample_seed)
    groups.set_epoch(0)
    items = [groups[i] for i in range(len(groups))]
    columns = {"anchor": [it["query"] for it in items], "positive": [it["documents"][0] for it in items]}
    for k in range(1, len(items[0]["documents"])):
        columns[f"negative_{k}"] = [it["documents"][k] for it in items]
    model = SentenceTransformer(str(resolve_model(recipe.model.name)), device="cpu")
    model.max_seq_length = max_length
    bf16 = {"bf16": True, "use_cpu": True} if precision.bf16_native("cpu") else {}
    args = SentenceTransformerTrainingArguments(
        output_dir=str(scratch), num_train_epochs=1, report_to=[], save_strategy="no", logging_strategy="no",
        disable_tqdm=True, seed=recipe.seed, learning_rate=float(recipe.training.get("learning_rate", 1e-4)),
        per_device_train_batch_size=int(recipe.training.get("per_device_train_batch_size", 8)),
        dataloader_pin_memory=False, **bf16)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_dict(columns),
                                         loss=MultipleNegativesRankingLoss(model))
    cpu, wall = time.process_time(), time.perf_counter()
    trainer.train()
    return {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "steps": trainer.state.global_step}


def speed_case(recipe_path: str, max_length: int, repeats: int, scratch: Path, queries: int | None = None,
               st: bool = False) -> dict[str, Any]:
    """The epoch timings of one case (read back from ``scratch`` when an earlier call measured it); ``st``:
    sentence-transformers' trainer as a third arm (``st_epoch_seconds``)."""
    saved = scratch / f"{Path(recipe_path).stem}-{max_length}-q{queries or 'all'}-x{repeats}{'-st' if st else ''}.json"
    if saved.is_file():
        return json.loads(saved.read_text())
    arms = ARMS + (ST_ARM,) if st else ARMS
    times: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for repeat in range(repeats):
        shift = repeat % len(arms)
        for arm in arms[shift:] + arms[:shift]:
            times[arm].append(st_epoch_seconds(recipe_path, max_length, scratch / f"{arm}-{repeat}", queries)
                              if arm == ST_ARM else
                              epoch_seconds(recipe_path, max_length, arm, scratch / f"{arm}-{repeat}", queries))
            print(f"[length_grouping] speed {recipe_path}:{max_length} {arm} {times[arm][-1]}", flush=True)
    result = {"recipe": recipe_path, "max_length": max_length, "repeats": repeats, "queries": queries, "times": times,
              **{arm: statistics.median(t["cpu"] for t in times[arm]) for arm in arms}}
    saved.write_text(json.dumps(result, indent=1) + "\n")
    return result


# ---------------------------------------------------------------------------------------------- 2. training
def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def trained(recipe: str, seed: int, arm: str, out: Path, reuse: Path | None, overrides: tuple[str, ...] = ()) -> Path:
    """The run folder of ``recipe`` at ``seed`` under ``arm`` (with the recipe ``overrides``: ``--set``'s and a
    case's ``model.max_length``):
    ``reuse``/seed-S when it holds a finished run, else trained now into ``out``/arm/seed-S (its CPU and wall seconds
    beside it, as efficacy.py records them)."""
    if reuse is not None and (reuse / f"seed-{seed}" / "metrics.json").is_file():
        return reuse / f"seed-{seed}"
    run = out / arm / f"seed-{seed}"
    if (run / "metrics.json").is_file():
        return run
    command = ["ssft-train", recipe, f"seed={seed}", f"training.output_dir={run}",
               f"training.train_sampling_strategy={arm}", *overrides]
    print(f"[length_grouping] {shlex.join(command)}", flush=True)
    run.parent.mkdir(parents=True, exist_ok=True)
    cpu, wall = _children_cpu(), time.perf_counter()
    with open(out / "train.log", "a") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)}: exit {done.returncode} (log: {out / 'train.log'})")
    timing = {"command": command, "cpu_seconds": round(_children_cpu() - cpu, 1),
              "wall_seconds": round(time.perf_counter() - wall, 1)}
    (run.parent / f"seed-{seed}.timing.json").write_text(json.dumps(timing, indent=1) + "\n")
    return run


def _cpu_seconds(run: Path) -> float | None:
    timing = run.parent / f"{run.name}.timing.json"
    return json.loads(timing.read_text()).get("cpu_seconds") if timing.is_file() else None


def arm_result(runs: list[Path], split: str) -> dict[str, Any]:
    scores = [json.loads((r / "metrics.json").read_text())["test"][METRIC] for r in runs]
    per_query: dict[str, list[float]] = {}
    for r in runs:
        for q, v in read_per_query(r / per_query_file("test", split), METRIC).items():
            per_query.setdefault(q, []).append(v)
    cpu = [c for c in (_cpu_seconds(r) for r in runs) if c is not None]
    return {"runs": [str(r) for r in runs], "scores": scores, "per_query": {q: statistics.fmean(v) for q, v in per_query.items()},
            "cpu_seconds": cpu, "steps": [json.loads((r / "run_info.json").read_text()).get("train_seconds") for r in runs]}


# ---------------------------------------------------------------------------------------------- report
def _mean_sd(values: list[float], digits: int = 4) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def markdown(result: dict[str, Any], cmd: str) -> str:
    lines = [f"`{cmd}`"]
    if result["padding"]:
        lines += ["", "### Padding: token positions a bi-encoder computes in one epoch of the recipe's training groups", "",
                  "| recipe | dataset | document / query tokens | items × documents, batch | documents cut at the maximum | "
                  "needed tokens | shuffled: computed (useful share) | grouped: computed (useful share) | shuffled ÷ grouped |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in result["padding"]:
        lines.append(f"| `{c['recipe']}` | {Path(c['dataset']).name} | {c['max_length']} / {c['query_max_length']} | "
                     f"{c['items']} × {c['documents_per_item']}, {c['batch']} | {100 * c['documents_cut']:.0f}% | "
                     f"{c['needed']:,} | {c['random']:,} ({100 * c['needed'] / c['random']:.1f}%) | "
                     f"{c['grouped']:,} ({100 * c['needed'] / c['grouped']:.1f}%) | {c['random'] / c['grouped']:.2f}× |")
    if result.get("speed"):
        lines += ["", "### Speed: CPU-seconds of one training epoch (every step; median over repeats, arms interleaved)", "",
                  "| recipe | document tokens | training queries | steps | shuffled (`random`) | grouped (`group_by_length`) | "
                  "shuffled ÷ grouped | sentence-transformers' trainer | it ÷ grouped |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in result["speed"]:
            steps = c["times"]["random"][0]["steps"]
            st = (f"{c[ST_ARM]:.1f} | {c[ST_ARM] / c['group_by_length']:.2f}×" if ST_ARM in c else "– | –")
            lines.append(f"| `{c['recipe']}` | {c['max_length']} | {c.get('queries') or 'all'} | {steps} | {c['random']:.1f} | "
                         f"{c['group_by_length']:.1f} | {c['random'] / c['group_by_length']:.2f}× | {st} |")
    for case in result.get("quality", []):
        arms, p = case["arms"], case.get("p")
        tokens = f" at {case['max_length']} document tokens" if case.get("max_length") else ""
        lines += ["", f"### `{case['recipe']}`{tokens} trained with each strategy (seeds "
                  f"{', '.join(map(str, case['seeds']))})", "",
                  f"| training.train_sampling_strategy | test {METRIC} | training CPU-s per seed |", "|---|---:|---:|"]
        for arm in ARMS:
            a = arms[arm]
            lines.append(f"| `{arm}` | {_mean_sd(a['scores'])} | {_mean_sd(a['cpu_seconds'], 0)} |")
        lines += ["", f"Paired t-test over the {case['queries']} test queries (each query's {METRIC} averaged over seeds), "
                  f"grouped against shuffled: p = {p:.3g}." if p is not None else ""]
    return "\n".join(lines).rstrip() + "\n"


TITLE = "Training batches grouped by token count against shuffled batches"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="recipes/quickstart.yaml",
                   help="recipes trained with each strategy: recipe, recipe:document tokens, and @S+S for the case's "
                        "own seeds; comma-separated")
    p.add_argument("--seeds", default="42,43,44")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a recipe override for every run trained here (e.g. eval.start=false); runs reused are as they are")
    p.add_argument("--random-runs", type=Path, help="finished runs of the recipe with shuffled batches (seed-S/)")
    p.add_argument("--grouped-runs", type=Path, help="finished runs of the recipe with grouped batches (seed-S/)")
    p.add_argument("--padding", default=",".join(DEFAULT_PADDING), help="recipe:document tokens cases, comma-separated")
    p.add_argument("--speed", default="", help="recipe:document tokens cases timed for one epoch, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="--speed: epochs per arm")
    p.add_argument("--speed-queries", type=int, help="--speed: that many of the recipe's training queries")
    p.add_argument("--speed-st", action="store_true",
                   help="--speed: sentence-transformers' trainer on the same items as a third arm (dense recipes "
                        "that train every weight)")
    p.add_argument("--no-training", action="store_true", help="no quality runs (the padding count, and --speed)")
    p.add_argument("--out", type=Path, default=Path("runs/bench/grouping"))
    add_notes_option(p)
    p.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    add_section_options(p, "length_grouping", TITLE)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    result: dict[str, Any] = {"seeds": seeds, "padding": []}
    for case in filter(None, a.padding.split(",")):
        recipe, _, tokens = case.rpartition(":")
        result["padding"].append(padding_case(recipe, int(tokens)))
        print(json.dumps(result["padding"][-1]), flush=True)
    result["speed"] = []
    for case in filter(None, a.speed.split(",")):
        recipe, _, tokens = case.rpartition(":")
        result["speed"].append(speed_case(recipe, int(tokens), a.repeats, a.out / "speed", a.speed_queries, a.speed_st))
    result["quality"] = []
    for i, case in enumerate(filter(None, [] if a.no_training else a.recipe.split(","))):
        case, _, own_seeds = case.partition("@")
        recipe, _, tokens = case.partition(":")
        max_length = int(tokens) if tokens else None
        case_seeds = [int(x) for x in own_seeds.split("+")] if own_seeds else seeds
        out = a.out if i == 0 else a.out / f"{Path(recipe).stem}-{max_length or 'recipe'}"
        reuse = {"random": a.random_runs, "group_by_length": a.grouped_runs} if i == 0 else {}
        overrides = (*a.set, *([f"model.max_length={max_length}"] if max_length else []))
        arms = {arm: arm_result([trained(recipe, s, arm, out, reuse.get(arm), overrides) for s in case_seeds], "test")
                for arm in ARMS}
        x, y = arms["group_by_length"]["per_query"], arms["random"]["per_query"]
        shared = sorted(set(x) & set(y))
        pvalue = float(stats.ttest_rel([x[q] for q in shared], [y[q] for q in shared]).pvalue) if len(shared) > 1 else None
        result["quality"].append({"recipe": recipe, "max_length": max_length, "seeds": case_seeds, "arms": arms,
                                  "queries": len(shared), "p": pvalue})
    (a.out / "length_grouping.json").write_text(json.dumps(result, indent=1) + "\n")
    text = with_notes(markdown(result, command()), a.notes)
    print(text)
    if a.write:
        write_section(a.section, f"## {a.title}\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
