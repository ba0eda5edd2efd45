"""Stage 3 of ssft-train: the ranker, what it trains on and the objective it trains with. Still nothing written.

Variants are objects, not branches of the pipeline: the training source (``GroupSource``: (query, positive,
negatives) groups; ``QuerySource``: 002's query texts alone) gives each phase its training set; the objective
(``ssft.training.objectives``) gives its collator and loss."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from transformers import set_seed

from ssft.adapters.base import count_parameters
from ssft.adapters.semi_siamese import tower_parameter_counts
from ssft.config.recipe import Recipe
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.data.beir import DocumentTexts
from ssft.data.examples import ScoredGroups, TextGroups, TrainingGroups, build_examples
from ssft.data.query_generation import generate_queries, load_generator
from ssft.pipeline.inputs import RunInputs
from ssft.teachers.in_loop import FrozenTeacher
from ssft.training.distillation import DistillationObjective, QueryTexts
from ssft.training.objectives import Objective, objective_for

logger = logging.getLogger("ssft")


@dataclass(frozen=True)
class GroupSource:
    """(query, positive, negatives) groups of the training split: what every objective but query-only distillation
    trains on. Each phase draws its negatives with its own seed."""

    examples: list
    inputs: RunInputs
    num_negatives: int
    form: str = "qrels"  # qrels (the BEIR training split) or data.train's form: text | ids | scored

    def training_set(self, seed: Any) -> TrainingGroups:
        if self.form == "text":
            return TextGroups(self.examples, self.inputs.dataset, self.num_negatives, seed=seed)
        if self.form == "scored":
            return ScoredGroups(self.examples, self.inputs.dataset, self.num_negatives, seed=seed,
                                name=self.inputs.train_source.name)
        return TrainingGroups(self.examples, self.inputs.dataset, self.num_negatives, seed=seed)


@dataclass(frozen=True)
class QuerySource:
    """002: the student learns from query texts alone (the test split's queries excluded)."""

    texts: list[str]

    def training_set(self, seed: Any) -> QueryTexts:
        return QueryTexts(self.texts)


def training_source(recipe: Recipe, inputs: RunInputs) -> GroupSource | QuerySource:
    d, distill = recipe.data, recipe.distillation
    if distill is not None and distill.query_only:
        query_ids: list[str] = []
        for split in distill.query_splits:
            qrels = inputs.train_qrels if split == d.train_split else inputs.dataset.qrels(split)
            query_ids += [q for q in sorted(qrels) if q in inputs.dataset.queries and q not in inputs.test_qrels]
        return QuerySource([inputs.dataset.queries[q] for q in query_ids])
    if inputs.train_source is not None:  # data.train: the rows bring their own positives and negatives
        source = GroupSource(inputs.train_source.examples, inputs, d.num_negatives, inputs.train_source.form)
        source.training_set(d.sample_seed)  # a scored list shorter than 1 + num_negatives is refused now
        return source
    examples = build_examples(inputs.train_qrels, list(inputs.dataset.corpus), inputs.negatives_run, d.min_relevance,
                              d.max_positives_per_query, d.sample_seed)
    return GroupSource(examples, inputs, d.num_negatives)


@dataclass(frozen=True)
class Parameters:
    trainable: int
    total: int
    head: int
    per_tower: dict[str, int] | None  # bi-encoders: shared / query / document / head (001 reports them per tower)


@dataclass(frozen=True)
class BuiltRun:
    ranker: Any
    objective: Objective
    source: GroupSource | QuerySource
    in_loop_teacher: FrozenTeacher | None
    parameters: Parameters
    generated: dict[str, list[str]] | None = None  # distillation.generated_queries: query text -> its generated queries


def build(recipe: Recipe, inputs: RunInputs) -> BuiltRun:
    source = training_source(recipe, inputs)
    set_seed(recipe.seed)
    ranker = MODELS.get(recipe.model.architecture).build(recipe.model, recipe.adapter.method, recipe.adapter.options,
                                                         config=recipe.adapter.config)
    # the start keeps the checkpoint's ranking ability: what it needs from the corpus (ColBERT's narrower projection)
    # is fitted before training, deterministically (a resumed run fits the same start, then loads its checkpoint)
    fitted = ranker.fit_start(DocumentTexts(list(inputs.dataset.corpus.values())), seed=recipe.seed)
    if fitted:
        logger.info("%s", fitted)
    if getattr(ranker, "reconstruction", None) is not None and not recipe.loss.reconstruction_weight:
        ranker.reconstruction.requires_grad_(False)  # no reconstruction loss: the head would get no gradient (DDP)
    in_loop = None
    if inputs.in_loop_teacher:  # loaded after the student, so the student starts from the same weights either way
        in_loop = FrozenTeacher.load(inputs.in_loop_teacher, recipe.model)
        if inputs.loss.init_from_teacher:  # 003 §4: the student starts from the trained teacher's weights
            in_loop.initialise_student(ranker)
        in_loop.set_precision(recipe.eval.precision)  # after initialise_student: int8 makes a quantised copy
    generated = generated_queries(recipe, source, inputs)
    objective = distillation_objective(recipe, ranker, inputs, generated) or objective_for(
        inputs.loss, in_loop, recipe.loss.reconstruction_weight)
    return BuiltRun(ranker, objective, source, in_loop, count(recipe, ranker), generated)


def source_queries(source: GroupSource | QuerySource, inputs: RunInputs) -> list[str]:
    """The distinct query texts a training source trains on, in first-seen order."""
    if isinstance(source, QuerySource):
        return list(dict.fromkeys(source.texts))
    return list(dict.fromkeys(getattr(ex, "query", None) or inputs.dataset.queries[ex.qid] for ex in source.examples))


def generated_queries(recipe: Recipe, source: GroupSource | QuerySource, inputs: RunInputs) -> dict[str, list[str]] | None:
    """004 App. E: ``per_query`` generated queries for every training query, made once, before training (seeded:
    the same recipe generates the same queries). Empty generations are dropped."""
    distill = recipe.distillation
    g = distill.generated_queries if distill is not None else None
    if g is None:
        return None
    model, tokenizer = load_generator(g.model, recipe.model.trust_remote_code)
    texts = source_queries(source, inputs)
    logger.info("generating %d queries for each of %d training queries with %s (sigma %g, mask probability %g, %s "
                "decoding; 004 App. E)", g.per_query, len(texts), g.model, g.sigma, g.mask_probability, g.decoding)
    outputs = generate_queries(model, tokenizer, texts, g.per_query, g.sigma, g.mask_probability, g.max_length,
                               g.decoding, g.seed, batch_size=recipe.eval.batch_size, name=g.model)
    generated = {text: [q for q in dict.fromkeys(out) if q] for text, out in zip(texts, outputs)}
    dropped = sum(len(out) for out in outputs) - sum(len(v) for v in generated.values())
    if dropped:
        logger.info("generated queries: %d empty or repeated generations dropped", dropped)
    return generated


def distillation_objective(recipe: Recipe, ranker, inputs: RunInputs,
                           generated: dict[str, list[str]] | None = None) -> DistillationObjective | None:
    """The ``distillation`` section's objective (004; 002 with ``query_only``), the student wired to its teacher."""
    distill, teacher = recipe.distillation, inputs.distillation_teacher
    if distill is None:
        return None
    if distill.inherit_documents:
        # asymmetric student: only its query tower trains; a cross-encoder teacher's documents are its empty-query
        # document proxies (004 §5.3)
        ranker.inherit_documents(teacher.inheritable_documents())
    teacher_dim = getattr(teacher, "embedding_dim", None) or teacher.model.embedding_dim
    if ranker.embedding_dim != teacher_dim and (distill.query_embedding_weight or distill.document_embedding_weight):
        raise SsftError(f"{recipe.source}: distillation: the student's vectors have {ranker.embedding_dim} dimensions, "
                        f"the teacher's {teacher_dim}; set model.projection_dim: {teacher_dim} (004 Eq. 7's projection)")
    return DistillationObjective(teacher, distill, inputs.loss, generated)


def count(recipe: Recipe, ranker) -> Parameters:
    trainable, total = count_parameters(ranker)
    head = sum(p.numel() for p in ranker.head_parameters() if p.requires_grad)  # a frozen unused head is not trained
    logger.info("model %s (%s, method %s): %s trainable of %s parameters (%.3f%%; ranker head %s)",
                recipe.model.name, recipe.model.architecture, recipe.adapter.method, f"{trainable:,}", f"{total:,}",
                100 * trainable / total, f"{head:,}")
    per_tower = None
    if ranker.bi_encoder:
        per_tower = tower_parameter_counts(ranker)
        if getattr(ranker, "document_teacher", None) is not None:  # inherited documents: the frozen teacher's
            per_tower.update(shared=0, query=per_tower["query_tower"], document=0, document_tower=0)
        logger.info("trainable parameters per tower: query encoder %s (shared %s + query-specific %s), document "
                    "encoder %s (shared %s + document-specific %s), head %s", *(f"{per_tower[k]:,}" for k in (
                        "query_tower", "shared", "query", "document_tower", "shared", "document", "head")))
    return Parameters(trainable, total, head, per_tower)
