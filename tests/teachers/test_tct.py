"""TCT-ColBERT (003): the in-loop distillation loss (Eq. 5-6), the frozen teacher scored on the current batch,
score matrices, dense-sparse fusion (Eq. 7) and its evaluation options."""
from __future__ import annotations

import json
import math

import pytest
import torch

from ssft.config.recipe import ModelConfig, recipe_from_dict
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.losses.tct import TightlyCoupledDistillationLoss


def _softmax(xs: list[float]) -> list[float]:
    exps = [math.exp(x) for x in xs]
    return [e / sum(exps) for e in exps]


# ---------------------------------------------------------------- the loss (Eq. 5-6)

def test_tct_loss_against_a_hand_computed_case():
    student = [1.0, 2.0, 0.0]
    teacher = [0.5, 0.25, 0.0]
    gamma, tau = 0.1, 0.25
    p = _softmax(student)  # Eq. 5, student untempered
    p_hat = _softmax([t / tau for t in teacher])  # Eq. 5, teacher over tau
    ce = -math.log(p[0])
    kl = sum(a * math.log(a / b) for a, b in zip(p_hat, p))
    expected = gamma * ce + (1 - gamma) * kl
    assert expected == pytest.approx(0.519219, abs=1e-5)  # = 0.1 * 1.407606 + 0.9 * 0.420508
    loss = TightlyCoupledDistillationLoss(gamma=gamma, temperature=tau)
    got = loss(torch.tensor([student]), torch.tensor([teacher]), torch.tensor([0]))
    assert float(got) == pytest.approx(expected, rel=1e-6)


def test_tct_loss_limits_and_batch_average():
    s = torch.tensor([[1.0, 2.0, 0.0], [0.0, -1.0, 3.0]])
    t = torch.tensor([[0.5, 0.25, 0.0], [1.0, 0.0, 0.5]])
    pos = torch.tensor([0, 2])
    ce = TightlyCoupledDistillationLoss(gamma=1.0)(s, t, pos)
    assert float(ce) == pytest.approx(float(torch.nn.functional.cross_entropy(s, pos)))
    # gamma 0: pure KL, zero when the student's distribution is the teacher's
    kl = TightlyCoupledDistillationLoss(gamma=0.0, temperature=0.5)
    assert float(kl(t / 0.5, t, pos)) == pytest.approx(0.0, abs=1e-7)
    assert float(kl(s, t, pos)) > 0
    # the batch mean of the per-row losses
    rows = [float(TightlyCoupledDistillationLoss()(s[i:i + 1], t[i:i + 1], pos[i:i + 1])) for i in range(2)]
    assert float(TightlyCoupledDistillationLoss()(s, t, pos)) == pytest.approx(sum(rows) / 2, rel=1e-6)


def test_tct_loss_leaves_the_query_s_other_positives_out_of_the_cross_entropy_only():
    # two items of the same query: documents [p1, p2, n]; item 0's positive is p1, item 1's is p2
    s = torch.tensor([[1.0, 2.0, 0.0], [1.0, 2.0, 0.0]])
    t = torch.tensor([[0.5, 0.25, 0.0], [0.5, 0.25, 0.0]])
    pos = torch.tensor([0, 1])
    excluded = torch.tensor([[True, True, False], [True, True, False]])  # the own positive is kept by the loss
    ce = TightlyCoupledDistillationLoss(gamma=1.0)(s, t, pos, excluded)
    expected_ce = (math.log(1 + math.exp(-1)) + math.log(1 + math.exp(-2))) / 2  # -log e^1/(e^1+e^0), -log e^2/(e^2+e^0)
    assert float(ce) == pytest.approx(expected_ce, rel=1e-6)
    kl_only = TightlyCoupledDistillationLoss(gamma=0.0)
    assert float(kl_only(s, t, pos, excluded)) == pytest.approx(float(kl_only(s, t, pos)), rel=1e-6)  # KL keeps all


