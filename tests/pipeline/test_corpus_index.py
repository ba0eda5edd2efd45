"""Your own queries over your own corpus: ``ssft.index`` over a list, a file or a dataset, in memory or kept in a
folder; ``Index.search`` shaped as sentence-transformers' ``util.semantic_search``; ``ssft.Index.load`` reopens it
(or any ssft-encode folder) checked against the model's weights and the corpus."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ssft
from ssft.core.errors import SsftError
from tests.helpers import tiny_frozen_ranker, write_synthetic_beir

pytest.importorskip("faiss")

TEXTS = ["vitamin d and bone health in adults", "statin drugs lower cholesterol and heart risk",
         "omega three fatty acids in fish oil", "added sugar and diabetes risk", "sleep duration and memory",
         "coffee consumption and liver disease"]
QUERIES = ["vitamin bones", "cholesterol statins", "coffee liver"]


def _model(model_dir, architecture: str = "dense", nudge: float = 0.0):
    return tiny_frozen_ranker(model_dir, architecture, nudge)


def _exhaustive(model, texts, queries, top_k):
    """Every (query, document) scored by the model itself, best first: what a flat index must return."""
    out = []
    for query in queries:
        scores = model.predict([(query, t) for t in texts])
        order = np.argsort(-np.asarray(scores), kind="stable")[:top_k]
        out.append([(int(i), float(scores[i])) for i in order])
    return out


@pytest.mark.parametrize("architecture", ["dense", "colbert"])
def test_a_list_corpus_in_memory_searches_as_semantic_search(architecture, tiny_model_dir):
    model = _model(tiny_model_dir, architecture)
    index = ssft.index(model, TEXTS, precision="fp32", token_k=10_000)
    hits = index.search(QUERIES, top_k=3)
    assert len(hits) == 3 and all(len(h) == 3 and set(h[0]) == {"corpus_id", "score"} for h in hits)
    assert all(isinstance(h["corpus_id"], int) for row in hits for h in row)  # positions, as semantic_search
    expected = _exhaustive(model, TEXTS, QUERIES, 3)
    for row, want in zip(hits, expected):
        assert [h["corpus_id"] for h in row] == [i for i, _ in want]
        np.testing.assert_allclose([h["score"] for h in row], [s for _, s in want], rtol=1e-3, atol=1e-3)
    assert index.search("vitamin bones", top_k=1) == [hits[0][:1]]  # one query: one list
    assert len(index) == 6 and index.search([], top_k=3) == []


@pytest.mark.parametrize("architecture", ["dense", "colbert"])
def test_an_index_kept_in_a_folder_reopens_and_refuses_another_model(architecture, tiny_model_dir, tmp_path):
    _model(tiny_model_dir, architecture).save(tmp_path / "model")
    ids = [f"doc-{i}" for i in range(len(TEXTS))]
    built = ssft.index(str(tmp_path / "model"), TEXTS, tmp_path / "idx", ids=ids, precision="fp32", token_k=10_000)
    assert {"corpus.jsonl", "encode.json", "index.faiss", "index.json", "shards"} <= {
        p.name for p in (tmp_path / "idx").iterdir()}
    hits = built.search(QUERIES, top_k=4)
    assert {h["corpus_id"] for row in hits for h in row} <= set(ids)
    reopened = ssft.Index.load(tmp_path / "idx", token_k=10_000)  # the model by the name it was given
    assert reopened.search(QUERIES, top_k=4) == hits
    with pytest.raises(SsftError, match="encoded by another model"):
        ssft.Index.load(tmp_path / "idx", _model(tiny_model_dir, architecture, nudge=0.5))
    corpus = tmp_path / "idx" / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace("coffee", "tea"))
    with pytest.raises(SsftError, match="the corpus changed since the index was built"):
        ssft.Index.load(tmp_path / "idx")


def test_files_and_datasets_as_corpora(tiny_model_dir, tmp_path):
    model = _model(tiny_model_dir)
    (tmp_path / "c.tsv").write_text("".join(f"d{i}\ttitle {i}\t{t}\n" for i, t in enumerate(TEXTS)))
    with open(tmp_path / "c.jsonl", "w") as fh:
        for i, t in enumerate(TEXTS):
            fh.write(json.dumps({"_id": f"d{i}", "title": f"title {i}", "text": t}) + "\n")
    tsv = ssft.index(model, tmp_path / "c.tsv", precision="fp32").search(QUERIES, top_k=6)
    jsonl = ssft.index(model, str(tmp_path / "c.jsonl"), precision="fp32").search(QUERIES, top_k=6)
    assert tsv == jsonl and tsv[0][0]["corpus_id"].startswith("d")
    data = write_synthetic_beir(tmp_path / "beir", queries=6, docs=15)
    index = ssft.index(model, str(data), precision="fp32")
    assert len(index) == 15
    (tmp_path / "bad.tsv").write_text("d1 only an id and no tab\n")
    with pytest.raises(SsftError, match=r"bad\.tsv:1: expected id<TAB>text"):
        ssft.index(model, tmp_path / "bad.tsv")
    with pytest.raises(SsftError, match="ids: expected one id per text"):
        ssft.index(model, TEXTS, ids=["a"])
    with pytest.raises(SsftError, match="top_k"):
        index.search("x", top_k=0)


def test_an_ssft_encode_folder_is_an_index(tiny_model_dir, tiny_dataset, tmp_path):
    """ssft-encode's folder and ssft.index's are the same thing: Index.load opens it, and its hits are
    ssft-retrieve's run."""
    from ssft.cli.encode import main as encode_main
    from ssft.cli.retrieve import main as retrieve_main

    _model(tiny_model_dir).save(tmp_path / "run" / "model")
    assert encode_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--output", str(tmp_path / "index"),
                        "--precision", "fp32"]) == 0
    assert retrieve_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--output",
                          str(tmp_path / "ret"), "--depth", "3", "--index-dir", str(tmp_path / "index")]) == 0
    index = ssft.Index.load(tmp_path / "index")
    corpus, queries, qrels = ssft.load_dataset(str(tiny_dataset), split="test")
    assert set(qrels) == {"q5", "q6"} and corpus["d1"]["title"] == "Vitamin D"
    run = ssft.read_run(tmp_path / "ret" / "run.trec")
    for qid in sorted(qrels):
        hits = index.search(queries[qid], top_k=3)[0]
        assert [h["corpus_id"] for h in hits] == list(run[qid])
        np.testing.assert_allclose([h["score"] for h in hits], list(run[qid].values()), atol=1e-3)


