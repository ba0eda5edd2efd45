"""004's CE → DE parts (EmbedDistill §4.2, §4.3, §5.3, App. B, App. E): the dual-pooled cross-encoder trained with the
token reconstruction loss, the empty-query document embeddings an asymmetric student inherits from it, and query
generation with masking and Gaussian noise — all on tiny random models built in code (no generator weights are
available offline here)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ssft.config.recipe import ModelConfig, recipe_from_dict
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from tests.helpers import save_tiny_bert

QUERIES = ["vitamin d bones", "statins cholesterol", "fish oil"]
DOCUMENTS = ["vitamin d and bone health in adults", "statin drugs lower cholesterol", "omega three fatty acids in fish oil"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("ce-bert"), hidden_size=32, layers=2, seed=5)


def tokenizer():
    from transformers import AutoTokenizer

    from ssft.core.hub import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("sentence-transformers/all-MiniLM-L6-v2"))


def tiny_bart(init_std: float = 0.02, seed: int = 0):
    """A tiny random BART on the MiniLM (BERT) vocabulary: [CLS] starts, [SEP] ends, [MASK] masks."""
    from transformers import BartConfig, BartForConditionalGeneration

    tok = tokenizer()
    torch.manual_seed(seed)
    config = BartConfig(vocab_size=tok.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                        max_position_embeddings=64, pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id,
                        eos_token_id=tok.sep_token_id, decoder_start_token_id=tok.sep_token_id, forced_eos_token_id=None,
                        init_std=init_std)
    return BartForConditionalGeneration(config).eval(), tok


def cross(name, head="dual_pooled", pooling="cls_sep"):
    cfg = ModelConfig(architecture="cross", name=str(name), max_length=64, head=head, dual_pooling=pooling)
    torch.manual_seed(0)
    return MODELS.get("cross").build(cfg, "full", {})


# ---------------------------------------------------------------- the token reconstruction loss (004 §4.2)


def test_reconstruction_loss_by_hand():
    from ssft.losses.token_reconstruction import TokenReconstructionLoss, reconstruction_positions

    # [CLS]=1 a=3 [SEP]=2 b=4 [SEP]=2 [PAD]=0 over a 5-token vocabulary; states (x, y), head = fixed (5, 2) matrix
    ids = torch.tensor([[1, 3, 2, 4, 2, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    hidden = torch.tensor([[[9.0, 9.0], [1.0, 0.0], [9.0, 9.0], [0.0, 2.0], [9.0, 9.0], [5.0, 5.0]]])
    table = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert reconstruction_positions(ids, mask, {0, 1, 2}).tolist() == [[False, True, False, True, False, False]]
    loss = TokenReconstructionLoss()(hidden, ids, mask, lambda h: h @ table.T, {0, 1, 2})
    # token a: logits (0, 0, 0, 1, 0) -> -log(e / (4 + e)); token b: logits (0, 0, 0, 0, 2) -> -log(e^2 / (4 + e^2))
    expected = (-math.log(math.e / (4 + math.e)) - math.log(math.e ** 2 / (4 + math.e ** 2))) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(TokenReconstructionLoss()(hidden, ids, torch.zeros_like(mask), lambda h: h @ table.T, {0, 1, 2})) == 0.0


def test_reconstruction_is_off_by_default_and_recorded_only_when_on(bert_dir, tmp_path):
    from ssft.losses import ListwiseSoftmaxCELoss
    from ssft.training.objectives import RankingObjective, TokenReconstructionObjective, objective_for

    recipe = recipe_from_dict({"model": {"architecture": "cross", "head": "dual_pooled"}, "loss": "listwise_ce"}, "r.yaml")
    assert recipe.loss.reconstruction_weight == 0.0 and "reconstruction_weight" not in recipe.to_dict()["loss"]
    assert type(objective_for(ListwiseSoftmaxCELoss(), None, recipe.loss.reconstruction_weight)) is RankingObjective
    on = recipe_from_dict({"model": {"architecture": "cross", "head": "dual_pooled", "dual_pooling": "segment_mean"},
                           "loss": {"name": "listwise_ce", "reconstruction_weight": 0.5}}, "r.yaml")
    assert on.loss.reconstruction_weight == 0.5 and on.loss.options == {}
    assert on.to_dict()["loss"] == {"name": "listwise_ce", "reconstruction_weight": 0.5}
    assert recipe_from_dict(on.to_dict(), "again.yaml").loss.reconstruction_weight == 0.5
    assert isinstance(objective_for(ListwiseSoftmaxCELoss(), None, 0.5), TokenReconstructionObjective)


def test_dual_pooled_cross_scores_by_the_inner_product_of_its_proxies(bert_dir):
    from ssft.models.dual_pooling import dual_pool

    for pooling in ("cls_sep", "segment_mean"):
        ranker = cross(bert_dir, pooling=pooling).eval()
        batch = ranker.tokenize(QUERIES, DOCUMENTS)
        with torch.no_grad():
            scores = ranker(**batch)
            hidden = ranker.backbone.base_model(**batch).last_hidden_state
        q, d = dual_pool(hidden, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                         set(ranker.tokenizer.all_special_ids), ranker.tokenizer.sep_token_id, pooling)
        torch.testing.assert_close(scores, (q * d).sum(-1))
    assert ranker.ranks_untrained and ranker.head is None and ranker.reconstruction is not None
    assert "dual_pooled" in ranker.export_refusal() and "ssft-rerank" in ranker.export_refusal()


def test_reconstruction_gradients_flow_into_the_backbone(bert_dir):
    from ssft.data.examples import RankerCollator
    from ssft.losses import ListwiseSoftmaxCELoss
    from ssft.training.objectives import RankingObjective, TokenReconstructionObjective

    ranker = cross(bert_dir).train()
    items = [{"query": QUERIES[0], "documents": DOCUMENTS[:2]}, {"query": QUERIES[1], "documents": DOCUMENTS[1:]}]
    batch = RankerCollator(ranker)(items)
    objective = TokenReconstructionObjective(RankingObjective(ListwiseSoftmaxCELoss()), weight=1.0)
    loss, scores = objective.compute(ranker, ranker, dict(batch))
    assert scores.shape == (2, 2) and set(objective.last_parts) == {"ranking", "reconstruction"}
    # the vocabulary is ~30k tokens: a random head starts near log(vocabulary)
    assert objective.last_parts["reconstruction"] == pytest.approx(math.log(ranker.tokenizer.vocab_size), rel=0.2)
    assert float(loss.detach()) == pytest.approx(sum(objective.last_parts.values()), rel=1e-5)
    # the reconstruction term alone reaches the backbone (its first layer, and the tied input embeddings) and its head
    ranker.zero_grad()
    with ranker.keeping_token_states() as kept:
        ranker(**{k: v for k, v in batch.items() if k != "group_size"})
    objective.loss(kept.hidden, kept.input_ids, kept.attention_mask, ranker.reconstruction_logits,
                   ranker.special_ids).backward()
    base = ranker.backbone.base_model
    assert float(base.encoder.layer[0].attention.self.query.weight.grad.abs().sum()) > 0
    assert float(base.get_input_embeddings().weight.grad.abs().sum()) > 0
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in ranker.reconstruction.parameters())
    with pytest.raises(SsftError, match="needs model.head: dual_pooled"):
        with cross(bert_dir, head="classifier").keeping_token_states():
            pass



def test_score_distillation_from_another_cross_encoders_scores_takes_the_reconstruction_term_too(bert_dir):
    """004 converts a [CLS] cross-encoder by score distillation: the scored form of data.train (teacher_scores)
    with margin_mse / listwise_kl, plus the reconstruction term on the same forward."""
    from ssft.data.examples import RankerCollator
    from ssft.losses import ListwiseKLLoss
    from ssft.training.objectives import PrecomputedDistillationObjective, TokenReconstructionObjective, objective_for

    ranker = cross(bert_dir).eval()
    items = [{"query": QUERIES[0], "documents": DOCUMENTS[:2], "teacher_scores": [3.0, -1.0]},
             {"query": QUERIES[1], "documents": DOCUMENTS[1:], "teacher_scores": [2.0, 0.5]}]
    objective = objective_for(ListwiseKLLoss(), None, 0.25)
    assert isinstance(objective, TokenReconstructionObjective)
    assert isinstance(objective.inner, PrecomputedDistillationObjective)
    batch = RankerCollator(ranker)(items)
    loss, scores = objective.compute(ranker, ranker, dict(batch))
    plain, plain_scores = PrecomputedDistillationObjective(ListwiseKLLoss()).compute(ranker, ranker, dict(batch))
    torch.testing.assert_close(scores, plain_scores)  # the + 0 x term leaves the scores as they are
    assert float(loss.detach()) == pytest.approx(float(plain) + 0.25 * objective.last_parts["reconstruction"], rel=1e-5)


def test_a_lora_dual_pooled_cross_encoder_trains_its_adapter_and_reconstruction_head(bert_dir):
    from ssft.data.examples import RankerCollator
    from ssft.losses import ListwiseSoftmaxCELoss
    from ssft.training.objectives import RankingObjective, TokenReconstructionObjective

    cfg = ModelConfig(architecture="cross", name=str(bert_dir), max_length=64, head="dual_pooled")
    torch.manual_seed(0)
    ranker = MODELS.get("cross").build(cfg, "lora", {"r": 2, "alpha": 4}).train()
    batch = RankerCollator(ranker)([{"query": QUERIES[0], "documents": DOCUMENTS[:2]}])
    loss, _ = TokenReconstructionObjective(RankingObjective(ListwiseSoftmaxCELoss()), 0.5).compute(ranker, ranker, batch)
    loss.backward()
    lora = [p for n, p in ranker.named_parameters() if "lora_" in n]
    assert lora and all(p.grad is not None for p in lora)
    assert all(p.grad is not None for p in ranker.reconstruction.parameters())
    assert not ranker.backbone.base_model.get_input_embeddings().weight.requires_grad  # the tied decoder stays frozen


def test_the_reconstruction_head_takes_a_checkpoints_mlm_head(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    tok = tokenizer()
    torch.manual_seed(1)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128)
    mlm = BertForMaskedLM(config)
    with torch.no_grad():
        mlm.cls.predictions.bias.normal_()
    mlm.save_pretrained(tmp_path / "mlm")
    tok.save_pretrained(tmp_path / "mlm")
    ranker = cross(tmp_path / "mlm")
    torch.testing.assert_close(ranker.reconstruction.bias, mlm.cls.predictions.bias)
    torch.testing.assert_close(ranker.reconstruction.transform.weight, mlm.cls.predictions.transform.dense.weight)
    # the tied decoder: logits of a state are the MLM model's own
    states = torch.randn(3, 32)
    with torch.no_grad():
        expected = mlm.cls(states)
        got = ranker.reconstruction_logits(states)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def _cross_recipe(bert_dir, dataset, out, **extra):
    raw = {
        "model": {"architecture": "cross", "name": str(bert_dir), "max_length": 64, "head": "dual_pooled",
                  "dual_pooling": "segment_mean"},
        "loss": {"name": "listwise_ce", "reconstruction_weight": 0.5},
        "data": {"dataset": str(dataset), "validation_split": None, "num_negatives": 2, "negatives": "random"},
        "eval": {"depth": 5, "metrics": ["nDCG@10"]},
        "training": {"output_dir": str(out), "max_steps": 4, "per_device_train_batch_size": 2, "use_cpu": True,
                     "learning_rate": 1e-3, "lr_scheduler_type": "constant", "report_to": []},
    }
    for key, value in extra.items():
        raw[key] = {**raw.get(key, {}), **value}
    return recipe_from_dict(raw, "ce.yaml")


@pytest.fixture
def trained_ce(bert_dir, tiny_dataset, tmp_path, monkeypatch) -> Path:
    """A dual-pooled cross-encoder trained a few steps with the reconstruction loss (ssft-train's own path)."""
    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "logs"))
    out = tmp_path / "ce"
    results = run_recipe(_cross_recipe(bert_dir, tiny_dataset, out))
    assert set(results) == {"test", "bm25", "start"}  # it ranks untrained: the start is scored too
    return out


