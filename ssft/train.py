"""ssft-train RECIPE.yaml [key=value ...] — build, train, keep the best validation epoch, evaluate.

Also runs as ``python -m ssft.train`` and ``accelerate launch ssft/train.py``.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `accelerate launch ssft/train.py` runs this file as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ssft.errors import SsftError, cli_entry

logger = logging.getLogger("ssft")


def _setup_logging(level: str = "INFO") -> None:
    import warnings

    # raised inside PEFT / transformers, nothing a user can act on
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "urllib3", "bm25s", "datasets", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import transformers

    transformers.utils.logging.set_verbosity_warning()
    transformers.utils.logging.disable_progress_bar()


def first_stage_run(spec: str, dataset, bm25_cache: dict, queries: dict[str, str], depth: int):
    """``bm25`` / ``bm25-stem``: retrieve now; anything else: a TREC run file."""
    from ssft.data.trec import read_run

    if spec in ("bm25", "bm25-stem"):
        if spec not in bm25_cache:
            from ssft.firststage.bm25 import BM25

            bm25_cache[spec] = BM25(dataset, stem=spec == "bm25-stem")
        return spec, bm25_cache[spec].search(queries, depth)
    run = read_run(spec)
    return first_stage_name(spec), run


def first_stage_name(spec: str) -> str:
    """A run file's name without its extension: 'runs/bm25.test.trec' → 'bm25.test'."""
    name = Path(spec).name
    for ext in (".trec", ".txt", ".run", ".tsv"):
        name = name.removesuffix(ext)
    return name or "first_stage"


