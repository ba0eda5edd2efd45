"""A PLAID index (ssft.eval.plaid): centroid ids + quantised residuals per token, centroid-pruned candidate stages,
then MaxSim on the decompressed tokens of the few documents left. On a clustered corpus it finds what exhaustive
MaxSim finds while decompressing a fraction of the corpus; its scores are MaxSim on its decompressed vectors; it
saves, reloads and is served from an ssft-encode folder under the same fingerprints as a faiss index."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ssft.core.errors import SsftError

faiss = pytest.importorskip("faiss")


def _corpus(units: int = 400, dim: int = 32, topics: int = 40, seed: int = 0):
    """Unit token vectors drawn around each document's 3 topics (clustered like real token vectors), and queries
    drawn the same way."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((topics, dim)).astype(np.float32)
    lengths = rng.integers(8, 24, size=units)
    own = rng.integers(0, topics, size=(units, 3))
    rows = [centres[own[u][rng.integers(0, 3, n)]] + 0.45 * rng.standard_normal((n, dim)) for u, n in enumerate(lengths)]
    tokens = np.concatenate(rows).astype(np.float32)
    tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
    queries = []
    for _ in range(12):
        q = centres[rng.integers(0, topics, 2)][rng.integers(0, 2, 8)] + 0.45 * rng.standard_normal((8, dim))
        queries.append((q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32))
    return tokens, lengths, queries


def _build(tokens, lengths, **kwargs):
    from ssft.eval.plaid import PlaidIndex

    return PlaidIndex.build([tokens.astype(np.float16)], lengths, **{"ncentroids": 64, "seed": 0, **kwargs})


def _recall(found, reference):
    return float(np.mean([len({u for u, _ in f} & {u for u, _ in r}) / max(1, len(r)) for f, r in zip(found, reference)]))


def test_plaid_finds_what_exhaustive_maxsim_finds_decompressing_a_fraction():
    from ssft.eval.colbert_index import LateIndex, PlaidLateIndex, TokenStore, train_and_fill

    tokens, lengths, queries = _corpus()
    store = TokenStore([tokens.astype(np.float16)], lengths)
    ids = [str(i) for i in range(400)]
    reference = LateIndex(train_and_fill("flat", store.parts), store, ids).exhaustive(queries, 10)
    plaid = _build(tokens, lengths)
    found = plaid.search(queries, 10, ncells=4, ndocs=120, rescore=40)
    # against MaxSim on its own decompressed vectors (what the stages approximate): the pruning loses little
    assert _recall(found, PlaidLateIndex(plaid, ids).exhaustive(queries, 10)) >= 0.9
    rescored = [s["rescored"] for s in plaid.last_stats]
    assert max(rescored) <= 40 < 400  # a tenth of the corpus decompressed
    assert all(s["candidates"] >= s["stage2"] >= s["rescored"] for s in plaid.last_stats)
    # against exhaustive MaxSim on the float16 tokens: the best 2 x depth decompressed scored again on them
    late = PlaidLateIndex(plaid, ids, store=store, ncells=4, ndocs=120, rescore=40)
    exact = late.search(queries, 10)
    assert _recall(exact, reference) >= 0.9 and max(late.last_candidates) <= 40
    scores = {u: s for hits in LateIndex(train_and_fill("flat", store.parts), store, ids).exhaustive(queries, 400)
              for u, s in hits}
    assert scores  # each query's scores are the float16 MaxSim
    for query, hits in zip(queries, exact):
        units = np.array([u for u, _ in hits])
        np.testing.assert_allclose([s for _, s in hits], store.maxsim(query, units), rtol=1e-6)
    # the decompressed tokens are the stored ones up to their 2-bit residuals
    error = np.abs(plaid.decompress(np.arange(plaid.ntotal)) - tokens).max()
    assert error < 0.35