def test_a_dual_pooled_cross_encoder_trains_and_is_then_a_teacher(trained_ce, bert_dir, tiny_dataset, tmp_path):
    from ssft.models import load_ranker
    from ssft.models.interop.export import export_refusal
    from ssft.pipeline.run import run_recipe
    from ssft.teachers.cross import load_cross_teacher

    info = json.loads((trained_ce / "run_info.json").read_text())
    assert info["train_loss"] > 0 and any("token reconstruction loss (004 §4.2), weight 0.5" in n for n in info["notes"])
    loaded = load_ranker(trained_ce / "model")
    assert loaded.head_kind == "dual_pooled" and loaded.dual_pooling == "segment_mean"
    start = load_ranker(trained_ce / "model")  # the saved weights moved off the pretrained ones
    fresh = cross(bert_dir, pooling="segment_mean")
    assert not torch.equal(start.backbone.base_model.encoder.layer[0].attention.self.query.weight,
                           fresh.backbone.base_model.encoder.layer[0].attention.self.query.weight)
    assert "ssft-rerank" in export_refusal(loaded)
    # the run folder is a teacher of teacher_kind cross_dual_pooled, trained with its own pooling only
    teacher = load_cross_teacher(str(trained_ce), "segment_mean", 64)
    assert teacher.score_scale == 1.0 and not teacher.normalize  # 004 App. B: the inner product of the proxies
    tok = teacher.tokenizer(QUERIES[:1], DOCUMENTS[:1], return_tensors="pt", return_token_type_ids=True)
    q, d = teacher.pairs(tok["input_ids"], tok["attention_mask"], tok["token_type_ids"])
    with torch.no_grad():
        torch.testing.assert_close((q * d).sum(-1), loaded(**loaded.tokenize(QUERIES[:1], DOCUMENTS[:1])))
    with pytest.raises(SsftError, match="trained with model.dual_pooling segment_mean.*did you mean teacher_pooling"):
        load_cross_teacher(str(trained_ce), "cls_sep", 64)
    # CE -> DE: an asymmetric student inheriting the trained CE's empty-query document embeddings (004 §5.3)
    out = tmp_path / "student"
    student = recipe_from_dict({
        "model": {"architecture": "dense", "name": str(bert_dir), "max_length": 64, "query_max_length": 16,
                  "query_layers": [0], "normalize": False, "score_scale": 1.0},
        "loss": {"name": "contrastive"},
        "data": {"dataset": str(tiny_dataset), "validation_split": None, "num_negatives": 1},
        "eval": {"depth": 5, "metrics": ["nDCG@10"]},
        "distillation": {"teacher": str(trained_ce), "teacher_kind": "cross_dual_pooled", "teacher_pooling": "segment_mean",
                         "inherit_documents": True},
        "training": {"output_dir": str(out), "max_steps": 3, "per_device_train_batch_size": 2, "use_cpu": True,
                     "learning_rate": 1e-3, "report_to": []},
    }, "student.yaml")
    assert set(run_recipe(student)) == {"test", "bm25", "start"}
    served = load_ranker(out / "model")
    assert served.document_teacher is not None and served.spec["document_encoder"]["kind"] == "cross_dual_pooled"
    assert "inherited from a cross-encoder" in export_refusal(served) and "ssft-retrieve" in export_refusal(served)
    expected = teacher.inheritable_documents().documents(**served.tokenize_documents(DOCUMENTS[:2]))
    with torch.no_grad():
        torch.testing.assert_close(served.encode_documents(DOCUMENTS[:2]).vectors, expected)