def run_recipe(recipe) -> dict[str, Any]:
    """Everything a recipe describes. Returns metrics.json's content."""
    import torch
    from transformers import TrainingArguments, set_seed

    from ssft.adapters import count_parameters
    from ssft.callbacks.best_epoch import BestEpochCallback
    from ssft.data.beir import load_dataset
    from ssft.data.examples import RankerCollator, PairDataset, TrainingGroups, build_examples, subsample_queries
    from ssft.eval.rerank import format_table, rerank_and_report, tune_alpha
    from ssft.eval.retrieve import retrieve_and_report
    from ssft.io import atomic_write_json, atomic_write_text
    from ssft.registry import LOSSES, MODELS
    from ssft.trainer import RankingTrainer

    started = time.time()
    d, e = recipe.data, recipe.eval
    # ---- everything that can fail on bad input happens before anything is written
    from ssft.models.hub import resolve_model

    resolve_model(recipe.model.name)  # a missing model fails now, not after the data work
    dataset = load_dataset(d.dataset)
    train_qrels = subsample_queries(dataset.qrels(d.train_split), d.max_train_queries, d.sample_seed)
    val_qrels = subsample_queries(dataset.qrels(d.validation_split), d.max_validation_queries, d.sample_seed) if d.validation_split else None
    test_qrels = subsample_queries(dataset.qrels(d.test_split), d.max_test_queries, d.sample_seed)
    loss = LOSSES.get(recipe.loss.name).from_options(recipe.loss.options)
    training_kwargs = {"remove_unused_columns": False, "report_to": ["tensorboard"], "save_strategy": "no",
                       "eval_strategy": "epoch" if val_qrels else "no", "logging_strategy": "steps", "logging_steps": 10,
                       "disable_tqdm": not sys.stderr.isatty(), "seed": recipe.seed,
                       "dataloader_pin_memory": torch.cuda.is_available()}
    training_kwargs.update(recipe.training)
    out = Path(training_kwargs["output_dir"])
    os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(out / "logs"))
    try:
        args = TrainingArguments(**training_kwargs)
    except (ValueError, TypeError) as err:
        raise SsftError(f"{recipe.source}: training: {str(err).splitlines()[0]}") from None
    bm25_cache: dict = {}
    test_name, test_first = first_stage_run(e.first_stage, dataset, bm25_cache, {q: dataset.queries[q] for q in test_qrels}, e.depth)
    val_depth = e.validation_depth or e.depth
    val_first = None
    if val_qrels:
        val_spec = e.validation_first_stage or ("bm25" if e.first_stage not in ("bm25", "bm25-stem") else e.first_stage)
        _, val_first = first_stage_run(val_spec, dataset, bm25_cache, {q: dataset.queries[q] for q in val_qrels}, val_depth)
    negatives_run = None
    if d.negatives == "bm25":
        _, negatives_run = first_stage_run("bm25", dataset, bm25_cache, {q: dataset.queries[q] for q in train_qrels}, d.negatives_depth)
    examples = build_examples(train_qrels, list(dataset.corpus), negatives_run, d.min_relevance, d.max_positives_per_query, d.sample_seed)
    train_set = TrainingGroups(examples, dataset, d.num_negatives)
    set_seed(recipe.seed)
    ranker = MODELS.get(recipe.model.architecture).build(recipe.model, recipe.adapter.method, recipe.adapter.options)
    trainable, total = count_parameters(ranker)
    head = sum(p.numel() for p in ranker.head_parameters())
    logger.info("model %s (%s, method %s): %s trainable of %s parameters (%.3f%%; ranker head %s)",
                recipe.model.name, recipe.model.architecture, recipe.adapter.method, f"{trainable:,}", f"{total:,}",
                100 * trainable / total, f"{head:,}")

    val_pairs = PairDataset(val_first, val_depth, dataset) if val_qrels else None
    hybrid = None
    if recipe.adapter.method == "hybrid":
        from ssft.registry import ADAPTERS

        hybrid = ADAPTERS.get("hybrid").config_from(recipe.adapter.options)
        first, second = hybrid.methods
        schedule = (f"{hybrid.mode} hybrid: {first} for {hybrid.first_epochs} epoch(s), then {second} for {hybrid.second_epochs}"
                    if hybrid.mode == "sequential" else
                    f"concurrent hybrid: {first} and {second} together for {hybrid.first_epochs + hybrid.second_epochs} epoch(s)")
        schedule += f", batches of {args.per_device_train_batch_size} queries"
    elif args.max_steps > 0:
        schedule = f"{args.max_steps} steps of {args.per_device_train_batch_size} queries"
    else:
        schedule = f"{args.num_train_epochs:g} epoch(s) of batches of {args.per_device_train_batch_size} queries"
    notes = [
        f"training: {len(train_qrels)} queries of {d.dataset}/{d.train_split} "
        f"({'all' if d.max_train_queries is None else 'subsampled'}), {len(examples)} (query, positive) examples, "
        f"{d.num_negatives} {d.negatives} negative(s) each, " + schedule,
    ]
    if val_qrels:
        notes.append(f"validation: {len(val_qrels)} queries of {d.validation_split}, top-{val_depth} of the first stage, "
                     f"best epoch by {e.selection_metric}")
    notes.append(f"test: {len(test_qrels)} queries of {d.test_split}"
                 f"{' (subsampled)' if d.max_test_queries and d.max_test_queries < len(dataset.qrels(d.test_split)) else ''}, "
                 + (f"full retrieval of the top-{e.depth} of the corpus ({test_name} reported beside it)"
                    if getattr(MODELS.get(recipe.model.architecture), "full_retrieval", False) else f"top-{e.depth} of {test_name}"))
    for note in notes:
        logger.info(note)

    # ---- from here on, outputs
    out.mkdir(parents=True, exist_ok=True)
    # metrics.json marks a finished run: a re-run into the same folder drops the old one first, so a crash
    # midway never leaves a folder that looks complete
    (out / "metrics.json").unlink(missing_ok=True)
    import yaml

    atomic_write_text(out / "recipe.yaml", yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    from ssft.callbacks import build_callbacks, callback_name

    extra_callbacks = build_callbacks([c for c in recipe.callbacks if callback_name(c) != "best_epoch"],
                                      dataset=dataset, validation_qrels=val_qrels, train_qrels=train_qrels)

    def new_trainer(train_args, callbacks) -> RankingTrainer:
        return RankingTrainer(
            model=ranker,
            args=train_args,
            train_dataset=train_set,
            eval_dataset=val_pairs,
            data_collator=RankerCollator(ranker),
            loss=loss,
            head_learning_rate=recipe.model.head_learning_rate,
            eval_qrels=val_qrels,
            eval_metrics=sorted({e.selection_metric, *e.metrics}),
            callbacks=callbacks + extra_callbacks,
        )

    train_started = time.time()
    phases_info = None
    if hybrid is not None:  # one Trainer run per phase (001 Algorithm 1), each keeping its best validation epoch
        from ssft.adapters.hybrid import train_hybrid

        def make_trainer(phase: str, epochs: int, callbacks: list) -> RankingTrainer:
            logger.info("hybrid phase '%s': %d epoch(s)", phase, epochs)
            return new_trainer(TrainingArguments(**{**training_kwargs, "num_train_epochs": epochs}), callbacks)

        phases = train_hybrid(ranker, hybrid, make_trainer, e.selection_metric)
        trainer, best, train_output = phases[-1].trainer, phases[-1].best, phases[-1].train_output
        phases_info = [{"phase": p.name, "modules": list(p.modules), "epochs": p.epochs, "train_loss": p.train_output.training_loss,
                        "best_validation": {"metric": e.selection_metric, "value": p.best.best_value, "epoch": p.best.best_epoch},
                        "validation_history": p.best.history} for p in phases]
    else:
        best = BestEpochCallback(e.selection_metric)
        trainer = new_trainer(args, [best])
        train_output = trainer.train()
    train_seconds = time.time() - train_started
    ranker.eval()
    ranker.save(out / "model")  # PEFT format, before any merge
    ranker.requires_grad_(False)  # frozen from here on (lets ColBERT reuse cached document embeddings)
    if ranker.can_merge:  # lora / lora++ only; ss_lora's two towers cannot share merged weights
        ranker.merge_adapter()  # same scores, no LoRA overhead while reranking

    alpha = e.interpolation
    if alpha == "auto":
        val_run = val_pairs.to_run(trainer.score(val_pairs))
        alpha = tune_alpha(val_run, val_first, val_qrels, e.selection_metric)
        logger.info("interpolation weight tuned on %s: alpha = %.2f", d.validation_split, alpha)
    report = retrieve_and_report if getattr(ranker, "full_retrieval", False) else rerank_and_report  # dense: full retrieval
    results, info = report(
        ranker=ranker, dataset=dataset, split=d.test_split, qrels=test_qrels, first_stage=test_first,
        first_stage_name=test_name, depth=e.depth, metrics=e.metrics, output_dir=out, batch_size=e.batch_size,
        trainer=trainer, alpha=alpha,
    )
    info.update({
        "trainable_parameters": trainable, "total_parameters": total,
        "train_seconds": round(train_seconds, 1), "wall_seconds": round(time.time() - started, 1),
        "train_loss": train_output.training_loss, "best_validation": {"metric": e.selection_metric, "value": best.best_value, "epoch": best.best_epoch},
        "validation_history": best.history, "notes": notes, "data_warnings": dataset.warnings,
    })
    if phases_info is not None:
        info["hybrid_phases"] = phases_info
    atomic_write_json(out / "run_info.json", info)
    _write_model_card(out, recipe, results, info)
    atomic_write_json(out / "metrics.json", results)  # last: its presence marks a finished run
    print()
    for note in notes:
        print(note)
    if best.best_value is not None:
        print(f"best validation {e.selection_metric} = {best.best_value:.4f} at epoch {best.best_epoch:g}")
    print(format_table(results, e.metrics))
    print(f"trainable parameters {trainable:,} / {total:,}; train {train_seconds:.0f} s, total {time.time() - started:.0f} s; outputs in {out}")
    return results


def _write_model_card(out: Path, recipe, results, info) -> None:
    from ssft.io import atomic_write_text

    lines = [
        f"# ssft {recipe.model.architecture} ranker: {recipe.model.name} + {recipe.adapter.method}",
        "",
        f"Trained with `ssft-train` on {recipe.data.dataset} ({recipe.data.train_split}), loss `{recipe.loss.name}`, seed {recipe.seed}.",
        f"Trainable parameters: {info['trainable_parameters']:,} of {info['total_parameters']:,}.",
        "",
        "| run | " + " | ".join(recipe.eval.metrics) + " |",
        "|---|" + "---|" * len(recipe.eval.metrics),
    ]
    for name, vals in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{vals[m]:.4f}" for m in recipe.eval.metrics) + " |")
    lines += ["", "Load: `ssft.models.load_ranker('model')`; rerank: `ssft-rerank RUN_DIR --data ... --first-stage ... --split ...`.", ""]
    lines += [f"- {n}" for n in info["notes"]]
    atomic_write_text(out / "README.md", "\n".join(lines) + "\n")


@cli_entry("ssft-train")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ssft-train", description="Train and evaluate a ranker from a YAML recipe.")
    parser.add_argument("recipe", help="recipe YAML file")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. training.learning_rate=1e-4 adapter.r=8")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    ns = parser.parse_args(argv)
    _setup_logging(ns.log_level)
    from ssft.recipe import load_recipe

    recipe = load_recipe(ns.recipe, ns.overrides)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    run_recipe(recipe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
