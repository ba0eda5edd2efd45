"""Bi-encoder evaluation reuses document representations: once per evaluation in validation, test reranking and
ssft-rerank; ColBERT's per-token embeddings of a frozen model are cached on disk, keyed by model and documents."""
import json
import logging

import pytest
import torch
from transformers import TrainingArguments

from ssft.config.recipe import ModelConfig
from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset, RankerCollator, TrainingGroups, build_examples
from ssft.eval.rerank import rerank_and_report
from ssft.losses import PairwiseSoftmaxLoss
from ssft.models import load_ranker
from ssft.models.bi import score_run
from ssft.models.colbert import ColBert
from ssft.models.embedding_cache import cache_dir
from ssft.models.twin import TwinBert
from ssft.training.prediction import prediction_trainer
from ssft.training.trainer import RankingTrainer

ARCHITECTURES = {"twin": TwinBert, "colbert": ColBert}
ALL_DOCS = ["d1", "d2", "d3", "d4", "d5", "d6"]


def build(tiny_model_dir, architecture="colbert", method="lora", options=None):
    torch.manual_seed(0)
    own_keys = {"colbert_dim": 16} if architecture == "colbert" else {}  # a key of another architecture is refused
    cfg = ModelConfig(architecture=architecture, name=str(tiny_model_dir), max_length=48, query_max_length=16, **own_keys)
    model = ARCHITECTURES[architecture].build(cfg, method, options or {})
    with torch.no_grad():  # off the initialisation (LoRA B starts at zero)
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    return model


class Counter:
    """Counts the documents and queries that go through a bi-encoder's one encode path."""

    def __init__(self, monkeypatch, cls):
        self.documents = 0
        self.queries = 0
        original = cls.encode_tokens

        def counting(model, input_ids, attention_mask, tower):
            if tower == "document":
                self.documents += input_ids.shape[0]
            else:
                self.queries += input_ids.shape[0]
            return original(model, input_ids, attention_mask, tower)

        monkeypatch.setattr(cls, "encode_tokens", counting)

    def reset(self):
        self.documents = self.queries = 0


def cache_files():
    return sorted(cache_dir().glob("*.safetensors")) if cache_dir().is_dir() else []


def make_trainer(model, ds, tmp_path, eval_pairs, batch_size=4, max_steps=2):
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2,
                             per_device_eval_batch_size=batch_size,
                             learning_rate=1e-3, max_steps=max_steps, report_to=[], remove_unused_columns=False, use_cpu=True,
                             save_strategy="no", dataloader_pin_memory=False, disable_tqdm=True)
    examples = build_examples(ds.qrels("train"), list(ds.corpus), None)
    return RankingTrainer(model=model, args=args, train_dataset=TrainingGroups(examples, ds, 2), eval_dataset=eval_pairs,
                          data_collator=RankerCollator(model), loss=PairwiseSoftmaxLoss(), eval_qrels=ds.qrels("dev"),
                          eval_metrics=["nDCG@10"])


# ---------------------------------------------------------------- once per evaluation