# ---------------------------------------------------------------- inheriting the CE's empty-query documents (004 §5.3)


@pytest.mark.parametrize("pooling", ["cls_sep", "segment_mean"])
def test_the_inherited_document_vector_is_the_teachers_empty_query_proxy(bert_dir, pooling):
    from ssft.teachers.cross import load_cross_teacher

    teacher = load_cross_teacher(str(bert_dir), pooling, 64)
    student = MODELS.get("dense").build(ModelConfig(architecture="dense", name=str(bert_dir), max_length=64,
                                                    query_max_length=16, normalize=False, score_scale=1.0), "full", {})
    student.inherit_documents(teacher.inheritable_documents())
    with torch.no_grad():
        got = student.encode_documents(DOCUMENTS).vectors
        for i, text in enumerate(DOCUMENTS):  # by hand: [CLS] [SEP] d [SEP], the pair ("", d)
            tok = teacher.tokenizer("", text, return_tensors="pt", return_token_type_ids=True)
            assert tok["input_ids"][0, :2].tolist() == [teacher.tokenizer.cls_token_id, teacher.tokenizer.sep_token_id]
            hidden = teacher.model(**tok).last_hidden_state[0]
            if pooling == "cls_sep":
                proxy = hidden[1]  # the [SEP] closing the (empty) query, App. B Eq. 14
            else:  # Eq. 15: the document tokens, each weighted 1/sqrt(their number)
                n = len(teacher.tokenizer(text, add_special_tokens=False)["input_ids"])
                proxy = hidden[2 : 2 + n].sum(0) / math.sqrt(n)
            torch.testing.assert_close(got[i], proxy, atol=1e-5, rtol=1e-4)
    assert student.spec["document_encoder"] == teacher.reference and teacher.reference["kind"] == "cross_dual_pooled"
    # normalised proxies when the teacher scores 20 x cosine
    cosine = load_cross_teacher(str(bert_dir), pooling, 64, normalize=True).inheritable_documents()
    vectors = cosine.documents(**cosine.model.tokenize_documents(DOCUMENTS))
    torch.testing.assert_close(vectors, torch.nn.functional.normalize(got, dim=-1), atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- query generation (004 §4.3, App. E)


def test_masking_replaces_about_p_of_the_ordinary_tokens_only():
    from ssft.data.query_generation import mask_tokens

    ids = torch.randint(5, 1000, (200, 52))
    ids[:, 0], ids[:, 50], ids[:, 51] = 1, 2, 0  # [CLS] ... [SEP] [PAD]
    mask = torch.ones_like(ids)
    mask[:, 51] = 0
    masked = mask_tokens(ids, mask, {0, 1, 2}, 4, 0.1, torch.Generator().manual_seed(0))
    changed = masked != ids
    assert (masked[changed] == 4).all()
    assert not changed[:, [0, 50, 51]].any()  # special tokens and padding are never masked
    assert 0.09 < changed[:, 1:50].float().mean().item() < 0.11  # 9,800 draws at p = 0.1
    again = mask_tokens(ids, mask, {0, 1, 2}, 4, 0.1, torch.Generator().manual_seed(0))
    assert torch.equal(masked, again)
    assert torch.equal(mask_tokens(ids, mask, {0, 1, 2}, 4, 0.0, torch.Generator().manual_seed(0)), ids)


def test_generation_is_seeded_and_without_noise_or_masks_is_plain_greedy_decoding():
    from ssft.data.query_generation import generate_queries

    model, tok = tiny_bart(init_std=0.5)
    out = generate_queries(model, tok, QUERIES, per_query=2, sigma=0.2, mask_probability=0.1, max_length=8, seed=3)
    assert len(out) == len(QUERIES) and all(len(g) == 2 for g in out)
    assert out == generate_queries(model, tok, QUERIES, per_query=2, sigma=0.2, mask_probability=0.1, max_length=8, seed=3)
    assert out != generate_queries(model, tok, QUERIES, per_query=2, sigma=0.2, mask_probability=0.1, max_length=8, seed=4)
    plain = generate_queries(model, tok, QUERIES, per_query=2, sigma=0.0, mask_probability=0.0, max_length=8)
    tokens = tok(QUERIES, padding=True, truncation=True, max_length=8, return_tensors="pt")
    greedy = model.generate(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"], max_new_tokens=8,
                            num_beams=1, do_sample=False)
    assert plain == [[text.strip()] * 2 for text in tok.batch_decode(greedy, skip_special_tokens=True)]
    assert out != plain  # the noise and the masks move the decoding off the plain one
    sampled = generate_queries(model, tok, QUERIES, per_query=2, max_length=8, decoding="sample", seed=1)
    state = torch.get_rng_state()
    assert sampled == generate_queries(model, tok, QUERIES, per_query=2, max_length=8, decoding="sample", seed=1)
    assert torch.equal(state, torch.get_rng_state())  # the global generator is left as it was
    assert not model.training


def test_generation_refuses_a_model_that_is_not_seq2seq(bert_dir, tmp_path):
    from transformers import AutoModel

    from ssft.data.query_generation import generate_queries, load_generator

    bert = AutoModel.from_pretrained(bert_dir)
    with pytest.raises(SsftError, match=r"^distillation.generated_queries.model: .* not an encoder-decoder \(seq2seq\)"):
        generate_queries(bert, tokenizer(), QUERIES, name=str(bert_dir))
    with pytest.raises(SsftError, match=r"'bert' model, not an encoder-decoder") as err:
        load_generator(str(bert_dir))
    assert "\n" not in str(err.value)
    model, tok = tiny_bart()
    tok.mask_token = None
    with pytest.raises(SsftError, match="no mask token; set it to 0"):
        generate_queries(model, tok, QUERIES)


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory) -> Path:
    model, tok = tiny_bart(init_std=0.5)
    path = tmp_path_factory.mktemp("bart")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.mark.parametrize("kind,pooling", [("dense", "mean"), ("cross_dual_pooled", "cls_sep")])
