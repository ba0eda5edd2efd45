"""TwinBERT and ColBERT on a tiny random BERT: encode path, scorers, trainer wiring, every adapter method."""
import json
import re

import pytest
import torch
import torch.nn.functional as F
from transformers import TrainingArguments

from ssft.config.recipe import ModelConfig
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset, RankerCollator, TrainingGroups, build_examples
from ssft.losses import PairwiseSoftmaxLoss
from ssft.models import load_ranker
from ssft.models.bi import Encoded, score_run
from ssft.models.colbert import ColBert, maxsim
from ssft.models.twin import TwinBert
from ssft.training.trainer import RankingTrainer
from tests.helpers import assert_save_load_round_trip

QUERIES = ["vitamin d", "statins and cholesterol", "fish oil", "coffee"]
DOCS = ["bone health, and vitamin d in adults.", "statins lower ldl", "omega three fatty acids", "liver disease"]
METHODS = ["full", "lora", "lora++", "prefix", "prompt", "hidden_prefix"]
ARCHITECTURES = {"twin": TwinBert, "colbert": ColBert}

# trainable inside the backbone for each method (the ranker modules outside it always train)
BACKBONE_TRAINABLE = {
    "full": r"backbone\.model\.(embeddings|encoder)\..*",
    "lora": r"backbone\.model\.base_model\.model\.encoder\.layer\.\d\.attention\.self\.(query|value)\.lora_[AB]\.default\.weight",
    "lora++": (r"backbone\.model\.base_model\.model\.encoder\.layer\.\d\.attention\."
               r"(self\.(query|value)|output\.dense)\.lora_[AB]\.default\.weight"),
    "prefix": r"backbone\.model\.prompt_encoder\.default\.embedding\.weight",
    "prompt": r"backbone\.model\.prompt_encoder\.default\.embedding\.weight",
    "hidden_prefix": r"backbone\.hidden_prefix\.(source|mlps\.\d\.[02]\.(weight|bias))",
}


def build(tiny_model_dir, architecture="twin", method="full", options=None, **model):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture=architecture, name=str(tiny_model_dir), max_length=48, query_max_length=16, **model)
    return ARCHITECTURES[architecture].build(cfg, method, options or {})


# ---------------------------------------------------------------- ColBERT specifics


def test_maxsim_hand_computed():
    q = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]])
    d = torch.tensor([[[0.8, 0.6], [0.0, 1.0], [1.0, 0.0]]])
    d_mask = torch.tensor([[1, 1, 0]])  # the exact match [1, 0] is masked out
    q_mask = torch.tensor([[1, 1, 1]])
    # query token 1: max(0.8, 0.0) = 0.8; token 2: max(0.6, 1.0) = 1.0; token 3: max(0.96, 0.8) = 0.96
    torch.testing.assert_close(maxsim(q, q_mask, d, d_mask), torch.tensor([2.76]))
    torch.testing.assert_close(maxsim(q, q_mask, d, torch.ones_like(d_mask)), torch.tensor([1.0 + 1.0 + 0.96]))


