"""Distillation (002, 004): layer-subset students, the losses against hand-computed values, the teacher (frozen,
no gradient, outputs of the current batch), asymmetric students served against the teacher's index, recipes."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ssft.config.recipe import DistillationConfig, ModelConfig, recipe_from_dict
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from tests.helpers import save_tiny_bert

QUERIES = ["vitamin d bones", "statins cholesterol", "fish oil"]
DOCUMENTS = ["vitamin d and bone health in adults", "statin drugs lower cholesterol", "omega three fatty acids in fish oil"]


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory) -> Path:
    """A tiny random 4-layer BERT (hidden 32) with the MiniLM tokenizer: the teacher students are cut from."""
    return save_tiny_bert(tmp_path_factory.mktemp("teacher-bert"), hidden_size=32, layers=4, seed=3)


def build_student(name, method="full", options=None, **model):
    cfg = ModelConfig(architecture="dense", name=str(name), max_length=64, query_max_length=16, **model)
    torch.manual_seed(0)
    return MODELS.get("dense").build(cfg, method, options or {})


def make_teacher(name):
    from ssft.teachers.dense import load_teacher, teacher_reference

    return load_teacher(teacher_reference(str(name), "mean", 64, 16))


# ---------------------------------------------------------------- layer subsets (002 §2.1)


def test_select_layers_copies_exactly_the_chosen_layers(teacher_dir):
    from transformers import AutoModel

    from ssft.adapters.backbone import select_layers

    teacher = AutoModel.from_pretrained(teacher_dir, add_pooling_layer=False)
    student = AutoModel.from_pretrained(teacher_dir, add_pooling_layer=False)
    select_layers(student, [0, 3], "teacher")
    assert student.config.num_hidden_layers == 2 and len(student.encoder.layer) == 2
    t_state, s_state = teacher.state_dict(), student.state_dict()
    for key, value in s_state.items():
        source = key.replace("encoder.layer.1.", "encoder.layer.3.")  # student layer 1 is teacher layer 3
        torch.testing.assert_close(value, t_state[source], rtol=0, atol=0)
    assert not any(k.startswith(("encoder.layer.2.", "encoder.layer.3.")) for k in s_state)
    assert [m.layer_idx for m in student.modules() if isinstance(getattr(m, "layer_idx", None), int)] == [0, 1]
    # the student computes the teacher's layers 0 and 3 in a row
    ids = torch.tensor([[101, 2000, 2001, 102]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        expected = teacher.embeddings(input_ids=ids)
        for i in (0, 3):  # no padding: no attention mask needed
            out = teacher.encoder.layer[i](expected)
            expected = out[0] if isinstance(out, tuple) else out
        got = student(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got, expected)
    first_two = AutoModel.from_pretrained(teacher_dir, add_pooling_layer=False)
    select_layers(first_two, 2, "teacher")  # a count keeps the first N (000's query_layers)
    torch.testing.assert_close(first_two.encoder.layer[1].output.dense.weight, teacher.encoder.layer[1].output.dense.weight)


@pytest.mark.parametrize("layers", [[3, 1], [0, 4], [], [1, 1], 5, 0])
def test_select_layers_refuses_bad_subsets(teacher_dir, layers):
    from transformers import AutoModel

    from ssft.adapters.backbone import select_layers

    with pytest.raises(SsftError, match="query_layers"):
        select_layers(AutoModel.from_pretrained(teacher_dir, add_pooling_layer=False), layers, "teacher")


@pytest.mark.parametrize("method,options", [("full", {}), ("lora", {"r": 2, "alpha": 4})])
def test_layer_subset_student_round_trips_with_full_and_lora(teacher_dir, tmp_path, method, options):
    from tests.helpers import assert_save_load_round_trip

    student = build_student(teacher_dir, method, options, query_layers=[0, 3])
    assert student.backbone.config.num_hidden_layers == 2
    loaded = assert_save_load_round_trip(student, tmp_path / "s", QUERIES, DOCUMENTS)
    assert loaded.backbone.config.num_hidden_layers == 2


# ---------------------------------------------------------------- losses against hand-computed values


def test_embedding_match_l2_and_mse_by_hand():
    from ssft.losses.embedding_match import EmbeddingMatchLoss

    student = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    teacher = torch.tensor([[3.0, 4.0], [1.0, 1.0]])
    assert EmbeddingMatchLoss("l2")(student, teacher).item() == pytest.approx((5.0 + 0.0) / 2)  # Eq. 7: mean ||t - s||
    assert EmbeddingMatchLoss("mse")(student, teacher).item() == pytest.approx((9 + 16 + 0 + 0) / 4)
    with pytest.raises(SsftError, match="distance"):
        EmbeddingMatchLoss("cosine")
    s = student.clone().requires_grad_(True)
    t = teacher.clone().requires_grad_(True)
    EmbeddingMatchLoss("l2")(s, t).backward()
    assert t.grad is None and s.grad is not None  # the teacher side is detached


def test_score_distillation_softmax_ce_bce_mse_by_hand():
    from ssft.losses.score_distillation import ScoreDistillationLoss

    ninf = float("-inf")
    teacher = torch.tensor([[0.0, math.log(3.0), ninf]])  # softmax over the two documents: 0.25, 0.75
    student = torch.tensor([[0.0, 0.0, ninf]])  # 0.5, 0.5
    # Eq. 11: -(0.25 log 0.5 + 0.75 log 0.5) = log 2; the -inf column is no document of the row
    assert ScoreDistillationLoss("softmax_ce")(student, teacher).item() == pytest.approx(math.log(2))
    # temperature 2: teacher 0, log(3)/2 -> weights 1/(1+sqrt3), sqrt3/(1+sqrt3); student still uniform
    assert ScoreDistillationLoss("softmax_ce", 2.0)(student, teacher).item() == pytest.approx(math.log(2))
    # Eq. 12: sigma(0) = 0.5 target, sigma(0) prediction -> log 2 per document; sigma(log 3) = 0.75 target
    bce = -(0.5 * math.log(0.5) + 0.5 * math.log(0.5)) - (0.75 * math.log(0.5) + 0.25 * math.log(0.5))
    assert ScoreDistillationLoss("bce")(student, teacher).item() == pytest.approx(bce)
    # Eq. 13: sum of squared differences over the row's documents, mean over rows
    t2 = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    s2 = torch.tensor([[0.0, 0.0], [0.0, 3.0]])
    assert ScoreDistillationLoss("mse")(s2, t2).item() == pytest.approx(((1 + 4) + 9) / 2)
    with pytest.raises(ValueError, match="same entries"):
        ScoreDistillationLoss("mse")(torch.tensor([[0.0, ninf]]), torch.tensor([[0.0, 1.0]]))


# ---------------------------------------------------------------- the teacher and the objective


def _groups_batch(student, teacher, queries, docs_per_query):
    from ssft.training.distillation import DistillationCollator

    items = [{"query": q, "documents": docs} for q, docs in zip(queries, docs_per_query)]
    return DistillationCollator(student, teacher)(items)


@pytest.mark.parametrize("inherit", [False, True])
def test_teacher_gets_no_gradient_and_scores_the_current_batch(teacher_dir, inherit):
    from ssft.losses import ContrastiveLoss
    from ssft.training.distillation import DistillationObjective

    teacher = make_teacher(teacher_dir)
    student = build_student(teacher_dir, query_layers=[0, 3]).train()
    if inherit:
        student.inherit_documents(teacher)
    cfg = DistillationConfig(teacher=str(teacher_dir), inherit_documents=inherit, query_embedding_weight=1.0,
                             document_embedding_weight=0.0 if inherit else 0.5)
    objective = DistillationObjective(teacher, cfg, ContrastiveLoss())
    seen = []
    original = teacher.model.encode_tokens
    teacher.model.encode_tokens = lambda ids, mask, tower: (seen.append((tower, ids.clone(), teacher.model.training))
                                                     or original(ids, mask, tower))
    batch = _groups_batch(student, teacher, QUERIES[:2], [DOCUMENTS[:2], DOCUMENTS[1:]])
    loss = objective(student, batch)
    loss.backward()
    assert set(objective.last_parts) == ({"one_hot", "score", "query_embedding"} | (set() if inherit else {"document_embedding"}))
    assert all(p.grad is None and not p.requires_grad for p in teacher.model.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in student.backbone.parameters())
    # the teacher's queries were this batch's, encoded in eval mode; its documents once each
    query_calls = [ids for tower, ids, _ in seen if tower == "query"]
    assert len(query_calls) == 1 and torch.equal(query_calls[0], batch["t_q_input_ids"])
    assert not any(training for _, _, training in seen)
    with torch.no_grad():
        expected_q = original(batch["t_q_input_ids"], batch["t_q_attention_mask"], "query").vectors
    torch.testing.assert_close(teacher.queries(batch["t_q_input_ids"], batch["t_q_attention_mask"]), expected_q)
    # a second batch with other queries: the teacher encodes those (nothing carried over)
    batch2 = _groups_batch(student, teacher, [QUERIES[2]], [DOCUMENTS[:2]])
    objective(student, batch2)
    assert torch.equal([ids for tower, ids, _ in seen if tower == "query"][-1], batch2["t_q_input_ids"])
    doc_rows = sum(ids.shape[0] for tower, ids, _ in seen if tower == "document")
    assert doc_rows == 3  # three distinct documents over both batches, each encoded once


def test_query_only_objective_is_the_embedding_distance(teacher_dir):
    from ssft.training.distillation import DistillationCollator, DistillationObjective

    teacher = make_teacher(teacher_dir)
    student = build_student(teacher_dir, query_layers=[3])
    student.inherit_documents(teacher)
    cfg = DistillationConfig(teacher=str(teacher_dir), inherit_documents=True, query_only=True, query_embedding_weight=2.0)
    batch = DistillationCollator(student, teacher)([{"query": q} for q in QUERIES])
    loss = DistillationObjective(teacher, cfg)(student, batch)
    with torch.no_grad():
        s = student.encode_queries(QUERIES).vectors
        t = teacher.model.encode_queries(QUERIES).vectors
    assert loss.item() == pytest.approx(2.0 * (s - t).norm(dim=-1).mean().item(), rel=1e-5)
    # the full teacher as its own student: distance 0
    same = build_student(teacher_dir)
    same.inherit_documents(teacher)
    assert DistillationObjective(teacher, cfg)(same,
                                               DistillationCollator(same, teacher)([{"query": q} for q in QUERIES])).item() < 1e-5


# ---------------------------------------------------------------- asymmetric students and the teacher's index


def test_asymmetric_student_serves_against_the_teachers_index(teacher_dir, tiny_dataset, tmp_path):
    from ssft.data.beir import load_dataset
    from ssft.eval.retrieve import corpus_vectors, retrieve
    from ssft.models import load_ranker
    from ssft.models.embedding_cache import cache_dir

    dataset = load_dataset(str(tiny_dataset))
    teacher = make_teacher(teacher_dir)
    student = build_student(teacher_dir, query_layers=[0])
    student.inherit_documents(teacher)
    assert student.tower_parameters("document") == [] and not any("teacher" in k for k in student.state_dict())
    ids, vectors = corpus_vectors(teacher.model, dataset)  # the teacher's index, cached on disk
    cached = sorted(cache_dir().glob("*.safetensors"))
    assert len(cached) == 1
    with torch.no_grad():
        s_ids, s_vectors = corpus_vectors(student.eval(), dataset)
    assert s_ids == ids and torch.allclose(torch.from_numpy(s_vectors), torch.from_numpy(vectors), atol=1e-6)
    assert sorted(cache_dir().glob("*.safetensors")) == cached  # the student read the teacher's cache file
    student.save(tmp_path / "student")
    spec = json.loads((tmp_path / "student" / "ssft_model.json").read_text())
    assert spec["document_encoder"]["name"] == str(teacher_dir) and spec["query_layers"] == [0]
    assert not (tmp_path / "student" / "document_tower").exists()
    loaded = load_ranker(tmp_path / "student")
    queries = {q: dataset.queries[q] for q in ("q1", "q2")}
    assert retrieve(loaded, dataset, queries, 3) == retrieve(student, dataset, queries, 3)


def test_inherit_documents_needs_matching_sizes_and_no_own_document_tower(teacher_dir, tiny_model_dir):
    teacher = make_teacher(teacher_dir)
    with pytest.raises(SsftError, match="projection_dim: 32"):
        build_student(tiny_model_dir, projection_dim=16).inherit_documents(teacher)
    with pytest.raises(SsftError, match="document_name"):
        build_student(teacher_dir, document_name=str(teacher_dir)).inherit_documents(teacher)


def test_retrieve_cli_documents_from_a_teacher(teacher_dir, tiny_dataset, tmp_path, capsys):
    from ssft.cli.retrieve import main as retrieve_main

    student = build_student(teacher_dir, query_layers=[0, 1])  # a student trained with its own documents
    student.save(tmp_path / "student")
    rc = retrieve_main([str(tmp_path / "student"), "--data", str(tiny_dataset), "--split", "test", "--output",
                        str(tmp_path / "ret"), "--depth", "3", "--documents-from", str(teacher_dir)])
    assert rc == 0
    metrics = json.loads((tmp_path / "ret" / "metrics.json").read_text())
    teacher = make_teacher(teacher_dir)
    student.inherit_documents(teacher)
    from ssft.data.beir import load_dataset
    from ssft.eval.metrics import evaluate_run
    from ssft.eval.retrieve import retrieve

    dataset = load_dataset(str(tiny_dataset))
    qrels = dataset.qrels("test")
    run = retrieve(student, dataset, {q: dataset.queries[q] for q in qrels}, 3)
    assert metrics["test"]["nDCG@10"] == pytest.approx(evaluate_run(qrels, run, ["nDCG@10"])[0]["nDCG@10"])


# ---------------------------------------------------------------- recipes and run_recipe


def _recipe(teacher_dir, dataset, out, distillation, **model):
    return recipe_from_dict({
        "model": {"architecture": "dense", "name": str(teacher_dir), "max_length": 64, "query_max_length": 16, **model},
        "loss": {"name": "contrastive"},
        "data": {"dataset": str(dataset), "validation_split": None, "num_negatives": 1},
        "eval": {"depth": 5, "metrics": ["nDCG@10", "R@100"]},
        "distillation": {"teacher": str(teacher_dir), **distillation},
        "training": {"output_dir": str(out), "num_train_epochs": 2, "per_device_train_batch_size": 2, "use_cpu": True,
                     "learning_rate": 1e-3, "lr_scheduler_type": "constant", "report_to": []},
    }, "distill.yaml")


@pytest.mark.parametrize("distillation,model", [
    ({"inherit_documents": True, "query_only": True, "query_splits": ["train", "dev"]}, {"query_layers": [0, 3]}),
    ({"inherit_documents": True, "score_loss": "bce"}, {"query_layers": [3]}),
    ({"document_embedding_weight": 1.0, "score_loss": "mse"}, {"query_layers": 1}),
])
def test_run_recipe_distills_and_writes_the_output_contract(teacher_dir, tiny_dataset, tmp_path, monkeypatch, distillation,
                                                            model):
    from ssft.models import load_ranker
    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "logs"))
    out = tmp_path / "run"
    results = run_recipe(_recipe(teacher_dir, tiny_dataset, out, distillation, **model))
    assert set(results) == {"test", "bm25", "start"} and json.loads((out / "metrics.json").read_text()) == results
    info = json.loads((out / "run_info.json").read_text())
    assert info["train_loss"] > 0
    if distillation.get("query_only"):
        assert "query-only distillation" in info["notes"][0] and "train+dev" in info["notes"][0]
    loaded = load_ranker(out / "model")
    assert (loaded.document_teacher is not None) == bool(distillation.get("inherit_documents"))


def test_recipe_validation_of_the_distillation_section(teacher_dir, tiny_dataset, tmp_path):
    def bad(match, distillation, **model):
        with pytest.raises(SsftError, match=match):
            _recipe(teacher_dir, tiny_dataset, tmp_path / "x", distillation, **model)

    bad("inherit_documents: true", {"query_only": True})
    bad("test_split", {"query_only": True, "inherit_documents": True, "query_splits": ["test"]})
    bad("score_loss", {"score_loss": "kl"})
    bad("embedding_distance", {"embedding_distance": "cos"})
    bad("document_name must be null", {"inherit_documents": True}, document_name=str(teacher_dir))
    bad("set it to 0", {"inherit_documents": True, "document_embedding_weight": 1.0})
    bad("every loss weight is 0", {"one_hot_weight": 0, "score_weight": 0, "query_embedding_weight": 0})
    bad("unknown key 'teachr'", {"teachr": "x"})
    bad("query_layers", {}, query_layers=[2, 1])
    with pytest.raises(SsftError, match="teacher"):
        recipe_from_dict({"model": {"architecture": "dense"}, "distillation": {"inherit_documents": True}}, "r.yaml")
    recipe = _recipe(teacher_dir, tiny_dataset, tmp_path / "x", {"inherit_documents": True}, query_layers="0,3")
    assert recipe.model.config.query_layers == [0, 3] and recipe.to_dict()["distillation"]["inherit_documents"] is True


def test_missing_teacher_fails_before_anything_is_written(teacher_dir, tiny_dataset, tmp_path):
    from ssft.pipeline.run import run_recipe

    out = tmp_path / "run"
    recipe = _recipe(teacher_dir, tiny_dataset, out, {"inherit_documents": True})
    recipe.distillation.teacher = str(tmp_path / "no-such-model")
    with pytest.raises(SsftError):
        run_recipe(recipe)
    assert not out.exists()


# ---------------------------------------------------------------- CE -> DE: the dual-pooled cross-encoder teacher (004 §4.2)


def test_dual_pooling_by_hand():
    from ssft.teachers.cross import dual_pool

    # [CLS]=101 q1 q2 [SEP]=102 d1 d2 d3 [SEP] [PAD]
    ids = torch.tensor([[101, 5, 6, 102, 7, 8, 9, 102, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 1, 0]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 0]])
    hidden = torch.arange(9, dtype=torch.float).view(1, 9, 1).repeat(1, 1, 2)  # token i's state = (i, i)
    q, d = dual_pool(hidden, ids, mask, types, {0, 101, 102}, 102, "cls_sep")
    assert q.tolist() == [[0.0, 0.0]] and d.tolist() == [[3.0, 3.0]]  # [CLS] and the [SEP] closing the query
    q, d = dual_pool(hidden, ids, mask, types, {0, 101, 102}, 102, "segment_mean")
    # App. B Eq. 15: each segment token weighted 1/sqrt(length): query (1 + 2)/sqrt(2), document (4 + 5 + 6)/sqrt(3)
    torch.testing.assert_close(q, torch.full((1, 2), 3 / math.sqrt(2)))
    torch.testing.assert_close(d, torch.full((1, 2), 15 / math.sqrt(3)))


def test_cross_teacher_objective_trains_the_student_only(teacher_dir):
    from ssft.losses import ContrastiveLoss
    from ssft.teachers.cross import load_cross_teacher
    from ssft.training.distillation import DistillationCollator, DistillationObjective

    teacher = load_cross_teacher(str(teacher_dir), "segment_mean", 64)
    student = build_student(teacher_dir, query_layers=[0]).train()
    cfg = DistillationConfig(teacher=str(teacher_dir), teacher_kind="cross_dual_pooled", teacher_pooling="segment_mean",
                             document_embedding_weight=1.0)
    items = [{"query": QUERIES[0], "documents": DOCUMENTS[:2]}, {"query": QUERIES[1], "documents": DOCUMENTS[1:]}]
    batch = DistillationCollator(student, teacher)(items)
    assert batch["t_p_input_ids"].shape[0] == 4  # every (query, document) pair, in the student's pair order
    objective = DistillationObjective(teacher, cfg, ContrastiveLoss())
    objective(student, batch).backward()
    assert set(objective.last_parts) == {"one_hot", "score", "query_embedding", "document_embedding"}
    assert all(p.grad is None and not p.requires_grad for p in teacher.model.parameters()) and not teacher.model.training
    assert any(p.grad is not None for p in student.parameters())
    # the teacher's proxies are those of this batch's pairs
    q, d = teacher.pairs(batch["t_p_input_ids"], batch["t_p_attention_mask"], batch["t_p_token_type_ids"])
    tok = teacher.tokenizer(QUERIES[1], DOCUMENTS[2], return_tensors="pt", return_token_type_ids=True)
    q1, d1 = teacher.pairs(tok["input_ids"], tok["attention_mask"], tok["token_type_ids"])
    torch.testing.assert_close(q[3:], q1, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(d[3:], d1, atol=1e-5, rtol=1e-4)


def test_run_recipe_with_a_cross_encoder_teacher(teacher_dir, tiny_dataset, tmp_path, monkeypatch):
    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "logs"))
    out = tmp_path / "run"
    recipe = _recipe(teacher_dir, tiny_dataset, out, {"teacher_kind": "cross_dual_pooled", "teacher_pooling": "cls_sep"},
                     query_layers=[1])
    assert set(run_recipe(recipe)) == {"test", "bm25", "start"}
    with pytest.raises(SsftError, match="cls_sep or segment_mean"):
        _recipe(teacher_dir, tiny_dataset, out, {"teacher_kind": "cross_dual_pooled"})
    with pytest.raises(SsftError, match="query embedding depends on the document"):
        _recipe(teacher_dir, tiny_dataset, out, {"teacher_kind": "cross_dual_pooled", "teacher_pooling": "cls_sep",
                                                 "inherit_documents": True, "query_only": True})
    # inheriting its empty-query document embeddings (004 §5.3) is allowed: tests/teachers/test_embeddistill_ce.py
    _recipe(teacher_dir, tiny_dataset, out, {"teacher_kind": "cross_dual_pooled", "teacher_pooling": "cls_sep",
                                             "inherit_documents": True})


def test_full_fine_tuning_can_keep_the_word_embeddings_fixed(teacher_dir, tmp_path):
    from tests.helpers import assert_save_load_round_trip

    student = build_student(teacher_dir, "full", {"freeze_word_embeddings": True}, query_layers=[0, 3])
    frozen = [n for n, p in student.named_parameters() if not p.requires_grad]
    assert frozen == ["backbone.model.embeddings.word_embeddings.weight"]
    assert_save_load_round_trip(student, tmp_path / "s", QUERIES, DOCUMENTS)
    with pytest.raises(SsftError, match="freeze_word_embeddings: expected true/false"):
        from ssft.config.registry import ADAPTERS

        ADAPTERS.get("full").config_from({"freeze_word_embeddings": "maybe"})


def test_a_lora_student_distills_and_reloads_on_its_layer_subset(teacher_dir, tiny_dataset, tmp_path, monkeypatch):
    from ssft.models import load_ranker
    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "logs"))
    out = tmp_path / "run"
    recipe = _recipe(teacher_dir, tiny_dataset, out, {"inherit_documents": True, "query_only": True}, query_layers=[0, 3])
    recipe.adapter.method, recipe.adapter.options = "lora", {"r": 2, "alpha": 4}
    run_recipe(recipe)
    loaded = load_ranker(out / "model")
    assert loaded.backbone.is_peft and loaded.backbone.config.num_hidden_layers == 2
    assert (out / "model" / "adapter").is_dir() and loaded.document_teacher is not None


def test_distillation_and_tct_do_not_combine(teacher_dir, tiny_dataset, tmp_path):
    recipe = _recipe(teacher_dir, tiny_dataset, tmp_path / "x", {"inherit_documents": True}).to_dict()
    recipe["loss"] = {"name": "tct", "teacher": str(teacher_dir)}
    with pytest.raises(SsftError, match="loss 'tct' has its own in-loop teacher"):
        recipe_from_dict(recipe, "distill.yaml")


def test_distillation_refuses_several_processes_before_writing(teacher_dir, tiny_dataset, tmp_path, monkeypatch):
    # teacher targets are computed per process and not gathered: a DDP run would distil from a partial batch
    from transformers import TrainingArguments

    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "logs"))  # run_recipe sets it: keep it out of later tests
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: 2))
    out = tmp_path / "run"
    with pytest.raises(SsftError, match="distillation trains in one process"):
        run_recipe(_recipe(teacher_dir, tiny_dataset, out, {"inherit_documents": True}))
    assert not out.exists()


def test_a_dense_teacher_by_name_may_score_by_the_raw_dot_product(tiny_model_dir):
    """002 / 004 distil from dot-product teachers: distillation.teacher_normalize false loads a teacher by name without
    the L2 normalisation (score scale 1); the default keeps sentence-transformers' cosine (20 x)."""
    from ssft.teachers.dense import load_teacher, teacher_reference

    texts = ["vitamin d and bone health", "omega three fatty acids"]
    cosine = load_teacher(teacher_reference(str(tiny_model_dir), max_length=32))
    dot = load_teacher(teacher_reference(str(tiny_model_dir), max_length=32, normalize=False))
    assert (cosine.score_scale, dot.score_scale) == (20.0, 1.0) and dot.reference["normalize"] is False
    tokens = dot.tokenize(texts)
    q_cos = cosine.queries(tokens["t_q_input_ids"], tokens["t_q_attention_mask"])
    q_dot = dot.queries(tokens["t_q_input_ids"], tokens["t_q_attention_mask"])
    torch.testing.assert_close(q_cos.norm(dim=1), torch.ones(2))
    assert float(q_dot.norm(dim=1).min()) > 1.5  # the pooled states themselves
    torch.testing.assert_close(torch.nn.functional.normalize(q_dot, dim=1), q_cos)