def test_the_scores_are_maxsim_on_the_decompressed_vectors():
    tokens, lengths, queries = _corpus()
    plaid = _build(tokens, lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for query, hits in zip(queries, plaid.search(queries, 10, ndocs=100, rescore=30)):
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        for unit, score in hits:
            vectors = plaid.decompress(np.arange(offsets[unit], offsets[unit + 1]))
            assert score == pytest.approx(float((query @ vectors.T).max(axis=1).sum()), abs=1e-4)


def test_more_documents_kept_and_no_pruning_do_not_lose_recall():
    tokens, lengths, queries = _corpus()
    plaid = _build(tokens, lengths)
    every = plaid.search(queries, 10, ncells=64, ndocs=400, rescore=400, threshold=-1.0)  # nothing pruned
    assert every == [[(int(u), float(s)) for u, s in hits] for hits in
                     [list(zip(*_exhaustive(plaid, q, 10))) for q in queries]]
    narrow = _recall(plaid.search(queries, 10, ncells=1, ndocs=40, rescore=10), every)
    wide = _recall(plaid.search(queries, 10, ncells=4, ndocs=160, rescore=40), every)
    assert wide >= narrow and wide >= 0.9


def _exhaustive(plaid, query, depth):
    scores = plaid.maxsim(query, np.arange(plaid.units))
    order = np.lexsort((np.arange(plaid.units), -scores))[:depth]
    return order.tolist(), scores[order].astype(np.float32).tolist()


def test_save_and_load_round_trip(tmp_path):
    from ssft.eval.plaid import PlaidIndex

    tokens, lengths, queries = _corpus(units=120)
    plaid = _build(tokens, lengths, ncentroids=32)
    checksum = plaid.save(tmp_path / "index.plaid")
    assert len(checksum) == 64
    for mmap in (True, False):
        again = PlaidIndex.load(tmp_path / "index.plaid", mmap=mmap)
        for name in PlaidIndex.ARRAYS:
            np.testing.assert_array_equal(np.asarray(again.arrays[name]), plaid.arrays[name])
        assert again.meta == plaid.meta
        assert again.search(queries, 5) == plaid.search(queries, 5)
    (tmp_path / "other").write_bytes(b"not an index")
    with pytest.raises(SsftError, match="not a PLAID index"):
        PlaidIndex.load(tmp_path / "other")


def test_bytes_per_token_accounting(tmp_path):
    """128 dimensions at 2 bits: 32 bytes of residual and a 2-byte centroid id per token, plus the centroids,
    buckets, offsets and inverted lists; the file holds those arrays and a short header."""
    rng = np.random.default_rng(1)
    lengths = np.full(200, 30)
    tokens = rng.standard_normal((6000, 128)).astype(np.float32)
    plaid = _build(tokens / np.linalg.norm(tokens, axis=1, keepdims=True), lengths, ncentroids=16)
    sizes = plaid.nbytes()
    assert sizes["residuals"] == 6000 * 32 and sizes["codes"] == 6000 * 2
    assert sizes["centroids"] == 16 * 128 * 2  # float16
    assert sizes["ivf"] <= 6000 * 4 and sizes["ivf_offsets"] == 17 * 8
    assert plaid.bytes_per_token() == pytest.approx(sum(sizes.values()) / 6000)
    assert 34 < plaid.bytes_per_token() < 40
    plaid.save(tmp_path / "index.plaid")
    assert 0 < (tmp_path / "index.plaid").stat().st_size - sum(sizes.values()) < 8192
    assert _build(tokens, lengths, ncentroids=16, bits=4).nbytes()["residuals"] == 6000 * 64


def test_the_same_seed_builds_the_same_index():
    tokens, lengths, queries = _corpus(units=150)
    one, two = _build(tokens, lengths, seed=3), _build(tokens, lengths, seed=3)
    for name in one.ARRAYS:
        np.testing.assert_array_equal(one.arrays[name], two.arrays[name])
    assert one.search(queries, 5) == two.search(queries, 5)


@pytest.mark.parametrize("option, value, match", [
    ("ncells", 0, r"^ncells: expected a whole number >= 1, got 0$"),
    ("ndocs", -4, r"^ndocs: expected a whole number >= 1, got -4$"),
    ("rescore", 2.5, r"^rescore: expected a whole number >= 1, got 2\.5$"),
    ("threshold", "high", r"^threshold: expected a number"),
    ("depth", 0, r"^depth: expected a whole number >= 1, got 0$"),
])
def test_bad_search_options_are_refused_naming_the_option(option, value, match):
    tokens, lengths, queries = _corpus(units=60)
    plaid = _build(tokens, lengths, ncentroids=16)
    kwargs = {"depth": 5, option: value}
    with pytest.raises(SsftError, match=match):
        plaid.search(queries, **kwargs)


@pytest.mark.parametrize("option, value, match", [
    ("bits", 3, r"^bits: expected one of 1, 2, 4, 8 bits per dimension, got 3$"),
    ("ncentroids", 0, r"^ncentroids: expected a whole number >= 1, got 0$"),
    ("ncentroids", 10**6, r"^ncentroids: 1000000 centroids need at least as many token vectors"),
])
def test_bad_build_options_are_refused_naming_the_option(option, value, match):
    tokens, lengths, _ = _corpus(units=60)
    with pytest.raises(SsftError, match=match) as err:
        _build(tokens, lengths, **{option: value})
    assert "\n" not in str(err.value)


def test_a_plaid_index_is_built_saved_and_served_from_an_encoded_folder(tiny_model_dir, tmp_path):
    """ssft-encode's shards -> index.plaid + index.json (kind plaid, the encoding's fingerprints, the file's
    SHA-256) -> load_late_index serves it: the top hits of exhaustive MaxSim on the model's own tokens, scored on
    the decompressed ones; a changed file, another encoding's index or a dense folder are refused."""
    from ssft.data.beir import load_dataset
    from ssft.eval.colbert_index import PlaidLateIndex, load_late_index
    from ssft.eval.index import INDEX_FILE, INDEX_INFO, build_saved_index
    from ssft.eval.plaid import PLAID_FILE
    from ssft.models.corpus import corpus_units, encode_query_tokens, encode_shards
    from tests.helpers import tiny_frozen_ranker, write_synthetic_beir

    data = write_synthetic_beir(tmp_path / "data", queries=8, docs=40)
    dataset = load_dataset(str(data))
    ids, texts = corpus_units(dataset)
    model = tiny_frozen_ranker(tiny_model_dir, "colbert")
    folder = tmp_path / "enc"
    encode_shards(model, ids, texts, folder, shard_size=16)
    build_saved_index(folder, "flat")
    exact = load_late_index(folder, dataset)
    info = build_saved_index(folder, "plaid")
    assert info["kind"] == "plaid" and info["token_vectors"] is True and info["factory"].startswith("PLAID")
    assert (folder / PLAID_FILE).is_file() and not (folder / INDEX_FILE).exists()  # the faiss index replaced
    late = load_late_index(folder, dataset)
    assert isinstance(late, PlaidLateIndex) and late.unit_ids == ids
    queries = encode_query_tokens(model, [dataset.queries[q] for q in sorted(dataset.queries)])
    everything = {"ndocs": 40, "rescore": 40, "ncells": 10**6, "threshold": -1e9}  # nothing pruned
    assert late.search(queries, 5, exact=False, **everything) == late.exhaustive(queries, 5)
    assert late.last_candidates == [40] * len(queries)
    # served from an encoded folder, the best 10 decompressed are scored again on the float16 shards
    found = late.search(queries, 5, **everything)
    assert _recall(found, exact.exhaustive(queries, 5)) >= 0.8
    reference = {u: s for hits in exact.exhaustive(queries, 40) for u, s in hits}
    assert reference and all(s == pytest.approx(exact.store.maxsim(q, np.array([u]))[0], abs=1e-5)
                             for q, hits in zip(queries, found) for u, s in hits)
    # index.plaid changed since: refused by its checksum
    saved = (folder / PLAID_FILE).read_bytes()
    (folder / PLAID_FILE).write_bytes(saved[:-1] + bytes([saved[-1] ^ 1]))
    with pytest.raises(SsftError, match=r"index\.plaid: does not match the checksum in index\.json"):
        load_late_index(folder, dataset)
    (folder / PLAID_FILE).write_bytes(saved)
    # another encoding's index.plaid + index.json beside these shards: refused by the fingerprints
    other = tmp_path / "other"
    encode_shards(tiny_frozen_ranker(tiny_model_dir, "colbert", 0.5), ids, texts, other, shard_size=16)
    build_saved_index(other, "plaid")
    for name in (PLAID_FILE, INDEX_INFO):
        shutil.copyfile(other / name, folder / name)
    with pytest.raises(SsftError, match=r"index\.plaid and index\.json were built from another encoding"):
        load_late_index(folder, dataset)
    assert json.loads((other / INDEX_INFO).read_text())["sha256"]
    # a dense model's single vectors: plaid is refused in one line naming it
    dense = tmp_path / "dense"
    encode_shards(tiny_frozen_ranker(tiny_model_dir, "dense"), ids, texts, dense, shard_size=16)
    with pytest.raises(SsftError, match=r"^--index plaid: .* holds single vectors of a dense model"):
        build_saved_index(dense, "plaid")


def test_an_in_memory_index_of_kind_plaid_scores_as_the_model(tiny_model_dir):
    """ssft.index's in-memory path: kind "plaid" for a ColBERT model; its hits carry the model's own MaxSim (the
    best scored again on the float16 tokens kept in memory); a dense model is refused naming the kind."""
    from ssft.pipeline.corpus_index import build_index
    from tests.helpers import tiny_frozen_ranker

    texts = [f"document {i} about {'bones vitamin' if i % 3 else 'heart sugar'} number {i * 7}" for i in range(30)]
    model = tiny_frozen_ranker(tiny_model_dir, "colbert")
    index = build_index(model, texts, kind="plaid", precision="fp32")
    assert index.late
    hits = index.search("vitamin bones", top_k=3)[0]
    assert len(hits) == 3
    expected = model.predict([("vitamin bones", texts[h["corpus_id"]]) for h in hits])
    np.testing.assert_allclose([h["score"] for h in hits], expected, atol=2e-2)
    with pytest.raises(SsftError, match=r"^index: kind 'plaid' indexes a ColBERT model's token vectors"):
        build_index(tiny_frozen_ranker(tiny_model_dir, "dense"), texts, kind="plaid", precision="fp32")


def test_ssft_encode_index_plaid_then_retrieve(tiny_model_dir, tmp_path):
    """ssft-encode --index plaid writes index.plaid + index.json; ssft-retrieve --index-dir serves it, its scores
    the model's own MaxSim."""
    import torch

    from ssft.cli.encode import main as encode_main
    from ssft.cli.retrieve import main as retrieve_main
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.data.beir import load_dataset
    from tests.helpers import write_synthetic_beir

    data = write_synthetic_beir(tmp_path / "data", queries=12, docs=30)
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="colbert", name=str(tiny_model_dir), max_length=32, query_max_length=12,
                      colbert_dim=16)
    MODELS.get("colbert").build(cfg, "full", {}).save(tmp_path / "run" / "model")
    assert encode_main([str(tmp_path / "run"), "--data", str(data), "--output", str(tmp_path / "index"),
                        "--index", "plaid", "--precision", "fp32"]) == 0
    assert json.loads((tmp_path / "index" / "index.json").read_text())["kind"] == "plaid"
    assert retrieve_main([str(tmp_path / "run"), "--data", str(data), "--split", "test", "--depth", "5",
                          "--precision", "fp32", "--output", str(tmp_path / "out"),
                          "--index-dir", str(tmp_path / "index")]) == 0
    from ssft import load

    model = load(tmp_path / "run", precision="fp32")
    dataset = load_dataset(str(data))
    lines = [line.split() for line in (tmp_path / "out" / "run.trec").read_text().splitlines()]
    assert len(lines) == 5 * 2
    for qid, _, doc_id, _, score, _ in lines:
        expected = model.predict([(dataset.queries[qid], dataset.corpus[doc_id].full_text)])[0]
        assert float(score) == pytest.approx(float(expected), abs=2e-2)
