"""Ranking without relevance judgements: ssft-rerank without --split ranks a first stage's candidates for the
dataset's queries or a --queries file of raw texts and writes a TREC run, no metrics; ``Ranker.rank`` does the same
over a dict of queries and a candidate run."""
from __future__ import annotations

import json

import pytest
import torch

from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.data.beir import load_dataset
from ssft.data.trec import read_run, write_run


@pytest.fixture
def cross_run(tiny_model_dir, tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="cross", name=str(tiny_model_dir), max_length=48)
    MODELS.get("cross").build(cfg, "full", {}).save(tmp_path / "run" / "model")
    return tmp_path / "run"


def _rerank(*args: str) -> int:
    from ssft.cli.rerank import main

    return main([*args, "--precision", "fp32"])


def _expected(run_folder, queries: dict[str, str], candidates: dict[str, list[str]], corpus) -> dict[str, dict[str, float]]:
    from ssft import load

    model = load(run_folder, precision="fp32")
    return {q: dict(zip(docs, (float(s) for s in model.predict([(queries[q], corpus[d].full_text) for d in docs]))))
            for q, docs in candidates.items()}


def _scores(path) -> dict[str, dict[str, float]]:
    return read_run(path)


def test_rerank_without_a_split_writes_a_run_and_no_metrics(cross_run, tiny_dataset, tmp_path):
    out = tmp_path / "ranked"
    assert _rerank(str(cross_run), "--data", str(tiny_dataset), "--first-stage", "bm25", "--depth", "3",
                   "--output", str(out)) == 0
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["run.trec"]
    run = _scores(out / "run.trec")
    dataset = load_dataset(str(tiny_dataset))
    # every query of the dataset the first stage has candidates for, not only the judged ones (test has 2)
    assert len(run) > 2 and all(1 <= len(docs) <= 3 for docs in run.values())
    expected = _expected(cross_run, dataset.queries, {q: list(docs) for q, docs in run.items()}, dataset.corpus)
    for qid, docs in run.items():
        assert docs == pytest.approx(expected[qid], abs=1e-4)
    # a finished ranking is replaced only with --overwrite
    assert _rerank(str(cross_run), "--data", str(tiny_dataset), "--first-stage", "bm25", "--output", str(out)) == 2
    assert _rerank(str(cross_run), "--data", str(tiny_dataset), "--first-stage", "bm25", "--depth", "2",
                   "--output", str(out), "--overwrite") == 0
    assert all(len(docs) <= 2 for docs in _scores(out / "run.trec").values())


@pytest.mark.parametrize("form", ["lines", "tsv", "jsonl"])
def test_a_queries_file_of_raw_texts_is_ranked(form, cross_run, tiny_dataset, tmp_path):
    texts = ["vitamin d for strong bones", "does coffee harm the liver", "omega three from fish"]
    if form == "lines":
        path, ids = tmp_path / "queries.txt", ["1", "3", "4"]
        path.write_text(f"{texts[0]}\n\n{texts[1]}\n{texts[2]}\n")  # a blank line keeps its number
    elif form == "tsv":
        path, ids = tmp_path / "queries.tsv", ["a", "b", "c"]
        path.write_text("".join(f"{i}\t{t}\n" for i, t in zip(ids, texts)))
    else:
        path, ids = tmp_path / "queries.jsonl", ["x1", "x2", "x3"]
        path.write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in zip(ids, texts)))
    dataset = load_dataset(str(tiny_dataset))
    # a candidate run of the user's own, for those query ids
    first = {ids[0]: {"d1": 3.0, "d3": 2.0}, ids[1]: {"d6": 5.0, "d2": 1.0, "d4": 0.5}, ids[2]: {"d3": 1.0}}
    write_run(first, tmp_path / "candidates.trec")
    out = tmp_path / "out"
    assert _rerank(str(cross_run), "--data", str(tiny_dataset), "--first-stage", str(tmp_path / "candidates.trec"),
                   "--queries", str(path), "--output", str(out)) == 0
    run = _scores(out / "run.trec")
    assert {q: set(d) for q, d in run.items()} == {q: set(d) for q, d in first.items()}
    expected = _expected(cross_run, dict(zip(ids, texts)), {q: list(d) for q, d in first.items()}, dataset.corpus)
    for qid, docs in run.items():
        assert docs == pytest.approx(expected[qid], abs=1e-4)
    assert not (out / "metrics.json").exists()


def test_bad_queries_files_and_flags_are_one_line_errors(cross_run, tiny_dataset, tmp_path, capsys):
    from ssft.core.errors import SsftError
    from ssft.data.query_file import read_query_file

    bad = tmp_path / "bad.tsv"
    bad.write_text("q1\tvitamin d\nq2 without a tab\n")
    with pytest.raises(SsftError, match=r"bad\.tsv:2: expected id<TAB>text"):
        read_query_file(bad)
    dup = tmp_path / "dup.tsv"
    dup.write_text("q1\tvitamin d\nq1\tcoffee\n")
    with pytest.raises(SsftError, match=r"dup\.tsv:2: duplicate query id 'q1'"):
        read_query_file(dup)
    good = tmp_path / "good.txt"
    good.write_text("vitamin d\n")
    # a file of queries has no qrels: with --split it is refused, naming the flag
    assert _rerank(str(cross_run), "--data", str(tiny_dataset), "--first-stage", "bm25", "--split", "test",
                   "--queries", str(good), "--output", str(tmp_path / "o1")) == 2
    assert "--queries" in capsys.readouterr().err
    # a run file none of whose queries is among the file's
    write_run({"zz": {"d1": 1.0}}, tmp_path / "other.trec")
    assert _rerank(str(cross_run), "--data", str(tiny_dataset), "--first-stage", str(tmp_path / "other.trec"),
                   "--queries", str(good), "--output", str(tmp_path / "o2")) == 2
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2" / "run.trec").exists()


def test_a_loaded_model_ranks_a_candidate_run(cross_run, tiny_dataset):
    from ssft import load

    dataset = load_dataset(str(tiny_dataset))
    model = load(cross_run, precision="fp32")
    queries = {"u1": "vitamin d bones", "u2": "coffee liver"}
    candidates = {"u1": {"d1": 9.0, "d2": 8.0, "d5": 1.0}, "u2": {"d6": 2.0, "d4": 1.0}}
    corpus = {d: doc.full_text for d, doc in dataset.corpus.items()}
    ranked = model.rank(queries, candidates, corpus=corpus)
    for qid, docs in candidates.items():
        expected = model.rank(queries[qid], [corpus[d] for d in docs])
        assert list(ranked[qid]) == [list(docs)[hit["corpus_id"]] for hit in expected]  # best first
        assert list(ranked[qid].values()) == pytest.approx([hit["score"] for hit in expected])
    assert [len(d) for d in model.rank(queries, candidates, top_k=1, corpus=corpus).values()] == [1, 1]
    from ssft.core.errors import SsftError

    with pytest.raises(SsftError, match="document 'nope'"):
        model.rank(queries, {"u1": ["nope"]}, corpus=corpus)
    with pytest.raises(SsftError, match="query 'u3'"):
        model.rank(queries, {"u3": ["d1"]}, corpus=corpus)