def test_colbert_query_augmentation_and_markers(tiny_model_dir):
    model = build(tiny_model_dir, "colbert")
    tok = model.tokenizer
    texts = ["vitamin d", "a much longer query about statins and cholesterol levels"]
    batch = model.tokenize_queries(texts)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape == (2, 16), "queries are padded to query_max_length"
    assert (ids[:, 0] == tok.cls_token_id).all() and (ids[:, 1] == tok.convert_tokens_to_ids("[unused0]")).all()
    n = len(tok("vitamin d", add_special_tokens=False)["input_ids"])
    assert ids[0, 2 + n] == tok.sep_token_id
    assert (ids[0, 3 + n:] == tok.mask_token_id).all()
    assert tok.pad_token_id not in ids.tolist()[0]
    # built from a plain encoder, the expansion is not attended (Stanford's and PyLate's default), but it is scored
    assert model.attend_expansion is False and model.spec["attend_expansion"] is False
    assert mask[0].tolist() == [1] * (3 + n) + [0] * (16 - 3 - n)
    with torch.no_grad():
        assert bool(model.encode_queries(texts).mask.all()), "every [MASK] position takes part in scoring"
    attended = build(tiny_model_dir, "colbert", attend_expansion=True).tokenize_queries(texts)
    assert bool(attended["attention_mask"].all()) and torch.equal(attended["input_ids"], ids)
    # without the expansion a query is its own tokens: no [MASK], padding neither attended nor scored
    plain = build(tiny_model_dir, "colbert", query_expansion=False)
    rows = plain.tokenize_queries(texts)
    longest = min(len(tok(texts[1], add_special_tokens=False)["input_ids"]), 16 - 3) + 3
    assert tok.mask_token_id not in rows["input_ids"].flatten().tolist() and rows["input_ids"].shape == (2, longest)
    assert rows["attention_mask"][0].tolist() == [1] * (3 + n) + [0] * (longest - 3 - n)
    assert plain.token_lengths(texts, "query") == [3 + n, longest] and plain.asymmetry() == (
        "[Q] / [D] markers and punctuation scored in queries, not in documents")
    with torch.no_grad():
        assert torch.equal(plain.encode_queries(texts).mask, rows["attention_mask"].bool())
    # without markers: [CLS] tokens [SEP] on both sides
    bare = build(tiny_model_dir, "colbert", query_expansion=False, markers=False)
    q, d = bare.tokenize_queries(texts[:1]), bare.tokenize_documents(["bone health"])
    assert q["input_ids"][0].tolist() == tok("vitamin d")["input_ids"]
    assert d["input_ids"][0].tolist() == tok("bone health")["input_ids"]
    assert bare.token_lengths(["bone health"], "document") == [len(tok("bone health")["input_ids"])]
    assert bare.spec["markers"] is False and bare.query_marker is None
    docs = model.tokenize_documents(["bone health", "x"])
    assert (docs["input_ids"][:, 1] == tok.convert_tokens_to_ids("[unused1]")).all()
    assert docs["attention_mask"][1].sum() == 4  # [CLS] [D] x [SEP], then padding


def test_colbert_punctuation_masked_in_documents_only(tiny_model_dir):
    model = build(tiny_model_dir, "colbert").eval()
    tok = model.tokenizer
    with torch.no_grad():
        d = model.encode_documents(["bone health, and vitamin d."])
        q = model.encode_queries(["bone health, vitamin d."])
    ids = model.tokenize_documents(["bone health, and vitamin d."])["input_ids"][0]
    punct = {tok.convert_tokens_to_ids(","), tok.convert_tokens_to_ids(".")}
    for pos, tid in enumerate(ids.tolist()):
        assert bool(d.mask[0, pos]) == (tid not in punct)
    assert bool(q.mask.all())


def test_colbert_shapes_and_normalisation(tiny_model_dir):
    model = build(tiny_model_dir, "colbert", colbert_dim=8).eval()
    with torch.no_grad():
        q = model.encode_queries(QUERIES)
        d = model.encode_documents(DOCS)
    assert q.vectors.shape == (4, 16, 8) and q.mask.shape == (4, 16)
    assert d.vectors.shape[0] == 4 and d.vectors.shape[2] == 8
    torch.testing.assert_close(q.vectors.norm(dim=-1), torch.ones(4, 16))
    assert model.projection.bias is None


# ---------------------------------------------------------------- TwinBERT specifics


def test_twin_pooling_and_scorers(tiny_model_dir):
    mean = build(tiny_model_dir, "twin").eval()
    cls = build(tiny_model_dir, "twin", pooling="cls").eval()
    batch = mean.tokenize_queries(QUERIES)
    with torch.no_grad():
        hidden = mean.backbone(batch["input_ids"], batch["attention_mask"])
        m = batch["attention_mask"].unsqueeze(-1).float()
        torch.testing.assert_close(mean.encode_queries(QUERIES).vectors, (hidden * m).sum(1) / m.sum(1))
        torch.testing.assert_close(cls.encode_queries(QUERIES).vectors, hidden[:, 0])
    q, d = torch.randn(3, 32), torch.randn(3, 32)
    combiner = mean.combiner
    v = torch.maximum(q, d)
    expected = (v @ combiner.residual.weight.T + combiner.residual.bias + v) @ combiner.out.weight.T + combiner.out.bias
    # the default combiner starts as the cosine: 20 x cosine beside TwinBERT's network (its output layer at zero)
    expected = expected.squeeze(-1) + combiner.cosine_scale * F.cosine_similarity(q, d)
    torch.testing.assert_close(mean.score(Encoded(q), Encoded(d)), expected)
    published = build(tiny_model_dir, "twin", combiner_start="random").combiner  # TwinBERT's combiner alone
    expected = (v @ published.residual.weight.T + published.residual.bias + v) @ published.out.weight.T + published.out.bias
    torch.testing.assert_close(published(q, d), expected.squeeze(-1))
    cosine = build(tiny_model_dir, "twin", scorer="cosine")
    dot = build(tiny_model_dir, "twin", scorer="dot")
    assert cosine.combiner is None and not cosine.head_parameters()
    torch.testing.assert_close(cosine.score(Encoded(q), Encoded(d)), F.cosine_similarity(q, d))
    torch.testing.assert_close(dot.score(Encoded(q), Encoded(d)), (q * d).sum(-1))