def test_generated_queries_feed_only_the_query_embedding_matching(bert_dir, kind, pooling):
    from ssft.config.recipe import DistillationConfig, GeneratedQueriesConfig
    from ssft.losses import ContrastiveLoss
    from ssft.teachers.cross import load_cross_teacher
    from ssft.teachers.dense import load_teacher, teacher_reference
    from ssft.training.distillation import DistillationObjective

    teacher = (load_teacher(teacher_reference(str(bert_dir), "mean", 64, 16)) if kind == "dense"
               else load_cross_teacher(str(bert_dir), pooling, 64))
    student = MODELS.get("dense").build(ModelConfig(architecture="dense", name=str(bert_dir), max_length=64,
                                                    query_max_length=16, query_layers=[0]), "full", {}).eval()
    generated = {QUERIES[0]: ["vitamin bones", "vitamin d"], QUERIES[1]: ["statins"]}
    cfg = DistillationConfig(teacher=str(bert_dir), teacher_kind=kind, teacher_pooling=pooling,
                             generated_queries=GeneratedQueriesConfig(model="x", weight=2.0))
    objective = DistillationObjective(teacher, cfg, ContrastiveLoss(), generated)
    items = [{"query": QUERIES[0], "documents": DOCUMENTS[:2]}, {"query": QUERIES[1], "documents": DOCUMENTS[1:]}]
    batch = objective.collator(student)(items)
    assert batch["g_input_ids"].shape[0] == 3
    loss = objective(student, batch)
    assert "generated_query_embedding" in objective.last_parts
    assert float(loss.detach()) == pytest.approx(sum(objective.last_parts.values()), rel=1e-5)
    # by hand: 2 x Eq. 7 between the student's generated-query vectors and the teacher's
    with torch.no_grad():
        s_g = student.encode_tokens(batch["g_input_ids"], batch["g_attention_mask"], "query").vectors
        if kind == "dense":
            t_g = teacher.queries(batch["t_g_input_ids"], batch["t_g_attention_mask"])
        else:  # each generated query with every document of its source item: 2 x 2 + 1 x 2 pairs
            assert batch["g_pair_index"].tolist() == [0, 0, 1, 1, 2, 2]
            t_g = teacher.pairs(batch["t_gp_input_ids"], batch["t_gp_attention_mask"], batch["t_gp_token_type_ids"])[0]
            s_g = s_g[batch["g_pair_index"]]
    assert objective.last_parts["generated_query_embedding"] == pytest.approx(
        2.0 * float((s_g - t_g).norm(dim=-1).mean()), rel=1e-4)
    # without generated queries nothing changes
    plain = DistillationObjective(teacher, cfg, ContrastiveLoss())
    plain(student, plain.collator(student)(items))
    assert "generated_query_embedding" not in plain.last_parts


