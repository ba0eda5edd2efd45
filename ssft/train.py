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
from ssft.run_folder import TRAIN_MARKERS, TRAIN_OUTPUTS, OutputFolder

logger = logging.getLogger("ssft")
_USER_TENSORBOARD_DIR = os.environ.get("TENSORBOARD_LOGGING_DIR")  # the user's own choice, if any, before ssft sets it


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
    """``bm25`` / ``bm25-stem``: retrieve now; anything else: a TREC run file, restricted to the corpus's documents
    (the others counted into ``dataset.warnings``; a run with none of them is refused now, before any training)."""
    from ssft.data.trec import read_run, restrict_to_corpus

    if spec in ("bm25", "bm25-stem"):
        if spec not in bm25_cache:
            from ssft.firststage.bm25 import BM25

            bm25_cache[spec] = BM25(dataset, stem=spec == "bm25-stem")
        return spec, bm25_cache[spec].search(queries, depth)
    run = restrict_to_corpus(read_run(spec), dataset.corpus, spec, dataset.warnings)
    return first_stage_name(spec), run


def first_stage_name(spec: str) -> str:
    """A run file's name without its extension: 'runs/bm25.test.trec' → 'bm25.test'."""
    name = Path(spec).name
    for ext in (".trec", ".txt", ".run", ".tsv"):
        name = name.removesuffix(ext)
    return name or "first_stage"


def report_name(first_stage: str, split: str) -> str:
    """The first stage's key in metrics.json and its file names: never the split's own key (a run file named
    ``test.trec`` reranked on split ``test`` would otherwise replace the model's row with the first stage's)."""
    if first_stage == split or first_stage.startswith(split + "+"):
        return f"first_stage.{first_stage}"
    return first_stage


