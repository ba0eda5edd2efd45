"""sentence-transformers' call shapes on ``ssft.load``'s ranker: the documented examples of ``encode``,
``encode_query``, ``encode_document``, ``similarity``, ``CrossEncoder.predict`` / ``rank`` and ``util.semantic_search``,
called with the same arguments on an ssft ranker and on the sentence-transformers 6.2 object its export loads as,
give the same shapes and types, and at fp32 the same values (a dense model's scores are ``score_scale`` x cosine).
Bad arguments are one-line SsftErrors naming the argument; progress follows ``show_progress_bar``."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from torch import nn

import ssft
from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.pipeline.export import export_run
from tests.helpers import move_trainable_weights

st = pytest.importorskip("sentence_transformers")

QUERY = "which vitamin keeps bones healthy"
QUERIES = [QUERY, "coffee and the heart"]
DOCUMENTS = ["bones are hard tissue, made of calcium.", "coffee raises blood pressure a little; tea less so.",
             "vitamin d helps the body take up calcium for strong bones", "red meat, beans and spinach hold iron."]
TOL = 1e-4


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory) -> dict[str, tuple]:
    """(ssft ranker loaded at fp32, the sentence-transformers object of its export) per architecture."""
    root = tmp_path_factory.mktemp("st-shapes")
    settings = {"dense": {}, "cross": {}, "colbert": {"colbert_dim": 16}}
    out = {}
    for arch, keys in settings.items():
        torch.manual_seed(0)
        cfg = ModelConfig(architecture=arch, name=str(tiny_model_dir), max_length=48,
                          query_max_length=48 if arch == "dense" else 12, **keys)
        ranker = MODELS.get(arch).build(cfg, "full", {})
        move_trainable_weights(ranker)
        ranker.save(root / arch)
        export_run(root / arch, root / f"{arch}-export")
        folder = str(root / f"{arch}-export")
        reference = {"dense": lambda: st.SentenceTransformer(folder, device="cpu"),
                     "cross": lambda: st.CrossEncoder(folder, device="cpu"),
                     "colbert": lambda: st.MultiVectorEncoder(folder, device="cpu")}[arch]()
        out[arch] = ssft.load(root / arch, precision="fp32"), reference
    return out


def same_shape_and_type(got, want) -> None:
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same_shape_and_type(g, w)
    else:
        assert tuple(got.shape) == tuple(want.shape)
        assert got.dtype == want.dtype


def close(got, want, scale: float = 1.0) -> None:
    if isinstance(want, list):
        for g, w in zip(got, want):
            close(g, w, scale)
        return
    np.testing.assert_allclose(np.asarray(torch.as_tensor(got).float()), scale * np.asarray(torch.as_tensor(want).float()),
                               atol=TOL * max(scale, 1.0), rtol=1e-4)


# ---------------------------------------------------------------- SentenceTransformer: encode, similarity


@pytest.mark.parametrize("method", ["encode", "encode_query", "encode_document"])
@pytest.mark.parametrize("kwargs", [{}, {"convert_to_tensor": True}, {"convert_to_numpy": False},
                                    {"normalize_embeddings": True, "batch_size": 2, "show_progress_bar": False}])
def test_encode_takes_sentence_transformers_arguments_and_returns_its_shapes(models, method, kwargs):
    model, reference = models["dense"]
    for inputs in (QUERY, DOCUMENTS):  # one text: one vector (dim,); a list: (texts, dim)
        got = getattr(model, method)(inputs, **kwargs)
        want = getattr(reference, method)(inputs, **kwargs)
        same_shape_and_type(got, want)
        close(got, want)


def test_similarity_is_the_models_score_and_sentence_transformers_cosine_times_its_scale(models):
    model, reference = models["dense"]
    assert model.score_scale == 20.0
    q, d = model.encode_query(QUERIES), model.encode_document(DOCUMENTS)
    got = model.similarity(q, d)
    want = reference.similarity(reference.encode_query(QUERIES), reference.encode_document(DOCUMENTS))
    same_shape_and_type(got, want)
    close(got, want, scale=model.score_scale)
    close(reference.similarity(q, d), want)  # ssft's vectors are sentence-transformers' vectors
    close(model.similarity(model.encode_query(QUERY), d), want[:1], scale=model.score_scale)  # (dim,): one row
    close(model.similarity(torch.as_tensor(q), list(torch.as_tensor(d))), want, scale=model.score_scale)
    # what rank and predict score
    ranked = model.rank(QUERY, DOCUMENTS)
    close(np.array([hit["score"] for hit in sorted(ranked, key=lambda h: h["corpus_id"])]), want[0],
          scale=model.score_scale)
    close(model.predict([(QUERY, doc) for doc in DOCUMENTS]), want[0], scale=model.score_scale)


def test_semantic_search_takes_ssft_embeddings(models):
    model, reference = models["dense"]
    want = st.util.semantic_search(reference.encode_query(QUERIES, convert_to_tensor=True),
                                   reference.encode_document(DOCUMENTS, convert_to_tensor=True), top_k=3)
    for kwargs in ({}, {"convert_to_tensor": True}):
        got = st.util.semantic_search(model.encode_query(QUERIES, **kwargs), model.encode_document(DOCUMENTS, **kwargs),
                                      top_k=3)
        assert [[h["corpus_id"] for h in hits] for hits in got] == [[h["corpus_id"] for h in hits] for hits in want]
        close([np.array([h["score"] for h in hits]) for hits in got], [np.array([h["score"] for h in hits]) for hits in want])
    scaled = st.util.semantic_search(model.encode_query(QUERIES), model.encode_document(DOCUMENTS), top_k=3,
                                     score_function=model.similarity)  # the model's own score: 20 x cosine
    close([np.array([h["score"] for h in hits]) for hits in scaled], [np.array([h["score"] for h in hits]) for hits in want],
          scale=model.score_scale)


# ---------------------------------------------------------------- CrossEncoder: predict, rank


@pytest.mark.parametrize("kwargs", [{}, {"convert_to_tensor": True}, {"convert_to_numpy": False},
                                    {"activation_fn": nn.Sigmoid(), "batch_size": 2, "show_progress_bar": False}])
def test_predict_takes_cross_encoder_arguments_and_returns_its_shapes(models, kwargs):
    model, reference = models["cross"]
    kwargs = {"activation_fn": nn.Identity(), **kwargs}  # ssft's scores are logits; the export's default is Identity
    pairs = [(QUERY, doc) for doc in DOCUMENTS]
    for inputs in (pairs, pairs[2], list(pairs[2])):  # many pairs; one pair (a tuple or a list of two texts): a scalar
        got = model.predict(inputs, **kwargs)
        want = reference.predict(inputs, **kwargs)
        same_shape_and_type(got, want)
        close(got, want)


@pytest.mark.parametrize("kwargs", [{}, {"top_k": 2}, {"top_k": 2, "return_documents": True},
                                    {"activation_fn": nn.Sigmoid(), "batch_size": 3}])
def test_rank_returns_cross_encoder_hits(models, kwargs):
    model, reference = models["cross"]
    kwargs = {"activation_fn": nn.Identity(), **kwargs}
    got = model.rank(QUERY, DOCUMENTS, **kwargs)
    want = reference.rank(QUERY, DOCUMENTS, **kwargs)
    assert [sorted(h) for h in got] == [sorted(h) for h in want]
    assert [h["corpus_id"] for h in got] == [h["corpus_id"] for h in want]
    assert [h.get("text") for h in got] == [h.get("text") for h in want]
    assert all(type(h["score"]) is float for h in got)
    close(np.array([h["score"] for h in got]), np.array([h["score"] for h in want]))


def test_rank_keeps_the_candidate_run_form(models):
    model, _ = models["cross"]
    corpus = {f"d{i}": doc for i, doc in enumerate(DOCUMENTS)}
    run = model.rank({"q": QUERY}, {"q": {"d0": 3.0, "d2": 1.0}}, corpus=corpus)
    single = model.rank(QUERY, [DOCUMENTS[0], DOCUMENTS[2]])
    assert run == {"q": {["d0", "d2"][h["corpus_id"]]: h["score"] for h in single}}
    with pytest.raises(SsftError, match="return_documents"):
        model.rank({"q": QUERY}, {"q": ["d0"]}, corpus=corpus, return_documents=True)


# ---------------------------------------------------------------- MultiVectorEncoder (ColBERT)


def test_colbert_embeddings_and_maxsim_as_multi_vector_encoder(models):
    model, reference = models["colbert"]
    for method in ("encode_query", "encode_document"):
        got = getattr(model, method)(DOCUMENTS, convert_to_numpy=False)  # a list of (tokens, dim) tensors
        want = getattr(reference, method)(DOCUMENTS)
        same_shape_and_type(got, want)
        assert isinstance(getattr(model, method)(QUERY), np.ndarray)  # one text: one (tokens, dim) matrix
    q, d = model.encode_query(QUERIES), model.encode_document(DOCUMENTS)
    got = model.similarity(q, d)
    want = reference.similarity(reference.encode_query(QUERIES), reference.encode_document(DOCUMENTS))
    same_shape_and_type(got, want.float())
    close(got, want)
    close(model.similarity(q[0], d), want[:1])  # one matrix: one row
    ranked = model.rank(QUERY, DOCUMENTS)
    close(np.array([h["score"] for h in sorted(ranked, key=lambda h: h["corpus_id"])]), want[0])


# ---------------------------------------------------------------- encode and symmetry; the torch-level path


def test_encode_is_refused_by_an_asymmetric_model_in_one_line(models):
    for arch, pointer in (("colbert", "encode_query or encode_document"), ("cross", "predict or rank")):
        with pytest.raises(SsftError, match=pointer) as err:
            models[arch][0].encode(DOCUMENTS)
        assert "\n" not in str(err.value)
    for method in ("encode_query", "encode_document", "similarity"):
        with pytest.raises(SsftError, match="scores \\(query, document\\) pairs together"):
            getattr(models["cross"][0], method)(*(["a text"] if method != "similarity" else [[1.0], [1.0]]))


def test_encode_tokens_is_the_torch_level_encode_path(models):
    model, _ = models["dense"]
    batch = model.tokenize_queries([QUERY])
    with torch.inference_mode():
        vectors = model.encode_tokens(batch["input_ids"], batch["attention_mask"], "query").vectors
    close(vectors[0], model.encode_query(QUERY))


# ---------------------------------------------------------------- bad arguments, repr, progress


@pytest.mark.parametrize("call,name", [
    (lambda m: m.encode_query(DOCUMENTS, convert_to_tensor="yes"), "convert_to_tensor"),
    (lambda m: m.encode_document(DOCUMENTS, normalize_embeddings=1), "normalize_embeddings"),
    (lambda m: m.encode(DOCUMENTS, show_progress_bar="auto"), "show_progress_bar"),
    (lambda m: m.encode_query(123), "encode_query"),
    (lambda m: m.encode_document(DOCUMENTS, batch_size=0), "batch_size"),
    (lambda m: m.predict([(QUERY, DOCUMENTS[0])], activation_fn="sigmoid"), "activation_fn"),
    (lambda m: m.predict([(QUERY, DOCUMENTS[0])], convert_to_numpy=None), "convert_to_numpy"),
    (lambda m: m.predict((QUERY, DOCUMENTS[0], "a third")), "pairs"),
    (lambda m: m.rank(QUERY, DOCUMENTS, return_documents="yes"), "return_documents"),
    (lambda m: m.similarity("not numbers", [[1.0]]), "embeddings1"),
    (lambda m: m.similarity(np.ones((2, 5)), np.ones((3, 7))), "dimensions"),
])
def test_bad_arguments_are_one_line_errors_naming_them(models, call, name):
    with pytest.raises(SsftError, match=name) as err:
        call(models["dense"][0])
    assert "\n" not in str(err.value)


def test_repr_says_architecture_precision_and_backend(models):
    for arch, (model, _) in models.items():
        text = repr(model)
        assert "\n" not in text and len(text) < 300
        assert f"architecture='{arch}'" in text and "precision='fp32'" in text and "backend='torch'" in text


def test_show_progress_bar_true_forces_a_bar_false_silences_none_is_auto(models, capsys, caplog, monkeypatch):
    model, _ = models["dense"]
    model.encode_document(DOCUMENTS, show_progress_bar=True)
    assert "encoding documents" in capsys.readouterr().err
    model.encode_document(DOCUMENTS, show_progress_bar=False)
    model.encode_document(DOCUMENTS)  # auto: a few texts show nothing
    assert capsys.readouterr().err == ""
    many = [f"document number {i}" for i in range(300)]
    monkeypatch.setenv("SSFT_PROGRESS_INTERVAL", "0")  # not a terminal: a log line every update
    with caplog.at_level(logging.INFO, logger="ssft.progress"):
        model.encode_document(many, batch_size=100)
        assert any("encoding documents" in r.getMessage() and "/300" in r.getMessage() for r in caplog.records)
        caplog.clear()
        model.encode_document(many, batch_size=100, show_progress_bar=False)
        assert not caplog.records