def test_a_run_generates_its_queries_once_and_keeps_them(bart_dir, bert_dir, tiny_dataset, tmp_path, monkeypatch):
    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "logs"))
    out = tmp_path / "run"
    raw = {
        "model": {"architecture": "dense", "name": str(bert_dir), "max_length": 64, "query_max_length": 16,
                  "query_layers": [0]},
        "loss": {"name": "contrastive"},
        "data": {"dataset": str(tiny_dataset), "validation_split": None, "num_negatives": 1},
        "eval": {"depth": 5, "metrics": ["nDCG@10"]},
        "distillation": {"teacher": str(bert_dir), "inherit_documents": True,
                         "generated_queries": {"model": str(bart_dir), "per_query": 2, "sigma": 0.2, "max_length": 6}},
        "training": {"output_dir": str(out), "max_steps": 2, "per_device_train_batch_size": 2, "use_cpu": True,
                     "report_to": []},
    }
    run_recipe(recipe_from_dict(raw, "gen.yaml"))
    rows = [json.loads(line) for line in (out / "generated_queries.jsonl").read_text().splitlines()]
    train_queries = {"vitamin d bones", "cholesterol statins", "fish oil omega", "sugar diabetes"}
    assert {r["query"] for r in rows} == train_queries and all(1 <= len(r["generated"]) <= 2 for r in rows)
    from ssft.data.query_generation import generate_queries, load_generator

    model, tok = load_generator(str(bart_dir))
    again = generate_queries(model, tok, [r["query"] for r in rows], 2, 0.2, 0.1, 6, batch_size=64)
    assert [r["generated"] for r in rows] == [list(dict.fromkeys(g)) for g in again]  # seeded: the same queries
    info = json.loads((out / "run_info.json").read_text())
    assert info["train_loss"] > 0 and any(n.startswith("generated queries (004 App. E)") for n in info["notes"])