# recipe keys a resume may change with --resume-with-changes: optimiser settings (after a NaN stop, a lower learning
# rate or a gradient clip continues from the last good checkpoint); anything else changes what the checkpoints mean
RESUMABLE_CHANGES = ("training.learning_rate", "model.head_learning_rate", "training.max_grad_norm")


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    """The dotted keys where two recipe dicts differ, in order."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in list(old) + [k for k in new if k not in old]:
            found += _differences(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
        return found
    return [] if old == new else [where or "<recipe>"]


def train_output_folder(out: Path) -> OutputFolder:
    """ssft-train's output folder; logs/ is ssft's only when ssft chose it as the TensorBoard folder."""
    outputs = tuple(o for o in TRAIN_OUTPUTS if o != "logs" or not _USER_TENSORBOARD_DIR)
    return OutputFolder(out, "ssft-train", outputs, TRAIN_MARKERS, where="training.output_dir")


def run_folder_state(recipe, folder: OutputFolder, overwrite: bool, resume_with_changes: bool = False) -> tuple[str, list[str]]:
    """('new' | 'resume' | 'overwrite', the recipe keys a resume changes). Refused: a folder ssft-train must not
    write into (``OutputFolder.check``), a finished run (metrics.json) and checkpoints of another recipe, unless
    ``overwrite``; a resume that changes anything but ``RESUMABLE_CHANGES`` (those only with
    ``resume_with_changes``)."""
    import yaml

    from ssft.trainer import complete_checkpoints

    out = folder.path
    # under accelerate launch only process 0 writes (and locks); the others must not mistake its lock for another run's
    folder.check(check_lock=os.environ.get("RANK", "0") == "0")
    if overwrite:
        return "overwrite", []
    if (out / "metrics.json").is_file():
        raise SsftError(f"{out} holds a finished run (metrics.json); pass --overwrite to train it again, "
                        f"or set training.output_dir to another folder")
    folders = [out] + sorted(out.glob("phase-*"))
    if not any(complete_checkpoints(f) for f in folders) and not list(out.glob("phase-*/phase.json")):
        return "new", []
    saved_file = out / "recipe.yaml"
    try:
        saved = yaml.safe_load(saved_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        saved = None
    if not isinstance(saved, dict):
        raise SsftError(f"{out} holds checkpoints but no readable recipe.yaml to check them against; "
                        f"pass --overwrite to discard them")
    current = yaml.safe_load(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    for d in (saved, current):
        d.get("training", {}).pop("output_dir", None)
    differs = _differences(saved, current)
    fixed = [key for key in differs if key not in RESUMABLE_CHANGES]
    if fixed:
        raise SsftError(f"{out} holds checkpoints of a different recipe ({fixed[0]} differs); pass --overwrite to "
                        f"discard them, or set training.output_dir to another folder")
    if differs and not resume_with_changes:
        raise SsftError(f"{out} holds checkpoints trained with another {differs[0]}; pass --resume-with-changes to "
                        f"continue from them with the new value, or --overwrite to start over")
    return "resume", differs


def run_recipe(recipe, overwrite: bool = False, resume_with_changes: bool = False) -> dict[str, Any]:
    """Everything a recipe describes. Returns metrics.json's content.

    The output folder decides what happens: empty or absent, train; checkpoints of this same recipe but no
    metrics.json (a run that was killed), resume from the latest complete checkpoint (``resume_with_changes``: also
    when only ``RESUMABLE_CHANGES`` differ); a finished run, refused (``overwrite`` trains again from scratch,
    removing only what ssft-train wrote); a folder with anything else in it, refused. The folder is locked while
    the run writes into it."""
    folder = train_output_folder(Path(recipe.training["output_dir"]))
    try:
        return _run_recipe(recipe, folder, overwrite, resume_with_changes)
    finally:
        folder.release()


def _run_recipe(recipe, folder: OutputFolder, overwrite: bool, resume_with_changes: bool) -> dict[str, Any]:
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
    from ssft.trainer import RankingTrainer, discard_incomplete_checkpoints, latest_checkpoint

    started = time.time()
    d, e = recipe.data, recipe.eval
    out = folder.path
    folder_state, resume_changes = run_folder_state(recipe, folder, overwrite, resume_with_changes)
    # ---- everything that can fail on bad input happens before anything is written
    recipe.check_model()  # a missing model, or lengths beyond its position embeddings, fail now, not after the data work
    dataset = load_dataset(d.dataset)
    train_qrels = subsample_queries(dataset.qrels(d.train_split), d.max_train_queries, d.sample_seed)
    val_qrels = subsample_queries(dataset.qrels(d.validation_split), d.max_validation_queries, d.sample_seed) if d.validation_split else None
    test_qrels = subsample_queries(dataset.qrels(d.test_split), d.max_test_queries, d.sample_seed)
    loss = LOSSES.get(recipe.loss.name).from_options(recipe.loss.options)
    teacher_name = getattr(loss, "teacher", None) if getattr(loss, "needs_teacher", False) else None
    if teacher_name:
        from ssft.models.teacher import check_teacher

        check_teacher(teacher_name, f"{recipe.source}: loss.teacher")  # a missing teacher fails now, before any output
    # a checkpoint every epoch (only the latest kept) lets a killed run resume; removed once the run finishes
    # unless the recipe asks for checkpoints itself (training.save_strategy)
    default_checkpoints = "save_strategy" not in recipe.training
    training_kwargs = {"remove_unused_columns": False, "report_to": ["tensorboard"], "save_strategy": "epoch",
                       "save_total_limit": 1,
                       "eval_strategy": "epoch" if val_qrels else "no", "logging_strategy": "steps", "logging_steps": 10,
                       "disable_tqdm": not sys.stderr.isatty(), "seed": recipe.seed,
                       "dataloader_pin_memory": torch.cuda.is_available()}
    training_kwargs.update(recipe.training)
    # TensorBoard goes to this run's logs/ (HF reads the variable when a Trainer is built), unless the user set it
    os.environ["TENSORBOARD_LOGGING_DIR"] = _USER_TENSORBOARD_DIR or str(out / "logs")
    try:
        args = TrainingArguments(**training_kwargs)
    except (ValueError, TypeError) as err:
        raise SsftError(f"{recipe.source}: training: {str(err).splitlines()[0]}") from None
    if args.world_size > 1 and (teacher_name or recipe.distillation is not None):
        # the teacher scores and embedding targets are per process: nothing gathers them across processes yet
        raise SsftError(f"{recipe.source}: {'loss.teacher' if teacher_name else 'distillation'}: distillation trains "
                        f"in one process (no accelerate launch --num_processes {args.world_size})")
    if args.fp16 and args.device.type == "cpu":
        logger.warning("training.fp16 on a CPU: accelerate autocasts fp16 on GPUs only, this run trains in float32 "
                       "(for mixed precision on a CPU use training.bf16 with training.use_cpu)")
    bm25_cache: dict = {}
    test_name, test_first = first_stage_run(e.first_stage, dataset, bm25_cache, {q: dataset.queries[q] for q in test_qrels}, e.depth)
    test_name = report_name(test_name, d.test_split)
    val_depth = e.validation_depth or e.depth
    val_first = None
    if val_qrels:
        val_spec = e.validation_first_stage or ("bm25" if e.first_stage not in ("bm25", "bm25-stem") else e.first_stage)
        _, val_first = first_stage_run(val_spec, dataset, bm25_cache, {q: dataset.queries[q] for q in val_qrels}, val_depth)
    distill = recipe.distillation
    teacher = None
    if distill is not None:  # the teacher loads (or fails) before anything is written
        if distill.teacher_kind == "cross_dual_pooled":
            from ssft.distill.cross_teacher import load_cross_teacher

            teacher = load_cross_teacher(distill.teacher, distill.teacher_pooling, recipe.model.max_length,
                                         trust_remote_code=recipe.model.trust_remote_code)
        else:
            from ssft.distill.teacher import load_teacher, teacher_reference

            teacher = load_teacher(teacher_reference(distill.teacher, distill.teacher_pooling, recipe.model.max_length,
                                                     recipe.model.query_max_length),
                                   trust_remote_code=recipe.model.trust_remote_code)
    query_only = distill is not None and distill.query_only
    negatives_run = None
    if d.negatives == "bm25" and not query_only:
        _, negatives_run = first_stage_run("bm25", dataset, bm25_cache, {q: dataset.queries[q] for q in train_qrels}, d.negatives_depth)
    if query_only:  # 002: the student learns from query texts alone
        from ssft.distill.objective import QueryTexts

        query_ids: list[str] = []
        for split in distill.query_splits:
            split_qrels = train_qrels if split == d.train_split else dataset.qrels(split)
            query_ids += [q for q in sorted(split_qrels) if q in dataset.queries and q not in test_qrels]
        examples = []
        train_set = QueryTexts([dataset.queries[q] for q in query_ids])
    else:
        examples = build_examples(train_qrels, list(dataset.corpus), negatives_run, d.min_relevance, d.max_positives_per_query, d.sample_seed)
        train_set = TrainingGroups(examples, dataset, d.num_negatives, seed=recipe.seed)
    set_seed(recipe.seed)
    ranker = MODELS.get(recipe.model.architecture).build(recipe.model, recipe.adapter.method, recipe.adapter.options)
    score_teacher = None  # the loss's in-loop teacher (tct)
    if teacher_name:  # built after the student, so the student starts from the same weights with or without it
        from ssft.models.teacher import FrozenTeacher

        score_teacher = FrozenTeacher.load(teacher_name, recipe.model)
    objective = None
    if distill is not None:
        from ssft.distill.objective import DistillationObjective

        if distill.inherit_documents:
            ranker.inherit_documents(teacher)  # asymmetric student: only its query tower trains
        teacher_dim = getattr(teacher, "embedding_dim", None) or teacher.model.embedding_dim
        if ranker.embedding_dim != teacher_dim and (distill.query_embedding_weight or distill.document_embedding_weight):
            raise SsftError(f"{recipe.source}: distillation: the student's vectors have {ranker.embedding_dim} dimensions, the "
                            f"teacher's {teacher_dim}; set model.projection_dim: {teacher_dim} (004 Eq. 7's projection)")
        objective = DistillationObjective(teacher, distill, loss)
    trainable, total = count_parameters(ranker)
    head = sum(p.numel() for p in ranker.head_parameters())
    logger.info("model %s (%s, method %s): %s trainable of %s parameters (%.3f%%; ranker head %s)",
                recipe.model.name, recipe.model.architecture, recipe.adapter.method, f"{trainable:,}", f"{total:,}",
                100 * trainable / total, f"{head:,}")
    per_tower = None
    if recipe.model.architecture != "cross":
        from ssft.adapters.semi_siamese import tower_parameter_counts

        per_tower = tower_parameter_counts(ranker)
        if getattr(ranker, "document_teacher", None) is not None:  # inherited documents: the frozen teacher's
            per_tower.update(shared=0, query=per_tower["query_tower"], document=0, document_tower=0)
        logger.info("trainable parameters per tower: query encoder %s (shared %s + query-specific %s), document encoder %s "
                    "(shared %s + document-specific %s), head %s", *(f"{per_tower[k]:,}" for k in (
                        "query_tower", "shared", "query", "document_tower", "shared", "document", "head")))

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
    if query_only:
        notes = [f"training: query-only distillation from {distill.teacher} on {len(train_set)} queries of "
                 f"{d.dataset}/{'+'.join(distill.query_splits)} (test queries excluded), " + schedule]
    else:
        notes = [
            f"training: {len(train_qrels)} queries of {d.dataset}/{d.train_split} "
            f"({'all' if d.max_train_queries is None else 'subsampled'}), {len(examples)} (query, positive) examples, "
            f"{d.num_negatives} {d.negatives} negative(s) each, " + schedule,
        ]
        if distill is not None:
            notes.append(f"distillation from {distill.teacher}: weights one-hot {distill.one_hot_weight:g}, score "
                         f"({distill.score_loss}) {distill.score_weight:g}, query embedding {distill.query_embedding_weight:g}, "
                         f"document embedding {distill.document_embedding_weight:g}"
                         + ("; documents inherited from the teacher" if distill.inherit_documents else ""))
        if score_teacher is not None:
            notes.append(f"distillation (003 Eq. 6): frozen {score_teacher.ranker.architecture} teacher {teacher_name} scores "
                         f"every query x document of each batch; gamma {loss.gamma:g}, teacher temperature {loss.temperature:g}")
    if val_qrels:
        notes.append(f"validation: {len(val_qrels)} queries of {d.validation_split}, top-{val_depth} of the first stage, "
                     f"best epoch by {e.selection_metric}")
    notes.append(f"test: {len(test_qrels)} queries of {d.test_split}"
                 f"{' (subsampled)' if d.max_test_queries and d.max_test_queries < len(dataset.qrels(d.test_split)) else ''}, "
                 + (f"full retrieval of the top-{e.depth} of the corpus ({test_name} reported beside it)"
                    if getattr(MODELS.get(recipe.model.architecture), "full_retrieval", False) else f"top-{e.depth} of {test_name}"))
    for note in notes:
        logger.info(note)

    # ---- from here on, outputs: written by the main process only (accelerate launch --num_processes N runs this
    # function in every process; they all train and take part in scoring, only process 0 writes)
    main = args.should_save
    resume = folder_state == "resume"
    with args.main_process_first(local=False, desc="preparing the output folder"):  # the others wait until it is ready
        if main:
            folder.claim()
            if folder_state == "overwrite":
                removed = folder.clear()
                if removed:
                    logger.info("--overwrite: removed the earlier run's outputs from %s: %s", out, ", ".join(removed))
            # metrics.json marks a finished run and is written last, so a crash midway never leaves a folder that looks complete
            folder.mark_unfinished()
            if resume_changes:
                logger.warning("--resume-with-changes: continuing from the checkpoints with a new %s",
                               ", ".join(f"{k}" for k in resume_changes))
            import yaml

            atomic_write_text(out / "recipe.yaml", yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    from ssft.callbacks import build_callbacks, callback_name

    if distill is not None and distill.keep_teacher_corpus and not query_only and distill.teacher_kind == "dense" and (
            distill.inherit_documents or distill.score_weight or distill.document_embedding_weight):
        # the teacher's document embeddings come from its corpus index (on-disk cache), encoded once
        logger.info("teacher: kept the document embeddings of %d documents", teacher.keep_corpus(dataset, e.batch_size))

    extra_callbacks = build_callbacks([c for c in recipe.callbacks if callback_name(c) != "best_epoch"],
                                      dataset=dataset, validation_qrels=val_qrels, train_qrels=train_qrels)

    from ssft.distill.objective import DistillationCollator

    def new_trainer(train_args, callbacks, groups=train_set) -> RankingTrainer:
        return RankingTrainer(
            model=ranker,
            args=train_args,
            train_dataset=groups,
            eval_dataset=val_pairs,
            data_collator=(DistillationCollator(ranker, teacher) if teacher is not None
                           else RankerCollator(ranker, score_teacher)),
            loss=loss,
            teacher=score_teacher,
            distillation=objective,
            head_learning_rate=recipe.model.head_learning_rate,
            learning_rates_from_args=bool(resume_changes),
            eval_qrels=val_qrels,
            eval_metrics=sorted({e.selection_metric, *e.metrics}),
            callbacks=callbacks + extra_callbacks,
        )

    train_started = time.time()
    phases_info = None
    resumed_from = None
    if hybrid is not None:  # one Trainer run per phase (001 Algorithm 1), each keeping its best validation epoch
        from ssft.adapters.hybrid import train_hybrid

        def make_trainer(phase: str, epochs: int, callbacks: list) -> RankingTrainer:
            logger.info("hybrid phase '%s': %d epoch(s)", phase, epochs)
            # each phase checkpoints into its own folder and draws its own negatives
            phase_args = TrainingArguments(**{**training_kwargs, "num_train_epochs": epochs,
                                              "output_dir": str(out / f"phase-{phase}")})
            groups = TrainingGroups(examples, dataset, d.num_negatives, seed=f"{recipe.seed}:{phase}")
            return new_trainer(phase_args, callbacks, groups)

        if resume:
            resumed_from = [str(p.relative_to(out)) for p in sorted(out.glob("phase-*/phase.json"))]
            resumed_from += [str(c.relative_to(out)) for f in sorted(out.glob("phase-*")) if (c := latest_checkpoint(f))]
            logger.info("resuming the hybrid run in %s (%s)", out, ", ".join(resumed_from))
        phases = train_hybrid(ranker, hybrid, make_trainer, e.selection_metric, resume=True)
        trainer, best, train_output = phases[-1].trainer, phases[-1].best, phases[-1].train_output
        phases_info = [{"phase": p.name, "modules": list(p.modules), "epochs": p.epochs, "train_loss": p.train_output.training_loss,
                        "best_validation": {"metric": e.selection_metric, "value": p.best.best_value, "epoch": p.best.best_epoch},
                        "validation_history": p.best.history} for p in phases]
    else:
        best = BestEpochCallback(e.selection_metric)
        trainer = new_trainer(args, [best])
        checkpoint = None
        with args.main_process_first(local=False, desc="discarding incomplete checkpoints"):
            for removed in (discard_incomplete_checkpoints(out) if main else []):  # never trained into, never resumed from
                logger.warning("removed %s: a checkpoint cut short by an interruption", removed)
        if resume:
            checkpoint = latest_checkpoint(out)
            if checkpoint is not None:
                resumed_from = str(checkpoint.relative_to(out))
                logger.info("resuming from %s", checkpoint)
        train_output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    train_seconds = time.time() - train_started
    ranker.eval()
    if main:
        ranker.save(out / "model")  # PEFT format, before any merge
    ranker.requires_grad_(False)  # frozen from here on (lets ColBERT reuse cached document embeddings)
    if ranker.can_merge:  # lora / lora++ only; ss_lora's two towers cannot share merged weights
        ranker.merge_adapter()  # same scores, no LoRA overhead while reranking

    alpha = e.interpolation
    if alpha == "auto":
        val_run = val_pairs.to_run(trainer.score(val_pairs))
        alpha = tune_alpha(val_run, val_first, val_qrels, e.selection_metric)
        logger.info("interpolation weight tuned on %s: alpha = %.2f", d.validation_split, alpha)
    full_retrieval = getattr(ranker, "full_retrieval", False)
    report_options = {}
    if full_retrieval and e.fusion is not None:  # 003 Eq. 7: dense top-k ∪ first-stage top-k
        fusion_alpha = e.fusion
        if fusion_alpha == "auto":
            from ssft.data.trec import top_k
            from ssft.eval.fusion import tune_fusion_alpha
            from ssft.eval.retrieve import retrieve

            val_dense = retrieve(ranker, dataset, {q: dataset.queries[q] for q in val_qrels}, val_depth, e.batch_size)
            fusion_alpha = tune_fusion_alpha(val_dense, top_k(val_first, val_depth), val_qrels, e.selection_metric)
            logger.info("dense-sparse fusion weight tuned on %s: alpha = %g", d.validation_split, fusion_alpha)
        report_options["fusion_alpha"] = float(fusion_alpha)
    report = retrieve_and_report if full_retrieval else rerank_and_report  # dense: full retrieval
    results, info = report(
        ranker=ranker, dataset=dataset, split=d.test_split, qrels=test_qrels, first_stage=test_first,
        first_stage_name=test_name, depth=e.depth, metrics=e.metrics, output_dir=out, batch_size=e.batch_size,
        trainer=trainer, alpha=alpha, write=main, **report_options,
    )
    info.update({
        "trainable_parameters": trainable, "total_parameters": total, "trainable_parameters_per_tower": per_tower,
        "train_seconds": round(train_seconds, 1), "wall_seconds": round(time.time() - started, 1),
        "train_loss": train_output.training_loss, "best_validation": {"metric": e.selection_metric, "value": best.best_value, "epoch": best.best_epoch},
        "validation_history": best.history, "notes": notes, "data_warnings": dataset.warnings,
    })
    if phases_info is not None:
        info["hybrid_phases"] = phases_info
    if resumed_from:
        info["resumed_from"] = resumed_from
    if resume_changes:
        info["resumed_with_changes"] = resume_changes
    if args.world_size > 1:
        info["processes"] = args.world_size
    if not main:
        return results
    atomic_write_json(out / "run_info.json", info)
    _write_model_card(out, recipe, results, info)
    atomic_write_json(out / "metrics.json", results)  # last: its presence marks a finished run
    if default_checkpoints:  # they served only to resume: the run is finished
        import shutil

        for folder in [*out.glob("checkpoint-*"), *out.glob("phase-*")]:
            shutil.rmtree(folder, ignore_errors=True)
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


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None):
    """argparse, with usage errors as one-line SsftErrors (like every other error of the CLIs)."""

    def error(message: str):
        raise SsftError(f"{message} (see --help)")

    parser.error = error
    return parser.parse_args(argv)


@cli_entry("ssft-train")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ssft-train", description="Train and evaluate a ranker from a YAML recipe.")
    parser.add_argument("recipe", help="recipe YAML file")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. training.learning_rate=1e-4 adapter.r=8")
    parser.add_argument("--overwrite", action="store_true",
                        help="train again from scratch into an output folder that holds a finished run or checkpoints "
                             "(its earlier outputs are removed first)")
    parser.add_argument("--resume-with-changes", action="store_true",
                        help="resume from the checkpoints of a run whose recipe differs only in "
                             + ", ".join(RESUMABLE_CHANGES) + " (e.g. a lower learning rate after a NaN stop)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    ns = parse_args(parser, argv)
    _setup_logging(ns.log_level)
    from ssft.recipe import load_recipe

    recipe = load_recipe(ns.recipe, ns.overrides)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if ns.overwrite and ns.resume_with_changes:
        raise SsftError("--overwrite starts over and --resume-with-changes continues: pass one of them")
    run_recipe(recipe, overwrite=ns.overwrite, resume_with_changes=ns.resume_with_changes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