def test_tct_with_gamma_one_is_the_contrastive_loss_on_the_dense_in_batch_rows():
    from ssft.losses import ContrastiveLoss
    from ssft.models.dense import in_batch_rows
    from ssft.teachers.in_loop import batch_items

    torch.manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(2, 8), dim=-1)
    d = torch.nn.functional.normalize(torch.randn(6, 8), dim=-1)
    # 3 items (group 2) over 2 distinct queries: items 0 and 1 share query 0 (each other's positive is excluded)
    q_index, d_index = torch.tensor([0, 0, 0, 0, 1, 1]), torch.tensor([0, 1, 2, 3, 4, 5])
    contrastive = ContrastiveLoss()(in_batch_rows(q, d, q_index, d_index, 2, 20.0))
    item_q, item_pos, excluded = batch_items(q_index, d_index, 2)
    student = 20.0 * q @ d.T
    tct = TightlyCoupledDistillationLoss(gamma=1.0)(student[item_q], torch.zeros_like(student[item_q]), item_pos, excluded)
    assert float(tct) == pytest.approx(float(contrastive), rel=1e-6)


def test_tct_loss_options_and_bad_input():
    loss = TightlyCoupledDistillationLoss.from_options({"teacher": "runs/colbert", "gamma": "0.2", "temperature": 1})
    assert (loss.teacher, loss.gamma, loss.temperature) == ("runs/colbert", 0.2, 1.0)
    with pytest.raises(SsftError, match="needs a teacher"):
        TightlyCoupledDistillationLoss.from_options({"gamma": 0.1})
    with pytest.raises(SsftError, match="gamma must be in"):
        TightlyCoupledDistillationLoss.from_options({"teacher": "x", "gamma": 2})
    with pytest.raises(SsftError, match="unknown option 'tau'"):
        TightlyCoupledDistillationLoss.from_options({"teacher": "x", "tau": 2})
    with pytest.raises(ValueError, match="same shape"):
        TightlyCoupledDistillationLoss()(torch.zeros(2, 3), torch.zeros(2, 4), torch.tensor([0, 1]))


# ---------------------------------------------------------------- score matrices and batch items

def _build(arch: str, model_dir, method: str = "full", options=None, **model):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture=arch, name=str(model_dir), max_length=64, query_max_length=16, **model)
    return MODELS.get(arch).build(cfg, method, options or {}).eval()


@pytest.mark.parametrize("arch,extra", [("colbert", {}), ("dense", {}), ("twin", {"scorer": "combiner"})])
def test_score_matrix_equals_scoring_every_pair(tiny_model_dir, arch, extra):
    model = _build(arch, tiny_model_dir, **extra)
    queries = ["vitamin d bones", "fish oil omega three"]
    docs = ["vitamin d and bone health", "omega three fatty acids in fish oil", "coffee", "sleep duration and memory"]
    with torch.no_grad():
        matrix = model(**model.tokenize(queries, docs), all_pairs=True)
        pairs = [[float(model(**model.tokenize([q], [d]))[0]) for d in docs] for q in queries]
    assert matrix.shape == (2, 4)
    torch.testing.assert_close(matrix, torch.tensor(pairs), rtol=1e-5, atol=1e-5)


def test_batch_items_mark_the_other_positives_of_the_same_query():
    from ssft.teachers.in_loop import batch_items

    # 3 items of group 2 (positive, negative): items 0 and 1 share query row 0; documents p0 n p1 n2 p2 n3
    q_index = torch.tensor([0, 0, 0, 0, 1, 1])
    d_index = torch.tensor([0, 1, 2, 3, 4, 5])
    item_q, item_pos, excluded = batch_items(q_index, d_index, 2)
    assert item_q.tolist() == [0, 0, 1] and item_pos.tolist() == [0, 2, 4]
    expected = torch.zeros(3, 6, dtype=torch.bool)
    expected[0, 2] = expected[1, 0] = True
    assert torch.equal(excluded, expected)


# ---------------------------------------------------------------- the teacher in the training loop

def _teacher_and_student(tiny_model_dir, tmp_path):
    from ssft.teachers.in_loop import FrozenTeacher

    colbert = _build("colbert", tiny_model_dir)
    colbert.save(tmp_path / "teacher" / "model")
    teacher = FrozenTeacher.load(str(tmp_path / "teacher"))  # a run folder: its model/ is loaded
    student = _build("dense", tiny_model_dir, "lora", {"r": 4})
    student.train()
    return teacher, student