# ---------------------------------------------------------------- bad input: one line naming the key


@pytest.mark.parametrize("raw,match", [
    ({"model": {"architecture": "dense"}, "loss": {"name": "contrastive", "reconstruction_weight": 0.1}},
     r"loss.reconstruction_weight: the token reconstruction loss \(004 §4.2\) trains a model.architecture 'cross' "
     r"with model.head 'dual_pooled', not 'dense'"),
    ({"model": {"architecture": "cross"}, "loss": {"name": "bce", "reconstruction_weight": 0.1}},
     "not 'cross' with head 'classifier'"),
    ({"model": {"architecture": "cross", "head": "dual_pooled"}, "loss": {"name": "bce", "reconstruction_weight": -1}},
     "loss.reconstruction_weight: must be >= 0"),
    ({"model": {"architecture": "cross", "head": "dual_pooled"}, "loss": {"name": "bce", "reconstruction_weight": "lots"}},
     "loss.reconstruction_weight"),
    ({"model": {"architecture": "cross", "head": "dual_pooled", "dual_pooling": "max"}},
     "model.dual_pooling: expected cls_sep or segment_mean"),
    ({"model": {"architecture": "cross", "dual_pooling": "segment_mean"}},
     "model.dual_pooling: only with model.head: dual_pooled"),
    ({"model": {"architecture": "cross", "head": "dual"}}, "model.head: expected one of classifier, cls_linear, dual_pooled"),
    ({"model": {"architecture": "dense"}, "distillation": {"teacher": "x", "generated_queries": {"model": "b", "per_query": 0}}},
     "distillation.generated_queries.per_query: must be >= 1"),
    ({"model": {"architecture": "dense"}, "distillation": {"teacher": "x", "generated_queries": {"model": "b", "sigma": -0.1}}},
     "distillation.generated_queries.sigma: must be >= 0"),
    ({"model": {"architecture": "dense"}, "distillation": {"teacher": "x", "generated_queries": {"model": "b",
                                                                                                "mask_probability": 1}}},
     r"distillation.generated_queries.mask_probability: must be in \[0, 1\)"),
    ({"model": {"architecture": "dense"}, "distillation": {"teacher": "x", "generated_queries": {"model": "b",
                                                                                                "decoding": "sampl"}}},
     "decoding: expected 'greedy' or 'sample', got 'sampl' .*did you mean 'sample'"),
    ({"model": {"architecture": "dense"}, "distillation": {"teacher": "x", "generated_queries": {"model": "b", "sigmа": 1}}},
     r"distillation.generated_queries: unknown key 'sigmа'"),
    ({"model": {"architecture": "dense"}, "distillation": {"teacher": "x", "generated_queries": {"per_query": 2}}},
     "distillation.generated_queries.model: name the seq2seq generator"),
    ({"model": {"architecture": "dense"}, "distillation": {"teacher": "x", "generated_queries": "bart"}},
     "distillation.generated_queries: expected a mapping"),
    ({"model": {"architecture": "dense"}, "distillation": {"teacher": "x", "generated_queries": {"model": "b", "weight": 0}}},
     "distillation.generated_queries.weight: must be > 0"),
])
def test_bad_values_of_the_new_keys_are_one_line_errors(raw, match):
    with pytest.raises(SsftError, match=match) as err:
        recipe_from_dict(raw, "r.yaml")
    assert str(err.value).startswith("r.yaml: ") and "\n" not in str(err.value)


