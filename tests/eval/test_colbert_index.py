"""A ColBERT corpus index: ssft-encode writes every document's token vectors in checksummed shards and a faiss index
over them; retrieval takes candidates from the index and scores them by exact MaxSim. An exact (flat) index fetching
enough tokens retrieves what exhaustive MaxSim retrieves; an approximate one reports its recall against it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.data.beir import load_dataset
from ssft.models.corpus import corpus_units, encode_query_tokens, encode_shards, read_manifest, read_token_lengths
from tests.helpers import write_synthetic_beir

faiss = pytest.importorskip("faiss")


def _colbert(model_dir, dim: int = 16):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="colbert", name=str(model_dir), max_length=32, query_max_length=12, colbert_dim=dim)
    return MODELS.get("colbert").build(cfg, "full", {}).eval().requires_grad_(False)


def _queries(data):
    dataset = load_dataset(str(data))
    return {q: dataset.queries[q] for q in sorted(dataset.queries)}


def test_token_shards_hold_each_documents_scored_tokens(tiny_model_dir, tmp_path):
    from ssft.eval.colbert_index import TokenStore
    from ssft.models.corpus import read_shards

    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=25)
    ids, texts = corpus_units(load_dataset(str(data)))
    model = _colbert(tiny_model_dir)
    manifest = encode_shards(model, ids, texts, tmp_path / "enc", shard_size=7, batch_size=4)
    assert manifest["token_vectors"] is True and manifest["shards"] == 4
    lengths = read_token_lengths(tmp_path / "enc", read_manifest(tmp_path / "enc"))
    store = TokenStore(list(read_shards(tmp_path / "enc", read_manifest(tmp_path / "enc"))), lengths)
    expected = model.encode_document(texts)  # each text's scored tokens, as the model's own API gives them
    assert lengths.tolist() == [len(m) for m in expected]
    for i in (0, 6, 7, 24):  # across shard borders
        np.testing.assert_allclose(store.tokens(i).astype(np.float32), expected[i], atol=2e-3)
    # MaxSim on the store is the model's own score (up to the float16 of the stored vectors)
    query = "vitamin bone"
    scores = store.maxsim(encode_query_tokens(model, [query])[0], np.arange(len(ids)))
    np.testing.assert_allclose(scores, model.predict([(query, t) for t in texts]), atol=2e-2)


def test_an_exact_index_retrieves_what_exhaustive_maxsim_retrieves(tiny_model_dir, tmp_path):
    from ssft.eval.colbert_index import load_late_index
    from ssft.eval.index import build_saved_index

    data = write_synthetic_beir(tmp_path / "data", queries=12, docs=40)
    dataset = load_dataset(str(data))
    ids, texts = corpus_units(dataset)
    model = _colbert(tiny_model_dir)
    encode_shards(model, ids, texts, tmp_path / "enc", shard_size=9, batch_size=8)
    info = build_saved_index(tmp_path / "enc", "flat")
    assert info["token_vectors"] is True and info["vectors"] == int(read_token_lengths(
        tmp_path / "enc", read_manifest(tmp_path / "enc")).sum())
    late = load_late_index(tmp_path / "enc", dataset)
    queries = encode_query_tokens(model, list(_queries(data).values()))
    exhaustive = late.exhaustive(queries, 10)
    # every token fetched: the candidates are the whole corpus, the top-10 exactly exhaustive MaxSim's
    assert late.search(queries, 10, token_k=late.index.ntotal) == exhaustive
    assert set(late.last_candidates) == {40}
    # fewer tokens fetched: fewer candidates, each still scored exactly
    exact = {unit: score for hits in exhaustive for unit, score in hits}
    few = late.search(queries, 10, token_k=3)
    assert max(late.last_candidates) < 40
    every = late.exhaustive(queries, 40)
    for hits, reference in zip(few, every):
        scores = dict(reference)
        assert all(score == pytest.approx(scores[unit], abs=1e-6) for unit, score in hits)
    assert exact  # the reference is not empty


def test_an_approximate_index_reports_its_recall(tiny_model_dir, tmp_path):
    from ssft.eval.colbert_index import LateIndex, TokenStore, train_and_fill

    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 30, size=300)
    tokens = rng.standard_normal((int(lengths.sum()), 16)).astype(np.float32)
    tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
    store = TokenStore([tokens.astype(np.float16)], lengths)
    ids = [f"d{i}" for i in range(300)]
    queries = [tokens[store.offsets[i] : store.offsets[i] + 4].astype(np.float32) + 0.05 for i in range(0, 300, 15)]
    exact = LateIndex(train_and_fill("flat", store.parts), store, ids)
    reference = exact.exhaustive(queries, 20)
    approximate = LateIndex(train_and_fill("IVF16,PQ4x4np", store.parts, nprobe=2), store, ids, token_k=32)
    found = approximate.search(queries, 20)
    recall = np.mean([len({u for u, _ in a} & {u for u, _ in r}) / 20 for a, r in zip(found, reference)])
    assert 0.2 < recall < 1.0  # approximate: most of the reference found, not all (nprobe 2 of 16 lists)
    # more lists probed and more tokens fetched: the recall does not fall
    faiss.extract_index_ivf(approximate.index).nprobe = 16
    wider = approximate.search(queries, 20, token_k=256)
    recall_wider = np.mean([len({u for u, _ in a} & {u for u, _ in r}) / 20 for a, r in zip(wider, reference)])
    assert recall_wider >= recall and recall_wider > 0.9


def test_encode_then_retrieve_with_colbert(tiny_model_dir, tmp_path):
    from ssft.cli.encode import main as encode_main
    from ssft.cli.retrieve import main as retrieve_main

    data = write_synthetic_beir(tmp_path / "data", queries=12, docs=30)
    _colbert(tiny_model_dir).save(tmp_path / "run" / "model")
    assert encode_main([str(tmp_path / "run"), "--data", str(data), "--output", str(tmp_path / "index"),
                        "--shard-size", "8", "--precision", "fp32"]) == 0
    common = [str(tmp_path / "run"), "--data", str(data), "--split", "test", "--depth", "5", "--precision", "fp32"]
    assert retrieve_main(common + ["--output", str(tmp_path / "direct"), "--token-k", "100000"]) == 0
    assert retrieve_main(common + ["--output", str(tmp_path / "saved"), "--index-dir", str(tmp_path / "index"),
                                   "--token-k", "100000"]) == 0
    direct = [line.split()[:3] for line in (tmp_path / "direct" / "run.trec").read_text().splitlines()]
    saved = [line.split()[:3] for line in (tmp_path / "saved" / "run.trec").read_text().splitlines()]
    assert saved == direct and len(direct) == 5 * 2  # 2 test queries, 5 documents each
    # the scores are the model's own MaxSim of each (query, document)
    from ssft import load

    model = load(tmp_path / "run", precision="fp32")
    dataset = load_dataset(str(data))
    for qid, _, doc_id, *rest in [line.split() for line in (tmp_path / "saved" / "run.trec").read_text().splitlines()]:
        score = float(rest[1])
        expected = model.predict([(dataset.queries[qid], dataset.corpus[doc_id].full_text)])[0]
        assert score == pytest.approx(float(expected), abs=2e-2)


def test_a_dense_index_is_not_served_to_colbert(tiny_model_dir, tmp_path):
    from ssft.cli.encode import main as encode_main
    from ssft.cli.retrieve import main as retrieve_main
    from ssft.models.dense import DenseDualEncoder

    data = write_synthetic_beir(tmp_path / "data", queries=12, docs=20)
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=32)
    DenseDualEncoder.build(cfg, "full", {}).save(tmp_path / "dense" / "model")
    _colbert(tiny_model_dir).save(tmp_path / "colbert" / "model")
    assert encode_main([str(tmp_path / "dense"), "--data", str(data), "--output", str(tmp_path / "index")]) == 0
    assert retrieve_main([str(tmp_path / "colbert"), "--data", str(data), "--split", "test", "--output",
                          str(tmp_path / "out"), "--index-dir", str(tmp_path / "index")]) == 2
    assert retrieve_main([str(tmp_path / "dense"), "--data", str(data), "--split", "test", "--output",
                          str(tmp_path / "out2"), "--token-k", "5"]) == 2