def _trainer(student, teacher, dataset_dir, tmp_path, loss=None, steps: int = 2):
    from transformers import TrainingArguments

    from ssft.data.beir import load_dataset
    from ssft.data.examples import RankerCollator, TrainingGroups, build_examples
    from ssft.training.trainer import RankingTrainer

    ds = load_dataset(str(dataset_dir))
    examples = build_examples(ds.qrels("train"), list(ds.corpus), None, seed=0)
    groups = TrainingGroups(examples, ds, 2, seed=0)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, max_steps=steps, report_to=[],
                             remove_unused_columns=False, save_strategy="no", use_cpu=True, learning_rate=1e-2,
                             disable_tqdm=True, logging_strategy="no")
    loss = loss or TightlyCoupledDistillationLoss(teacher="tiny")
    trainer = RankingTrainer(model=student, args=args, train_dataset=groups, data_collator=RankerCollator(student, teacher),
                             loss=loss, teacher=teacher)
    return trainer, groups


def test_teacher_scores_the_current_batch_and_gets_no_gradient(tiny_model_dir, tiny_dataset, tmp_path):
    teacher, student = _teacher_and_student(tiny_model_dir, tmp_path)
    seen = []

    class Spy(TightlyCoupledDistillationLoss):
        def forward(self, s, t, positive, excluded=None):
            seen.append((s.detach().clone(), t.clone(), positive.clone(), t.requires_grad))
            return super().forward(s, t, positive, excluded)

    trainer, groups = _trainer(student, teacher, tiny_dataset, tmp_path, loss=Spy(teacher="tiny"))
    collator = trainer.data_collator
    for first in (0, 2):  # two different batches: the teacher's scores follow each
        items = [groups[first], groups[first + 1]]
        batch = collator(items)
        student.eval()  # no dropout, so the student's rows compare with its pair scores
        student.zero_grad()
        loss = trainer.compute_loss(student, dict(batch))
        loss.backward()
        s, t, positive, t_grad = seen[-1]
        assert not t_grad
        # the teacher's scores, recomputed pair by pair on the batch's own texts, line up cell for cell
        docs = list(dict.fromkeys(d for it in items for d in it["documents"]))
        with torch.no_grad():
            for i, it in enumerate(items):
                expected_t = [float(teacher.ranker(**teacher.ranker.tokenize([it["query"]], [d]))[0]) for d in docs]
                expected_s = [float(student(**student.tokenize([it["query"]], [d]))[0]) for d in docs]
                torch.testing.assert_close(t[i], torch.tensor(expected_t), rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(s[i], torch.tensor(expected_s), rtol=1e-5, atol=1e-5)
                assert docs[int(positive[i])] == it["documents"][0]
        # gradient reaches the student's LoRA weights and nothing of the teacher
        lora = [p for n, p in student.named_parameters() if "lora_" in n]
        assert lora and all(p.grad is not None for p in lora) and any(float(p.grad.abs().sum()) > 0 for p in lora)
        assert all(not p.requires_grad and p.grad is None for p in teacher.ranker.parameters())
    assert not teacher.ranker.training


def test_training_with_a_teacher_leaves_it_unchanged(tiny_model_dir, tiny_dataset, tmp_path):
    teacher, student = _teacher_and_student(tiny_model_dir, tmp_path)
    before_teacher = {k: v.clone() for k, v in teacher.ranker.state_dict().items()}
    before_student = {n: p.detach().clone() for n, p in student.named_parameters() if p.requires_grad}
    trainer, _ = _trainer(student, teacher, tiny_dataset, tmp_path, steps=2)
    trainer.train()
    after = teacher.ranker.state_dict()
    assert all(torch.equal(before_teacher[k], after[k]) for k in before_teacher)
    assert not teacher.ranker.training
    assert any(not torch.equal(before_student[n], p) for n, p in student.named_parameters() if n in before_student)
    assert not any(n.startswith("teacher") for n in student.state_dict())  # not saved with the student


def test_a_tct_loss_without_a_teacher_is_refused(tiny_model_dir, tiny_dataset, tmp_path):
    student = _build("dense", tiny_model_dir)
    with pytest.raises(ValueError, match="distils a teacher"):
        _trainer(student, None, tiny_dataset, tmp_path)


def test_teacher_from_a_transformers_folder_is_built_as_colbert_and_frozen(tiny_model_dir):
    from ssft.teachers.in_loop import FrozenTeacher

    teacher = FrozenTeacher.load(str(tiny_model_dir), ModelConfig(max_length=48, query_max_length=12))
    assert teacher.ranker.architecture == "colbert" and teacher.ranker.spec["query_max_length"] == 12
    assert not any(p.requires_grad for p in teacher.ranker.parameters()) and not teacher.ranker.training


def test_bad_teachers_are_one_line_errors(tiny_model_dir, tmp_path):
    from ssft.teachers.in_loop import FrozenTeacher, check_teacher

    (tmp_path / "empty").mkdir()
    with pytest.raises(SsftError, match="neither a saved ssft model"):
        check_teacher(str(tmp_path / "empty"))
    cross = _build("cross", tiny_model_dir)
    cross.save(tmp_path / "cross")
    with pytest.raises(SsftError, match="must be a bi-encoder"):
        FrozenTeacher.load(str(tmp_path / "cross"))


# ---------------------------------------------------------------- recipes and end to end

def test_recipe_validation_of_tct_and_fusion(tiny_model_dir):
    base = {"model": {"architecture": "dense", "name": str(tiny_model_dir)}, "loss": {"name": "tct", "teacher": "x"}}
    recipe = recipe_from_dict({**base, "eval": {"fusion": "auto"}})
    assert recipe.loss.options["teacher"] == "x" and recipe.eval.fusion == "auto"
    with pytest.raises(SsftError, match="distils into a bi-encoder student"):
        recipe_from_dict({**base, "model": {"architecture": "cross"}})
    with pytest.raises(SsftError, match="negative_cache"):
        recipe_from_dict({**base, "callbacks": ["negative_cache"]})
    with pytest.raises(SsftError, match="loss.teacher: the tct loss needs a teacher"):
        recipe_from_dict({**base, "loss": {"name": "tct"}})
    with pytest.raises(SsftError, match="eval.fusion: dense-sparse fusion"):
        recipe_from_dict({"model": {"architecture": "colbert"}, "eval": {"fusion": 0.1}})
    with pytest.raises(SsftError, match="eval.fusion: 'auto' tunes"):
        recipe_from_dict({**base, "data": {"validation_split": None}, "eval": {"fusion": "auto"}})
    with pytest.raises(SsftError, match="eval.fusion: expected a number >= 0"):
        recipe_from_dict({**base, "eval": {"fusion": -1}})


def test_train_tct_end_to_end_with_fusion(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch):
    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "run" / "logs"))
    _build("colbert", tiny_model_dir).save(tmp_path / "colbert" / "model")
    out = tmp_path / "run"
    recipe = recipe_from_dict({
        "model": {"architecture": "dense", "name": str(tiny_model_dir), "max_length": 64},
        "adapter": {"method": "lora", "r": 4},
        "loss": {"name": "tct", "teacher": str(tmp_path / "colbert"), "gamma": 0.1, "temperature": 0.25},
        "data": {"dataset": str(tiny_dataset), "num_negatives": 1},
        "eval": {"depth": 5, "metrics": ["nDCG@10", "R@100"], "fusion": "auto"},
        "training": {"output_dir": str(out), "num_train_epochs": 1, "per_device_train_batch_size": 2, "use_cpu": True},
    }, "tct.yaml")
    results = run_recipe(recipe)
    assert set(results) == {"test", "bm25", "test+bm25.fusion", "start"}
    assert json.loads((out / "metrics.json").read_text()) == results
    info = json.loads((out / "run_info.json").read_text())
    assert info["fusion_alpha"] >= 0 and any("distillation (003 Eq. 6)" in n for n in info["notes"])
    assert (out / "run.test+bm25.fusion.trec").is_file()
    assert not (out / "model" / "teacher").exists()


