"""data.max_documents: a corpus cut for a quick trial keeps every document judged for the run's queries, fills up to
the limit with a seeded draw, leaves the caller's dataset as it was, and is what the run's first stages retrieve from."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from ssft.config.recipe import recipe_from_dict
from ssft.core.errors import SsftError
from ssft.data.beir import Document, IRDataset, load_dataset
from ssft.data.examples import judged_documents, sample_corpus
from ssft.pipeline.inputs import load_inputs
from tests.conftest import SHARED_DATA


def dataset(n: int = 50) -> IRDataset:
    corpus = {f"d{i}": Document("", f"document {i}") for i in range(n)}
    queries = {f"q{i}": f"query {i}" for i in range(5)}
    ds = IRDataset("toy", Path("toy"), corpus, queries)
    ds._qrels["test"] = {"q0": {"d1": 1, "d40": 2}, "q1": {"d2": 1}, "q4": {"d3": 1}}
    return ds


def test_the_judged_documents_stay_and_the_rest_is_a_seeded_draw():
    ds = dataset()
    keep = judged_documents({"q0": {"d1": 1, "d40": 2}}, None, {"q1": {"d2": 1}})
    assert keep == {"d1", "d40", "d2"}
    cut = sample_corpus(ds, keep, 10, seed=0)
    assert len(cut.corpus) == 10 and keep <= set(cut.corpus)
    assert list(cut.corpus) == [d for d in ds.corpus if d in cut.corpus]  # the corpus's own order
    assert set(sample_corpus(ds, keep, 10, seed=0).corpus) == set(cut.corpus)
    assert set(sample_corpus(ds, keep, 10, seed=1).corpus) != set(cut.corpus)
    # the qrels already read keep every query, judged on the documents kept only
    assert cut.qrels("test")["q0"] == {"d1": 1, "d40": 2} and cut.qrels("test")["q1"] == {"d2": 1}
    assert cut.qrels("test")["q4"] == ({"d3": 1} if "d3" in cut.corpus else {})
    # the caller's dataset is unchanged
    assert len(ds.corpus) == 50 and ds.qrels("test")["q4"] == {"d3": 1}


def test_more_judged_documents_than_the_limit_are_all_kept_and_a_small_corpus_is_left_whole():
    ds = dataset()
    keep = {f"d{i}" for i in range(12)}
    assert set(sample_corpus(ds, keep, 5, seed=0).corpus) == keep
    assert sample_corpus(ds, set(), 50, seed=0) is ds


@pytest.mark.parametrize("data, message", [
    ({"max_documents": 0}, r"data\.max_documents: must be >= 1 or null"),
    ({"max_documents": 10, "train": "rows.jsonl"}, r"data\.max_documents: cuts the corpus around"),
])
def test_bad_values_are_refused(data, message):
    with pytest.raises(SsftError, match=message):
        recipe_from_dict({"data": data})


@pytest.mark.integration
def test_a_run_reads_only_the_cut_corpus_on_scifact(monkeypatch):
    monkeypatch.setenv("SSFT_DATA_HOME", os.environ.get("SSFT_DATA_HOME") or str(SHARED_DATA))
    recipe = recipe_from_dict({"data": {"dataset": "scifact", "validation_split": "train", "holdout_queries": 150,
                                        "max_train_queries": 8, "max_validation_queries": 4, "max_test_queries": 10,
                                        "max_documents": 300}, "eval": {"depth": 100}})
    inputs = load_inputs(recipe)
    judged = judged_documents(inputs.train_qrels, inputs.validation_qrels, inputs.test_qrels)
    assert len(inputs.dataset.corpus) == 300 and judged <= set(inputs.dataset.corpus)
    assert inputs.corpus_note.startswith("corpus: 300 of 5,183 documents")
    assert inputs.test_split_queries == 300
    for run in (inputs.test_first, inputs.validation_first, inputs.negatives_run):
        assert {d for docs in run.values() for d in docs} <= set(inputs.dataset.corpus)
    assert len(load_dataset("scifact").corpus) == 5183
