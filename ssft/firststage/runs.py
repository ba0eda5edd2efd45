"""First-stage runs by name: ``bm25`` / ``bm25-stem`` retrieved now, anything else a TREC run file; and the names
their rows get in metrics.json."""
from __future__ import annotations

from ssft.core.output_names import file_stem, first_stage_row
from ssft.data.trec import read_run, restrict_to_corpus
from ssft.firststage.bm25 import BM25


def first_stage_run(spec: str, dataset, bm25_cache: dict, queries: dict[str, str], depth: int):
    """``bm25`` / ``bm25-stem``: retrieve now; anything else: a TREC run file, restricted to the corpus's documents
    (the others counted into ``dataset.warnings``; a run with none of them is refused now, before any training).
    A BM25 index built here is kept in ``bm25_cache`` and goes to the on-disk cache only with ``save_indexes``,
    which the caller runs once it has succeeded."""
    if spec in ("bm25", "bm25-stem"):
        if spec not in bm25_cache:
            bm25_cache[spec] = BM25(dataset, stem=spec == "bm25-stem", save=False)
        return spec, bm25_cache[spec].search(queries, depth)
    run = restrict_to_corpus(read_run(spec), dataset.corpus, spec, dataset.warnings)
    return first_stage_name(spec), run


def save_indexes(bm25_cache: dict) -> None:
    """Write the BM25 indexes ``first_stage_run`` built to the on-disk cache (those loaded from it stay as they are)."""
    for index in bm25_cache.values():
        index.save()


def first_stage_name(spec: str) -> str:
    """A run file's name without its extension: 'runs/bm25.test.trec' → 'bm25.test'."""
    return file_stem(spec) or "first_stage"


def report_name(first_stage: str, split: str) -> str:
    """The first stage's key in metrics.json and the label of its files (``ssft.core.output_names``): a run file's
    name without ssft's ``run.`` prefix and ``.<split>`` suffix (``run.bm25.test.trec`` on ``test``: ``bm25``; the
    doubled names of earlier versions, ``run.run.bm25.test.test.trec``, too); never the split's own key (a run file
    named ``test.trec`` reranked on split ``test`` would otherwise replace the model's row with the first stage's)."""
    return first_stage_row(first_stage, split)
