"""Stage 2 of ssft-train: everything the run reads — the dataset and its splits, the first stages, the teachers —
loaded (or refused) before anything is written."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ssft.config.data import DataConfig
from ssft.config.recipe import Recipe
from ssft.config.registry import LOSSES
from ssft.core.errors import SsftError
from ssft.data.beir import IRDataset, Qrels, load_dataset
from ssft.data.examples import judged_documents, sample_corpus, subsample_queries
from ssft.data.hf_sources import TrainSource, load_train_source
from ssft.data.trec import Run
from ssft.firststage.runs import first_stage_run, report_name
from ssft.losses.base import RankingLoss
from ssft.teachers.cross import load_cross_teacher
from ssft.teachers.dense import load_teacher, teacher_reference
from ssft.teachers.in_loop import check_teacher
from ssft.training.checkpoints import content_fingerprint, weights_fingerprint

logger = logging.getLogger("ssft")

FIRST_STAGES_RETRIEVED_NOW = ("bm25", "bm25-stem")


@dataclass(frozen=True)
class RunInputs:
    """The run's data and teachers. ``test_name`` is the first stage's key in metrics.json."""

    dataset: IRDataset
    train_qrels: Qrels
    validation_qrels: Qrels | None
    test_qrels: Qrels
    test_name: str
    test_first: Run
    validation_first: Run | None
    validation_depth: int
    negatives_run: Run | None  # BM25 candidates of the training queries (data.negatives: bm25)
    train_source: TrainSource | None  # data.train's rows (then train_qrels is empty)
    bm25_indexes: dict  # the BM25 indexes built now, cached on disk once the run has succeeded (save_indexes)
    loss: RankingLoss
    in_loop_teacher: str | None  # a loss with needs_teacher (tct): the teacher it scores batches with
    distillation_teacher: Any | None  # the distillation section's frozen teacher
    test_split_queries: int = 0  # the judged queries of the test split before data.max_test_queries
    corpus_note: str | None = None  # how data.max_documents cut the corpus (None: the whole corpus)


def load_inputs(recipe: Recipe) -> RunInputs:
    d, e = recipe.data, recipe.eval
    dataset = load_dataset(d.dataset)
    train_source = None
    if d.train is not None:  # training rows from a Hugging Face dataset, checked against the corpus and queries now
        train_source = load_train_source(d.train, dataset, d.train_format, d.train_subset, d.train_split,
                                         d.min_relevance).subsample(d.max_train_queries, d.max_positives_per_query,
                                                                    d.sample_seed)
        if loss_needs_scores(recipe) != (train_source.form == "scored"):
            raise SsftError(f"{recipe.source}: data.train: {d.train} is in the {train_source.form} form; "
                            + ("the scored form (query_id, document_ids, scores) is what loss '" + recipe.loss.name
                               + "' trains on" if loss_needs_scores(recipe) else
                               "scored rows train with a distillation loss (loss.name: margin_mse or listwise_kl)"))
        train_qrels: Qrels = {}
        validation_qrels = (subsample_queries(dataset.qrels(d.validation_split), d.max_validation_queries,
                                              d.sample_seed) if d.validation_split else None)
    else:
        train_qrels, validation_qrels = split_queries(d, dataset)
    test_split = dataset.qrels(d.test_split)
    test_qrels = subsample_queries(test_split, d.max_test_queries, d.sample_seed)
    test_split_queries, corpus_note = len(test_split), None
    if d.max_documents is not None:  # a cut corpus for a quick trial: every first stage and retrieval sees only it
        judged = judged_documents(train_qrels, validation_qrels, test_qrels)
        whole = len(dataset.corpus)
        dataset = sample_corpus(dataset, judged, d.max_documents, d.sample_seed)
        if len(dataset.corpus) < whole:
            corpus_note = (f"corpus: {len(dataset.corpus):,} of {whole:,} documents (data.max_documents "
                           f"{d.max_documents:,}: the {len(judged):,} judged for the run's queries, then others drawn; "
                           "scores are not comparable with the whole corpus's)")
    loss = LOSSES.get(recipe.loss.name).from_config(recipe.loss.config)  # the typed config the recipe parsed
    in_loop_teacher = recipe.loss.config.teacher if loss.needs_teacher else None
    if in_loop_teacher:
        check_teacher(in_loop_teacher, f"{recipe.source}: loss.teacher")  # a missing teacher fails now
    bm25_cache: dict = {}
    test_name, test_first = first_stage_run(e.first_stage, dataset, bm25_cache, _texts(dataset, test_qrels), e.depth)
    validation_depth = e.validation_depth or e.depth
    validation_first = None
    if validation_qrels:
        spec = e.validation_first_stage or (e.first_stage if e.first_stage in FIRST_STAGES_RETRIEVED_NOW else "bm25")
        _, validation_first = first_stage_run(spec, dataset, bm25_cache, _texts(dataset, validation_qrels),
                                              validation_depth)
    teacher = load_distillation_teacher(recipe)
    if teacher is not None:  # a frozen teacher is an inference path: eval.precision
        teacher.set_precision(e.precision)
    query_only = recipe.distillation is not None and recipe.distillation.query_only
    negatives_run = None
    if d.negatives == "bm25" and not query_only and d.num_negatives > 0 and train_source is None:
        _, negatives_run = first_stage_run("bm25", dataset, bm25_cache, _texts(dataset, train_qrels), d.negatives_depth)
    return RunInputs(dataset, train_qrels, validation_qrels, test_qrels, report_name(test_name, d.test_split), test_first,
                     validation_first, validation_depth, negatives_run, train_source, bm25_cache, loss, in_loop_teacher, teacher,
                     test_split_queries, corpus_note)


def split_queries(d: DataConfig, dataset: IRDataset) -> tuple[Qrels, Qrels | None]:
    """(train, validation) qrels of the run: with ``data.holdout_queries``, that many queries of the train split
    (drawn with ``data.sample_seed``) validate and never train; each side then subsampled by its ``max_*_queries``."""
    train = dataset.qrels(d.train_split)
    validation = dataset.qrels(d.validation_split) if d.validation_split else None
    if d.holdout_queries is not None:
        if d.holdout_queries >= len(train):
            raise SsftError(f"data.holdout_queries: {d.holdout_queries} of the {len(train)} queries of "
                            f"{d.train_split} would leave none to train on")
        held = set(subsample_queries(train, d.holdout_queries, d.sample_seed))
        validation = {q: rel for q, rel in train.items() if q in held}
        train = {q: rel for q, rel in train.items() if q not in held}
    return (subsample_queries(train, d.max_train_queries, d.sample_seed),
            None if validation is None else subsample_queries(validation, d.max_validation_queries, d.sample_seed))


def loss_needs_scores(recipe: Recipe) -> bool:
    return LOSSES.get(recipe.loss.name).needs_teacher_scores


def load_distillation_teacher(recipe: Recipe):
    """The ``distillation`` section's frozen teacher (004 §4.2's dual-pooled cross-encoder, or a dense model)."""
    distill, model = recipe.distillation, recipe.model
    if distill is None:
        return None
    if distill.teacher_kind == "cross_dual_pooled":  # null: the inner product of its proxies (004 App. B)
        return load_cross_teacher(distill.teacher, distill.teacher_pooling, model.max_length,
                                  trust_remote_code=model.trust_remote_code, normalize=bool(distill.teacher_normalize))
    reference = teacher_reference(distill.teacher, distill.teacher_pooling, model.max_length, model.query_max_length,
                                  distill.teacher_normalize is not False)  # null: 20 x cosine, as sentence embedders
    return load_teacher(reference, trust_remote_code=model.trust_remote_code)


def _texts(dataset: IRDataset, qrels: Qrels) -> dict[str, str]:
    return {q: dataset.queries[q] for q in qrels}


def run_fingerprints(recipe: Recipe, inputs: RunInputs) -> dict[str, dict[str, str]]:
    """What a run is made from, as a checkpoint records it (key -> {"sha256", "what": how an error names it}): the
    files of every model it loads weights from (model, document tower, teachers, query generator) and the data it
    trains, validates and tests on (corpus, queries, each split's qrels or data.train's rows, the first-stage
    candidates and BM25 negatives), by content, as read (``ssft.training.checkpoints``)."""
    d, e, distill = recipe.data, recipe.eval, recipe.distillation
    found: dict[str, dict[str, str]] = {}
    models = {"model.name": recipe.model.name, "model.document_name": getattr(recipe.model.config, "document_name", None),
              "loss.teacher": inputs.in_loop_teacher,
              "distillation.teacher": distill.teacher if distill is not None else None,
              "distillation.generated_queries.model": (distill.generated_queries.model if distill is not None
                                                       and distill.generated_queries is not None else None)}
    for key, name in models.items():
        if name:
            found[key] = {"sha256": weights_fingerprint(name), "what": f"the files of {key} ({name})"}
    dataset = inputs.dataset
    where = f"data.dataset ({dataset.path})"
    data: dict[str, tuple[str, Any]] = {
        "corpus": (f"the corpus of {where}", dataset.corpus.items()),
        "queries": (f"the queries of {where}", dataset.queries.items()),
        "data.train_split": (f"the qrels of data.train_split '{d.train_split}' in {where}", inputs.train_qrels.items()),
        "data.validation_split": (f"the qrels of data.validation_split '{d.validation_split}' in {where}",
                                  (inputs.validation_qrels or {}).items()),
        "data.test_split": (f"the qrels of data.test_split '{d.test_split}' in {where}", inputs.test_qrels.items()),
        "eval.first_stage": (f"the candidates of eval.first_stage ({e.first_stage}) for the test queries",
                             inputs.test_first.items()),
        "eval.validation_first_stage": ("the validation candidates (eval.validation_first_stage: "
                                        f"{e.validation_first_stage or 'bm25'})", (inputs.validation_first or {}).items()),
        "data.negatives": (f"the BM25 negatives of the training queries in {where}", (inputs.negatives_run or {}).items()),
    }
    if inputs.train_source is not None:
        data["data.train"] = (f"the rows of data.train ({d.train})", inputs.train_source.examples)
    for key, (what, items) in data.items():
        found[key] = {"sha256": content_fingerprint(items), "what": what}
    return found