def test_bad_model_options_are_rejected():
    from ssft.config.recipe import recipe_from_dict
    from ssft.core.errors import SsftError

    with pytest.raises(SsftError, match="model.pooling"):
        recipe_from_dict({"model": {"architecture": "twin", "pooling": "max"}})
    with pytest.raises(SsftError, match="model.scorer"):
        recipe_from_dict({"model": {"architecture": "twin", "scorer": "l2"}})


# ---------------------------------------------------------------- shared encode path / trainer wiring


@pytest.mark.parametrize("architecture", ["twin", "colbert"])
def test_forward_deduplicates_and_matches_separate_encoding(tiny_model_dir, architecture):
    model = build(tiny_model_dir, architecture).eval()
    queries = [QUERIES[0]] * 3 + [QUERIES[1]] * 3
    docs = [DOCS[0], DOCS[1], DOCS[2], DOCS[1], DOCS[2], DOCS[3]]
    inputs = model.tokenize(queries, docs)
    assert list(inputs)[:2] == ["q_index", "d_index"]
    assert inputs["q_input_ids"].shape[0] == 2 and inputs["d_input_ids"].shape[0] == 4
    with torch.no_grad():
        scores = model(**inputs)
        one_by_one = torch.cat([model.score(model.encode_queries([q]), model.encode_documents([d]))
                                for q, d in zip(queries, docs)])
    assert scores.shape == (6,)
    torch.testing.assert_close(scores, one_by_one, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("architecture", ["twin", "colbert"])
def test_collator_and_trainer_train_a_bi_encoder(tiny_model_dir, tiny_dataset, tmp_path, architecture):
    model = build(tiny_model_dir, architecture, "lora")
    ds = load_dataset(str(tiny_dataset))
    examples = build_examples(ds.qrels("train"), list(ds.corpus), None)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, learning_rate=1e-3, max_steps=2,
                             report_to=[], remove_unused_columns=False, use_cpu=True, save_strategy="no",
                             dataloader_pin_memory=False, disable_tqdm=True)
    pairs = PairDataset({"q5": {d: 1.0 for d in ds.corpus}}, 6, ds)
    trainer = RankingTrainer(model=model, args=args, train_dataset=TrainingGroups(examples, ds, 2), eval_dataset=pairs,
                             data_collator=RankerCollator(model), loss=PairwiseSoftmaxLoss(), head_learning_rate=5e-2,
                             eval_qrels=ds.qrels("dev"), eval_metrics=["nDCG@10"])
    inputs = RankerCollator(model)([trainer.train_dataset[0], trainer.train_dataset[1]])
    assert inputs["q_input_ids"].shape[0] == 2 and inputs["q_index"].tolist() == [0, 0, 0, 1, 1, 1]
    loss, scores = trainer.compute_loss(model, dict(inputs), return_outputs=True)
    assert scores.shape == (2, 3)
    trainer.train()
    model.eval()
    predicted = trainer.predict(pairs).predictions
    assert predicted.shape == (len(pairs),)
    q, d = pairs.pairs[2]
    with torch.no_grad():
        direct = model(**model.tokenize([ds.queries[q]], [ds.corpus[d].full_text]))
    assert abs(float(direct) - float(predicted[2])) < 1e-4
    assert "eval_nDCG@10" in trainer.evaluate()