def test_the_inherited_documents_follow_the_teachers_precision(bert_dir):
    from ssft.core.precision import model_precision
    from ssft.teachers.cross import load_cross_teacher

    teacher = load_cross_teacher(str(bert_dir), "cls_sep", 64).set_precision("int8")
    documents = teacher.inheritable_documents()
    assert model_precision(documents.model) == "int8" and documents.model.backbone.base_model is teacher.model
    vectors = documents.documents(**documents.model.tokenize_documents(DOCUMENTS))
    fp32 = load_cross_teacher(str(bert_dir), "cls_sep", 64).inheritable_documents()
    reference = fp32.documents(**fp32.model.tokenize_documents(DOCUMENTS))
    assert vectors.shape == reference.shape and not torch.equal(vectors, reference)
    torch.testing.assert_close(vectors, reference, atol=0.5, rtol=0.2)  # int8: close, not equal


# ---------------------------------------------------------------- several processes


DDP_ITEMS = [{"query": QUERIES[i % 3], "documents": [DOCUMENTS[i % 3], DOCUMENTS[(i + 1) % 3]]} for i in range(4)]


def _reconstruction_grads(model_dir: str, items: list[dict], wrap=None):
    from ssft.data.examples import RankerCollator
    from ssft.losses import ListwiseSoftmaxCELoss
    from ssft.training.objectives import RankingObjective, TokenReconstructionObjective

    torch.manual_seed(0)
    ranker = MODELS.get("cross").build(ModelConfig(architecture="cross", name=model_dir, max_length=48,
                                                   head="dual_pooled"), "full", {}).eval()
    model = wrap(ranker) if wrap else ranker
    loss, _ = TokenReconstructionObjective(RankingObjective(ListwiseSoftmaxCELoss()), 0.5).compute(
        model, ranker, RankerCollator(ranker)(items))
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in ranker.named_parameters() if p.grad is not None}