def test_missing_teacher_fails_before_any_output(tiny_model_dir, tiny_dataset, tmp_path):
    from ssft.pipeline.run import run_recipe

    recipe = recipe_from_dict({
        "model": {"architecture": "dense", "name": str(tiny_model_dir), "max_length": 64},
        "loss": {"name": "tct", "teacher": str(tmp_path / "no-such-teacher")},
        "data": {"dataset": str(tiny_dataset)},
        "training": {"output_dir": str(tmp_path / "run")},
    }, "tct.yaml")
    with pytest.raises(SsftError, match="loss.teacher"):
        run_recipe(recipe)
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- fusion (Eq. 7)

def test_fusion_over_the_union_fills_missing_scores_with_the_list_minimum():
    from ssft.eval.fusion import fuse_dense_sparse

    dense = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}, "r": {"x": 1.0}}
    sparse = {"q": {"b": 10.0, "d": 8.0}}
    fused = fuse_dense_sparse(dense, sparse, 0.1)
    # a: 0.1*min_sp(8) + 3; b: 0.1*10 + 2; c: 0.1*8 + 1; d: 0.1*8 + min_ds(1)
    assert fused["q"] == pytest.approx({"a": 3.8, "b": 3.0, "c": 1.8, "d": 1.8})
    assert fused["r"] == {"x": 1.0}  # no sparse list for r: the dense order stays
    assert fuse_dense_sparse(dense, sparse, 0.0)["q"] == pytest.approx({"a": 3.0, "b": 2.0, "c": 1.0, "d": 1.0})
    with pytest.raises(ValueError):
        fuse_dense_sparse(dense, sparse, -0.1)