@pytest.mark.parametrize("architecture", ["twin", "colbert"])
def test_validation_encodes_each_document_once(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch, architecture):
    ds = load_dataset(str(tiny_dataset))
    model = build(tiny_model_dir, architecture)
    # 3 queries x the same 6 documents: 18 pairs, 6 distinct documents
    pairs = PairDataset({q: {d: 1.0 for d in ALL_DOCS} for q in ("q5", "q6", "q1")}, 6, ds)
    trainer = make_trainer(model, ds, tmp_path, pairs)
    trainer.train()
    model.train()
    counter = Counter(monkeypatch, type(model))
    metrics = trainer.evaluate()
    assert "eval_nDCG@10" in metrics
    assert counter.documents == 6 and counter.queries == 3
    assert model.training, "evaluation restores the training mode"
    assert cache_files() == [], "a model in training is never cached"
    reused = trainer.score(pairs)
    counter.reset()
    predicted = trainer.predict(pairs).predictions  # the Trainer.predict path still works for bi-encoders
    assert counter.documents > 6  # batches of 4 pairs: documents encoded again in every batch
    assert reused.shape == predicted.shape == (18,)
    torch.testing.assert_close(torch.as_tensor(reused), torch.as_tensor(predicted), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("architecture", ["twin", "colbert"])
def test_rerank_and_report_encodes_each_document_once(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch, architecture):
    ds = load_dataset(str(tiny_dataset))
    model = build(tiny_model_dir, architecture).eval()
    first = {"q5": {d: 6.0 - i for i, d in enumerate(ALL_DOCS)}, "q6": {d: float(i) for i, d in enumerate(ALL_DOCS)}}
    counter = Counter(monkeypatch, type(model))
    results, info = rerank_and_report(score=prediction_trainer(model, 2).score, dataset=ds, split="test",
                                      qrels=ds.qrels("test"), first_stage=first, first_stage_name="bm25", depth=4,
                                      metrics=["nDCG@10"], output_dir=tmp_path)
    # top-4 of q5: d1-d4, of q6: d6 d5 d4 d3 → d1..d6, each once
    assert counter.documents == 6 and counter.queries == 2
    assert info["pairs"] == 8 and (tmp_path / "run.test.trec").is_file() and set(results) == {"test", "bm25"}


# ---------------------------------------------------------------- merging


def test_only_single_lora_adapters_merge(tiny_model_dir):
    ss = build(tiny_model_dir, "colbert", "ss_lora", {"sharing": "hetero_value", "r": 2})
    assert not ss.can_merge
    with pytest.raises(SsftError, match="only a single LoRA adapter .* not 'ss_lora'"):
        ss.merge_adapter()
    model = build(tiny_model_dir, "colbert", "lora", {"r": 2}).eval()
    assert model.can_merge
    inputs = model.tokenize(["vitamin d", "coffee"], ["bone health and vitamin d", "liver disease"])
    with torch.no_grad():
        before = model(**inputs)
        model.merge_adapter()
        after = model(**inputs)
    assert not model.backbone.is_peft
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- ColBERT's on-disk cache


@pytest.fixture
def saved_colbert(tiny_model_dir, tmp_path):
    model = build(tiny_model_dir, "colbert", "ss_lora", {"sharing": "hetero_value", "r": 2})
    model.save(tmp_path / "m")
    return tmp_path / "m"


RUN = {"q5": {"d6": 3.0, "d1": 2.0, "d2": 1.0}, "q6": {"d5": 3.0, "d2": 2.0, "d3": 1.0}}


def test_cache_hit_for_the_same_model_and_documents(saved_colbert, tiny_dataset, monkeypatch):
    ds = load_dataset(str(tiny_dataset))
    counter = Counter(monkeypatch, ColBert)
    first = score_run(load_ranker(saved_colbert), RUN, ds, depth=3)
    assert counter.documents == 5 and len(cache_files()) == 1
    counter.reset()
    again = score_run(load_ranker(saved_colbert), RUN, ds, depth=3)  # e.g. ssft-rerank run twice
    assert counter.documents == 0 and counter.queries == 2
    assert again == first  # float32 stored as is: the very same scores
    assert len(cache_files()) == 1


def test_twin_reranking_reads_its_document_vectors_from_the_cache(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch):
    build(tiny_model_dir, "twin", "lora", {"r": 2}).save(tmp_path / "twin")
    ds = load_dataset(str(tiny_dataset))
    counter = Counter(monkeypatch, TwinBert)
    first = score_run(load_ranker(tmp_path / "twin"), RUN, ds, depth=3)
    assert counter.documents == 5 and len(cache_files()) == 1
    counter.reset()
    assert score_run(load_ranker(tmp_path / "twin"), RUN, ds, depth=3) == first and counter.documents == 0


def test_cache_miss_when_one_weight_changes(saved_colbert, tiny_dataset, monkeypatch):
    ds = load_dataset(str(tiny_dataset))
    score_run(load_ranker(saved_colbert), RUN, ds, depth=3)
    model = load_ranker(saved_colbert)
    with torch.no_grad():
        name, weight = next((n, p) for n, p in model.named_parameters() if "lora_B.document_tower" in n)
        original = weight[0, 0].clone()
        weight[0, 0] += 0.5
    counter = Counter(monkeypatch, ColBert)
    changed = score_run(model, RUN, ds, depth=3)
    assert counter.documents == 5 and len(cache_files()) == 2
    with torch.no_grad():
        weight[0, 0] = original
    counter.reset()
    assert score_run(model, RUN, ds, depth=3) != changed and counter.documents == 0  # back to the first model: its cache


def test_cache_miss_when_one_document_changes(saved_colbert, tiny_dataset, monkeypatch):
    score_run(load_ranker(saved_colbert), RUN, load_dataset(str(tiny_dataset)), depth=3)
    corpus = tiny_dataset / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace("statin drugs lower cholesterol", "statin drugs reduce cholesterol"))
    counter = Counter(monkeypatch, ColBert)
    score_run(load_ranker(saved_colbert), RUN, load_dataset(str(tiny_dataset)), depth=3)
    assert counter.documents == 5 and len(cache_files()) == 2


