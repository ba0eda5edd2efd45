"""What a training run trains on, validates and tests with, in words: the notes ssft-train logs once its inputs are
known good, prints again at the end and keeps in run_info.json (``notes``)."""
from __future__ import annotations

import logging

from ssft.config.recipe import Recipe
from ssft.config.registry import ADAPTERS
from ssft.pipeline.build import BuiltRun, GroupSource
from ssft.pipeline.check import evaluation_plan
from ssft.pipeline.inputs import RunInputs

logger = logging.getLogger("ssft")


def describe(recipe: Recipe, inputs: RunInputs, built: BuiltRun, schedule: str, precision_note: str = "") -> list[str]:
    """What the run trains on, validates and tests with: logged now, printed again at the end, kept in run_info."""
    d, e, distill = recipe.data, recipe.eval, recipe.distillation
    if not isinstance(built.source, GroupSource):
        notes = [f"training: query-only distillation from {distill.teacher} on {len(built.source.texts)} queries of "
                 f"{d.dataset}/{'+'.join(distill.query_splits)} (test queries excluded), " + schedule]
    elif inputs.train_source is not None:
        negatives = "in-batch negatives only" if d.num_negatives == 0 else f"{d.num_negatives} negative(s) each"
        source = inputs.train_source
        subsampled = ""
        if d.max_train_queries is not None or d.max_positives_per_query is not None:
            subsampled = (f" ({len({source.query_key(ex) for ex in source.examples})} queries"
                          + (f" drawn, at most {d.max_train_queries}" if d.max_train_queries is not None else "")
                          + (f"; at most {d.max_positives_per_query} positive(s) per query"
                             if d.max_positives_per_query is not None else "") + ")")
        notes = [f"training: {len(built.source.examples)} rows of {d.train} ({source.form} form){subsampled}, "
                 f"{negatives}, " + schedule]
    else:
        notes = [f"training: {len(inputs.train_qrels)} queries of {d.dataset}/{d.train_split} "
                 f"({'all' if d.max_train_queries is None else 'subsampled'}), {len(built.source.examples)} (query, "
                 f"positive) examples, " + (f"{d.num_negatives} {d.negatives} negative(s) each, " if d.num_negatives
                                            else "in-batch negatives only, ") + schedule]
        if distill is not None:
            notes.append(f"distillation from {distill.teacher}: weights one-hot {distill.one_hot_weight:g}, score "
                         f"({distill.score_loss}) {distill.score_weight:g}, query embedding "
                         f"{distill.query_embedding_weight:g}, document embedding {distill.document_embedding_weight:g}"
                         + ("; documents inherited from the teacher" if distill.inherit_documents else ""))
        if built.in_loop_teacher is not None:
            notes.append(f"distillation (003 Eq. 6): frozen {built.in_loop_teacher.ranker.architecture} teacher "
                         f"{inputs.in_loop_teacher} scores every query x document of each batch; gamma "
                         f"{inputs.loss.gamma:g}, teacher temperature {inputs.loss.temperature:g}")
    if built.generated is not None:
        notes.append(f"generated queries (004 App. E): {sum(len(g) for g in built.generated.values())} from "
                     f"{len(built.generated)} training queries by {distill.generated_queries.model}, in the query "
                     f"embedding matching only (weight {distill.generated_queries.weight:g})")
    if recipe.loss.reconstruction_weight:
        notes.append(f"token reconstruction loss (004 §4.2), weight {recipe.loss.reconstruction_weight:g}, beside "
                     f"{recipe.loss.name}")
    if inputs.validation_qrels:
        held = " held out of training (data.holdout_queries)" if d.holdout_queries else ""
        notes.append(f"validation: {len(inputs.validation_qrels)} queries of {d.validation_split}{held}, "
                     + ("full retrieval of the corpus" if built.ranker.full_retrieval
                        else f"top-{inputs.validation_depth} of the first stage")
                     + f", best epoch by {e.selection_metric}"
                     + ("" if e.start else " among the trained epochs (eval.start: false)"))
    finish = ADAPTERS.get(recipe.adapter.method).finish_plan(recipe.adapter.config)
    if finish:
        notes.append(finish)
    subsampled = d.max_test_queries and d.max_test_queries < inputs.test_split_queries
    if inputs.corpus_note:
        notes.append(inputs.corpus_note)
    notes.append(f"test: {len(inputs.test_qrels)} queries of {d.test_split}{' (subsampled)' if subsampled else ''}, "
                 + (f"full retrieval of the top-{e.depth} of the corpus ({inputs.test_name} reported beside it)"
                    if built.ranker.full_retrieval else f"top-{e.depth} of {inputs.test_name}"))
    ranker = built.ranker  # the start and the encodings, as the loaded model decides them
    notes += evaluation_plan(recipe, ranker.full_retrieval, ranker.bi_encoder, ranker.ranks_untrained)
    notes += [note for note in precision_note.splitlines() if note]  # what training.bf16 / eval.precision: auto became
    for note in notes:
        logger.info(note)
    return notes


__all__ = ["describe"]