def test_retrieve_cli_own_queries_over_a_corpus_file(tiny_model_dir, tmp_path, capsys):
    """ssft-retrieve MODEL --corpus FILE --queries FILE --output DIR: run.trec and a readable results.jsonl, no
    qrels; the same hits from an index folder (--index-dir) and from Python."""
    from ssft.cli.retrieve import main as retrieve_main

    _model(tiny_model_dir).save(tmp_path / "model")
    (tmp_path / "corpus.tsv").write_text("".join(f"d{i}\tTitle {i}\t{t}\n" for i, t in enumerate(TEXTS)))
    (tmp_path / "queries.txt").write_text("\n".join(QUERIES) + "\n")
    common = [str(tmp_path / "model"), "--queries", str(tmp_path / "queries.txt"), "--depth", "3", "--precision",
              "fp32"]
    assert retrieve_main(common + ["--corpus", str(tmp_path / "corpus.tsv"), "--output", str(tmp_path / "out")]) == 0
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["query"] for r in results] == QUERIES and [r["query_id"] for r in results] == ["1", "2", "3"]
    first = results[0]["hits"][0]
    assert set(first) == {"rank", "corpus_id", "score", "title", "text"} and first["title"].startswith("Title ")
    run = ssft.read_run(tmp_path / "out" / "run.trec")
    assert list(run) == ["1", "2", "3"] and all(len(docs) == 3 for docs in run.values())
    index = ssft.index(str(tmp_path / "model"), tmp_path / "corpus.tsv", tmp_path / "idx", precision="fp32")
    assert retrieve_main(common + ["--index-dir", str(tmp_path / "idx"), "--output", str(tmp_path / "out2")]) == 0
    kept = [json.loads(line) for line in (tmp_path / "out2" / "results.jsonl").read_text().splitlines()]
    assert [[h["corpus_id"] for h in r["hits"]] for r in kept] == [[h["corpus_id"] for h in r["hits"]] for r in results]
    np.testing.assert_allclose([h["score"] for r in kept for h in r["hits"]],  # float16 vectors kept on disk
                               [h["score"] for r in results for h in r["hits"]], atol=2e-2)
    hits = index.search(QUERIES, top_k=3)
    assert [[h["corpus_id"] for h in row] for row in hits] == [list(run[q]) for q in ("1", "2", "3")]
    # a finished result is not replaced without --overwrite, not even by a --split retrieval
    capsys.readouterr()
    assert retrieve_main(common + ["--corpus", str(tmp_path / "corpus.tsv"), "--output", str(tmp_path / "out")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert retrieve_main([str(tmp_path / "model"), "--queries", str(tmp_path / "queries.txt"), "--output",
                          str(tmp_path / "out3")]) == 2
    assert "--corpus" in capsys.readouterr().err


def test_a_passage_index_returns_documents_by_their_best_passage(tiny_model_dir, tmp_path):
    """An ssft-encode folder of passages (--passage-words): hits name documents, each scored by its best passage."""
    from ssft.data.corpus_file import read_corpus
    from ssft.models.corpus import split_passages
    from ssft.pipeline.encode import encode_corpus

    model = _model(tiny_model_dir)
    long = [" ".join([t] * 4) for t in TEXTS]
    (tmp_path / "c.tsv").write_text("".join(f"d{i}\t{t}\n" for i, t in enumerate(long)))
    model.save(tmp_path / "model")
    encode_corpus(str(tmp_path / "model"), read_corpus(tmp_path / "c.tsv")[0], tmp_path / "idx", passage_words=8,
                  precision="fp32")
    hits = ssft.Index.load(tmp_path / "idx").search(QUERIES, top_k=6)
    assert all(sorted(h["corpus_id"] for h in row) == [f"d{i}" for i in range(6)] for row in hits)
    texts, owner = [], []
    for i, text in enumerate(long):
        for passage in split_passages(text, 8):
            texts.append(passage)
            owner.append(f"d{i}")
    for row, passages in zip(hits, ssft.index(model, texts, precision="fp32").search(QUERIES, top_k=len(texts))):
        best: dict[str, float] = {}
        for h in passages:
            best.setdefault(owner[h["corpus_id"]], h["score"])
        assert [h["corpus_id"] for h in row] == list(best)
        np.testing.assert_allclose([h["score"] for h in row], list(best.values()), atol=2e-2)


def test_the_search_names_are_public():
    for name in ("index", "Index", "load_dataset", "read_run"):
        assert name in ssft.__all__ and name in dir(ssft) and getattr(ssft, name).__doc__, name
    assert ssft.Index.search.__doc__ and "semantic_search" in ssft.index.__doc__


@pytest.mark.integration
def test_nfcorpus_with_minilm_gives_what_semantic_search_gives(monkeypatch):
    """Real data and weights: 100 NFCorpus documents and 5 test queries, all-MiniLM-L6-v2 at fp32; the hits are
    sentence-transformers' own util.semantic_search hits, the scores its cosines x the model's score scale (20)."""
    st = pytest.importorskip("sentence_transformers")
    from tests.conftest import SHARED_DATA

    monkeypatch.setenv("SSFT_DATA_HOME", str(SHARED_DATA))
    corpus, queries, qrels = ssft.load_dataset("nfcorpus", split="test")
    assert len(corpus) == 3633 and len(qrels) == 323
    ids = sorted(corpus)[:100]
    texts = [f"{corpus[d]['title']} {corpus[d]['text']}".strip() for d in ids]
    asked = [queries[q] for q in sorted(qrels)[:5]]
    model = ssft.load("sentence-transformers/all-MiniLM-L6-v2", precision="fp32")
    hits = ssft.index(model, texts, ids=ids, precision="fp32", backend="torch").search(asked, top_k=10)
    from ssft.core.hub import resolve_model

    reference = st.SentenceTransformer(str(resolve_model("sentence-transformers/all-MiniLM-L6-v2")), device="cpu")
    expected = st.util.semantic_search(reference.encode(asked, convert_to_tensor=True),
                                       reference.encode(texts, convert_to_tensor=True), top_k=10)
    for got, want in zip(hits, expected):
        assert [h["corpus_id"] for h in got[:5]] == [ids[w["corpus_id"]] for w in want[:5]]
        np.testing.assert_allclose([h["score"] / 20 for h in got], [w["score"] for w in want], atol=2e-3)