def test_cache_not_used_for_trainable_models_or_when_off(tiny_model_dir, saved_colbert, tiny_dataset, monkeypatch):
    ds = load_dataset(str(tiny_dataset))
    score_run(build(tiny_model_dir, "colbert", "lora"), RUN, ds, depth=3)
    assert cache_files() == []
    monkeypatch.setenv("SSFT_EMBEDDING_CACHE", "0")
    score_run(load_ranker(saved_colbert), RUN, ds, depth=3)
    assert cache_files() == []


def test_unreadable_cache_is_recomputed_and_replaced(saved_colbert, tiny_dataset, monkeypatch, caplog):
    ds = load_dataset(str(tiny_dataset))
    expected = score_run(load_ranker(saved_colbert), RUN, ds, depth=3)
    (path,) = cache_files()
    path.write_bytes(b"not a safetensors file")
    counter = Counter(monkeypatch, ColBert)
    with caplog.at_level(logging.WARNING):
        assert score_run(load_ranker(saved_colbert), RUN, ds, depth=3) == expected
    assert counter.documents == 5 and "unreadable embedding cache" in caplog.text
    counter.reset()
    score_run(load_ranker(saved_colbert), RUN, ds, depth=3)
    assert counter.documents == 0
    assert not list(path.parent.glob("*.tmp")), "no temporary file left behind"


def test_train_then_rerank_twice_reuses_the_test_embeddings(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch):
    """ssft-train (ColBERT, ss_lora) caches the test documents after training; ssft-rerank on the saved model
    finds them (same weights after save/load), and so does a second ssft-rerank."""
    from ssft.cli.rerank import main as rerank_main
    from ssft.config.recipe import load_recipe
    from ssft.pipeline.run import run_recipe

    out = tmp_path / "run"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(out / "logs"))  # run_recipe sets it for the process: undone after
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""
model: {{architecture: colbert, name: {tiny_model_dir}, max_length: 48, query_max_length: 16, colbert_dim: 16}}
adapter: {{method: ss_lora, sharing: hetero_value, r: 2}}
data: {{dataset: {tiny_dataset}, num_negatives: 2, negatives: random}}
eval: {{depth: 6, metrics: [nDCG@10]}}
training: {{output_dir: {out}, max_steps: 2, per_device_train_batch_size: 2, learning_rate: 1.0e-3, report_to: []}}
""")
    metrics = run_recipe(load_recipe(recipe))
    assert json.loads((out / "metrics.json").read_text()) == metrics
    assert len(cache_files()) >= 1
    counter = Counter(monkeypatch, ColBert)
    for i in range(2):
        counter.reset()
        args = [str(out), "--data", str(tiny_dataset), "--first-stage", str(out / "run.bm25.test.trec"), "--split", "test",
                "--output", str(tmp_path / f"rr{i}"), "--depth", "6", "--metrics", "nDCG@10"]
        assert rerank_main(args) == 0
        assert counter.documents == 0 and counter.queries > 0
        again = json.loads((tmp_path / f"rr{i}" / "metrics.json").read_text())
        assert again["test"]["nDCG@10"] == pytest.approx(metrics["test"]["nDCG@10"], abs=1e-6)