@pytest.mark.parametrize("architecture", ["twin", "colbert"])
def test_score_run_encodes_each_document_once(tiny_model_dir, tiny_dataset, architecture):
    model = build(tiny_model_dir, architecture).eval()
    ds = load_dataset(str(tiny_dataset))
    run = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0, "d4": 0.5}, "q2": {"d2": 2.0, "d3": 1.5, "d5": 1.0},
           "q3": {"d1": 1.0, "d3": 0.9, "d6": 0.1}}
    calls = {"query": 0, "document": 0}
    encoded_docs = []
    original = model.encode_tokens

    def counting(input_ids, attention_mask, tower):
        calls[tower] += 1
        if tower == "document":
            encoded_docs.append(input_ids.shape[0])
        return original(input_ids, attention_mask, tower)

    model.encode_tokens = counting
    out = score_run(model, run, ds, depth=3, batch_size=2)
    assert sum(encoded_docs) == 5  # d1 d2 d3 d5 d6: the top-3 of all queries, each once
    assert calls["document"] == 3 and calls["query"] == 2  # ceil(5 / 2) and ceil(3 / 2) batches
    assert {q: set(docs) for q, docs in out.items()} == {"q1": {"d1", "d2", "d3"}, "q2": {"d2", "d3", "d5"},
                                                         "q3": {"d1", "d3", "d6"}}
    model.encode_tokens = original
    with torch.no_grad():  # the same scores as pair by pair
        pairs = PairDataset(run, 3, ds)
        direct = model(**model.tokenize([pairs[i]["query"] for i in range(len(pairs))],
                                        [pairs[i]["document"] for i in range(len(pairs))]))
    for (q, d), s in zip(pairs.pairs, direct):
        assert abs(out[q][d] - float(s)) < 1e-4


# ---------------------------------------------------------------- every adapter method


@pytest.mark.parametrize("architecture", ["twin", "colbert"])
@pytest.mark.parametrize("method", METHODS)
def test_gradients_reach_what_each_method_trains(tiny_model_dir, architecture, method):
    model = build(tiny_model_dir, architecture, method).train()
    ranker_modules = {"twin": r"combiner\..*", "colbert": r"projection\.weight"}[architecture]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    pattern = re.compile(f"{BACKBONE_TRAINABLE[method]}|{ranker_modules}")
    assert all(pattern.fullmatch(n) for n in trainable), sorted(n for n in trainable if not pattern.fullmatch(n))[:5]
    assert any(n.startswith("backbone.") for n in trainable)
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):  # LoRA's A gets gradient only once B is non-zero: two steps
        optimizer.zero_grad()
        scores = model(**model.tokenize(QUERIES, DOCS))
        (scores * torch.tensor([1.0, -2.0, 3.0, -4.0])).sum().backward()
        optimizer.step()
    for n, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reached {n}"
        else:
            assert p.grad is None and torch.equal(p.detach(), frozen_before[n]), f"frozen {n} changed"


def test_colbert_saved_before_the_expansion_key_still_attends_it(tiny_model_dir, tmp_path):
    model = build(tiny_model_dir, "colbert", attend_expansion=True, colbert_dim=16).eval()
    model.save(tmp_path / "m")
    spec_file = next((tmp_path / "m").rglob("ssft_model.json"))
    spec = json.loads(spec_file.read_text())
    del spec["attend_expansion"]  # as a folder written before the key existed: it was trained attending the expansion
    spec_file.write_text(json.dumps(spec))
    loaded = load_ranker(tmp_path / "m")
    assert loaded.attend_expansion is True
    with torch.no_grad():
        expected = model(**model.tokenize(QUERIES, DOCS))
        torch.testing.assert_close(loaded(**loaded.tokenize(QUERIES, DOCS)), expected)
        loaded.attend_expansion = False  # the setting matters to these scores, so the check above could fail
        assert not torch.allclose(loaded(**loaded.tokenize(QUERIES, DOCS)), expected)


@pytest.mark.parametrize("architecture,method", [("twin", "lora"), ("twin", "hidden_prefix"), ("colbert", "prefix"),
                                                 ("colbert", "hidden_prefix"), ("colbert", "full")])
def test_save_load_gives_identical_scores(tiny_model_dir, tmp_path, architecture, method):
    model = build(tiny_model_dir, architecture, method, scorer="combiner") if architecture == "twin" else \
        build(tiny_model_dir, architecture, method, colbert_dim=16)
    assert_save_load_round_trip(model, tmp_path / "m", QUERIES, DOCS)