def _ddp_worker(rank: int, world: int, init_file: str, model_dir: str, out_file: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:  # find_unused_parameters=True: what transformers' Trainer gives a model that is not a PreTrainedModel
        grads = _reconstruction_grads(model_dir, DDP_ITEMS[2 * rank : 2 * rank + 2],
                                      wrap=lambda r: DistributedDataParallel(r, find_unused_parameters=True))
        if rank == 0:
            torch.save(grads, out_file)
    finally:
        dist.destroy_process_group()


def test_the_reconstruction_term_trains_under_ddp(bert_dir, tmp_path, monkeypatch):
    """The reconstruction head is used inside the forward DDP wraps (a head used outside it is 'marked ready twice'
    under find_unused_parameters): two processes give the mean of their single-process gradients."""
    import torch.multiprocessing as mp

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out_file = tmp_path / "ddp.pt"
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), str(bert_dir), str(out_file)), nprocs=2, join=True)
    ddp = torch.load(out_file)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers: another thread count sums the embedding gradient in another order
    try:
        parts = [_reconstruction_grads(str(bert_dir), DDP_ITEMS[2 * r : 2 * r + 2]) for r in range(2)]
    finally:
        torch.set_num_threads(threads)
    assert set(ddp) == set(parts[0]) and any(n.startswith("reconstruction.") for n in ddp)
    for name, grad in ddp.items():
        torch.testing.assert_close(grad, (parts[0][name] + parts[1][name]) / 2, rtol=1e-4, atol=1e-6, msg=name)