def test_a_cross_teacher_may_score_by_the_inner_product_of_its_proxies(teacher_dir):
    """004 App. B: s_t(q, d) = <emb_q, emb_d> of the dual-pooled proxies, raw (score scale 1): the default;
    teacher_normalize true normalises them (20 x cosine)."""
    from ssft.pipeline.inputs import load_distillation_teacher
    from ssft.teachers.cross import load_cross_teacher

    cosine = load_cross_teacher(str(teacher_dir), "segment_mean", 64, normalize=True)
    inner = load_cross_teacher(str(teacher_dir), "segment_mean", 64)
    assert (cosine.score_scale, inner.score_scale) == (20.0, 1.0) and inner.reference["normalize"] is False
    tok = inner.tokenizer(QUERIES[:2], DOCUMENTS[:2], padding=True, return_tensors="pt", return_token_type_ids=True)
    q_raw, d_raw = inner.pairs(tok["input_ids"], tok["attention_mask"], tok["token_type_ids"])
    q_cos, d_cos = cosine.pairs(tok["input_ids"], tok["attention_mask"], tok["token_type_ids"])
    assert float(q_raw.norm(dim=1).min()) > 1.5
    torch.testing.assert_close(torch.nn.functional.normalize(q_raw, dim=1), q_cos)
    torch.testing.assert_close(torch.nn.functional.normalize(d_raw, dim=1), d_cos)
    recipe_from_dict({"model": {"architecture": "dense"}, "distillation": {
        "teacher": "x", "teacher_kind": "cross_dual_pooled", "teacher_pooling": "cls_sep", "teacher_normalize": False}})
    # teacher_normalize null (the default): a cross teacher scores by the inner product, a dense one by 20 x cosine
    for kind, pooling, scale in (("cross_dual_pooled", "cls_sep", 1.0), ("dense", "mean", 20.0)):
        recipe = recipe_from_dict({"model": {"architecture": "dense", "name": str(teacher_dir)}, "distillation": {
            "teacher": str(teacher_dir), "teacher_kind": kind, "teacher_pooling": pooling}})
        assert recipe.distillation.teacher_normalize is None
        assert load_distillation_teacher(recipe).score_scale == scale