def test_fusion_weight_tuning_picks_the_smallest_best_alpha():
    from ssft.eval.fusion import tune_fusion_alpha

    dense = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    sparse = {"q": {"c": 10.0, "d": 4.0}}
    # c (relevant) reaches the top once 10*alpha + 1 > 4*alpha + 3, i.e. alpha > 1/3: 0.4 is the grid's first
    assert tune_fusion_alpha(dense, sparse, {"q": {"c": 1}}, "nDCG@10") == 0.4


def test_retrieve_cli_fusion(tiny_model_dir, tiny_dataset, tmp_path, capsys):
    from ssft.cli.retrieve import main as retrieve_main

    _build("dense", tiny_model_dir).save(tmp_path / "run" / "model")
    common = [str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--depth", "3"]
    assert retrieve_main(common + ["--output", str(tmp_path / "a"), "--fusion", "0.1"]) == 0
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert set(metrics) == {"test", "bm25", "test+bm25.fusion"}
    assert json.loads((tmp_path / "a" / "fusion.json").read_text())["fusion_alpha"] == 0.1
    assert (tmp_path / "a" / "run.test+bm25.fusion.trec").is_file()
    assert retrieve_main(common + ["--output", str(tmp_path / "b"), "--fusion", "auto", "--tune-split", "dev"]) == 0
    assert "fusion weight tuned on dev" in capsys.readouterr().out
    assert retrieve_main(common + ["--output", str(tmp_path / "c"), "--fusion", "auto"]) == 2
    assert "--tune-split" in capsys.readouterr().err
    assert retrieve_main(common + ["--output", str(tmp_path / "c"), "--fusion", "-1"]) == 2
    assert not (tmp_path / "c").exists()


# ---------------------------------------------------------------- 003's raw dot product and teacher initialisation


def test_raw_dot_products_reach_the_tct_loss_unbounded(tiny_model_dir, tiny_dataset, tmp_path):
    """003 Eq. 2/5: a student with model.normalize false and score_scale 1 hands the loss the raw dot products of its
    mean-pooled states (recomputed here from known vectors: the pooled states themselves), unbounded — where the
    normalised student's scores stay within +-score_scale."""
    teacher, _ = _teacher_and_student(tiny_model_dir, tmp_path)
    student = _build("dense", tiny_model_dir, normalize=False, score_scale=1.0)
    seen = []

    class Spy(TightlyCoupledDistillationLoss):
        def forward(self, s, t, positive, excluded=None):
            seen.append(s.detach().clone())
            return super().forward(s, t, positive, excluded)

    trainer, groups = _trainer(student, teacher, tiny_dataset, tmp_path, loss=Spy(teacher="tiny"))
    items = [groups[0], groups[1]]
    loss = trainer.compute_loss(student, dict(trainer.data_collator(items)))
    docs = list(dict.fromkeys(d for it in items for d in it["documents"]))
    with torch.no_grad():  # the known vectors: each text's pooled state, then their plain inner products
        q = torch.cat([student.encode_queries([it["query"]]).vectors for it in items])
        d = torch.cat([student.encode_documents([x]).vectors for x in docs])
    torch.testing.assert_close(seen[-1], q @ d.T, rtol=1e-5, atol=1e-4)
    assert float(seen[-1].abs().max()) > 1.0 and float(q.norm(dim=1).min()) > 1.5  # not unit vectors, not a cosine
    assert torch.isfinite(loss)


def test_student_initialised_from_the_teacher_equals_it_before_training(tiny_model_dir, tmp_path):
    """003 §4: loss.init_from_teacher copies the teacher's trained transformer into the student. With a dense teacher
    of the student's own kind (raw dot product, mean pooling) the two score every pair identically before training;
    from a ColBERT teacher the backbone is the teacher's and the ColBERT projection is left out."""
    from ssft.teachers.in_loop import FrozenTeacher

    torch.manual_seed(1)
    trained = _build("dense", tiny_model_dir, normalize=False, score_scale=1.0)
    with torch.no_grad():  # "trained": moved away from the student's starting weights
        for p in trained.parameters():
            p.add_(0.05 * torch.randn_like(p))
    teacher = FrozenTeacher(trained, "dense-teacher")
    student = _build("dense", tiny_model_dir, normalize=False, score_scale=1.0)
    queries, docs = ["vitamin d bones", "fish oil"], ["vitamin d and bone health", "omega three fatty acids", "coffee"]
    with torch.no_grad():
        before = student(**student.tokenize(queries, docs), all_pairs=True)
        wanted = trained(**trained.tokenize(queries, docs), all_pairs=True)
    assert not torch.allclose(before, wanted, atol=1e-3)
    assert teacher.initialise_student(student) > 0
    with torch.no_grad():
        torch.testing.assert_close(student(**student.tokenize(queries, docs), all_pairs=True), wanted)

    colbert = _build("colbert", tiny_model_dir)
    with torch.no_grad():
        for p in colbert.backbone.parameters():
            p.add_(0.05 * torch.randn_like(p))
    lora_student = _build("dense", tiny_model_dir, "lora", {"r": 2}, normalize=False, score_scale=1.0)
    FrozenTeacher(colbert, "colbert").initialise_student(lora_student)
    source = colbert.backbone.base_model.state_dict()
    for key, value in lora_student.backbone.base_model.state_dict().items():
        if ".lora_" not in key:
            assert torch.equal(value, source[key.replace(".base_layer.", ".")]), key


def test_init_from_teacher_refuses_another_transformer(tiny_model_dir, tmp_path):
    from ssft.teachers.in_loop import FrozenTeacher
    from tests.helpers import save_tiny_bert

    other = save_tiny_bert(tmp_path / "wide", hidden_size=48, layers=2, seed=3)
    teacher = FrozenTeacher(_build("colbert", other), "wide")
    with pytest.raises(SsftError, match="loss.init_from_teacher: the teacher wide .* is not the student's transformer"):
        teacher.initialise_student(_build("dense", tiny_model_dir))


def test_tct_recipe_uses_the_paper_s_dot_product_and_teacher_initialisation():
    from pathlib import Path

    from ssft.config.recipe import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "tct_nfcorpus.yaml")
    c = recipe.model.config
    assert c.normalize is False and c.score_scale == 1.0 and c.pooling == "mean"
    assert recipe.loss.config.init_from_teacher is True
