"""Starts that keep the checkpoint's ranking ability, and schedules that train at every size: a TwinBERT combiner that
starts as the checkpoint's cosine, a ColBERT projection fitted to the corpus's token states, a warm-up that never
swallows a short run, and a run whose weights did not change saying so (log, summary, model cards)."""
import json

import pytest
import torch
from transformers import TrainingArguments

import ssft
import ssft.models.colbert as colbert_module
from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.data.beir import Document, DocumentTexts
from ssft.models.colbert import ColBert
from ssft.models.twin import TwinBert
from ssft.training.trainer import warmup_steps_for

QUERIES = ["vitamin d bones", "cholesterol statins", "fish oil omega", "sleep and memory"]
DOCUMENTS = ["vitamin d and bone health in adults", "statin drugs lower cholesterol and heart risk",
             "omega three fatty acids in fish oil", "sleep duration and memory", "coffee consumption and liver disease",
             "added sugar and diabetes risk"]


def _pairs():
    return [(q, d) for q in QUERIES for d in DOCUMENTS]


def _scores(ranker, pairs):
    ranker.eval()
    with torch.no_grad():
        return ranker.predict(pairs, batch_size=64)


@pytest.mark.parametrize("total, asked, expected", [(1, 10, 0), (2, 10, 1), (7, 10, 3), (100, 10, 10),
                                                    (1, 0.1, 0), (100, 0.1, 10)])
def test_the_warm_up_never_takes_more_than_half_the_run(tmp_path, total, asked, expected):
    args = TrainingArguments(output_dir=str(tmp_path), warmup_steps=asked, report_to=[], use_cpu=True)
    warmup, _ = warmup_steps_for(args, total)
    assert warmup == expected


def test_a_twin_combiner_starts_as_the_checkpoints_cosine(tiny_model_dir):
    config = {"name": str(tiny_model_dir), "max_length": 32, "architecture": "twin"}
    cosine = TwinBert.build(ModelConfig(**config, scorer="cosine"), "full", {})
    combiner = TwinBert.build(ModelConfig(**config), "full", {})  # scorer combiner, combiner_start cosine (defaults)
    torch.manual_seed(1)
    published = TwinBert.build(ModelConfig(**config, combiner_start="random"), "full", {})
    assert combiner.ranks_untrained and not published.ranks_untrained
    expected = 20.0 * _scores(cosine, _pairs())
    assert _scores(combiner, _pairs()) == pytest.approx(expected, abs=1e-5)
    assert _scores(published, _pairs()) != pytest.approx(expected, abs=1e-3)
    # the residual network learns from the first step: its output layer gets a gradient at once
    combiner.train()
    batch = combiner.tokenize(QUERIES, DOCUMENTS[: len(QUERIES)])
    combiner(**batch).sum().backward()
    assert combiner.combiner.out.weight.grad.abs().sum() > 0 and combiner.combiner.cosine_scale.grad is not None


@pytest.mark.parametrize("architecture, keys", [
    ("twin", {}), ("twin", {"combiner_start": "random"}), ("twin", {"scorer": "cosine"}), ("dense", {}),
    ("colbert", {"colbert_dim": 16}), ("cross", {}), ("cross", {"head": "dual_pooled"}),
    ("cross", {"head": "gated_segments", "query_max_length": 8})])
def test_the_plan_knows_before_building_whether_the_start_ranks(tiny_model_dir, architecture, keys):
    """``--check`` and the run's plan say whether the start is scored from the recipe alone
    (``Ranker.ranks_untrained_for``); where they say yes or no, the model built agrees."""
    config = ModelConfig(name=str(tiny_model_dir), max_length=32, architecture=architecture, **keys)
    model_cls = MODELS.get(architecture)
    planned = model_cls.ranks_untrained_for(config.config)
    built = model_cls.build(config, "full", {}).ranks_untrained
    assert planned is None or planned == built
    assert planned is not None or architecture == "cross"  # only a classifier head waits for its checkpoint


def test_a_saved_twin_without_the_key_keeps_the_published_combiner():
    assert TwinBert.config_from_spec({"scorer": "combiner"}).combiner_start == "random"
    assert ColBert.config_from_spec({"colbert_dim": 16}).projection_start == "random"
    with pytest.raises(SsftError, match="combiner_start"):
        TwinBert.config_from_spec({"combiner_start": "zero"})


def test_a_narrow_colbert_projection_starts_from_the_corpus_token_states(tiny_model_dir):
    config = {"name": str(tiny_model_dir), "max_length": 32, "query_max_length": 8, "architecture": "colbert"}
    square = ColBert.build(ModelConfig(**config, colbert_dim=32), "full", {})  # hidden 32: the identity
    assert torch.equal(square.projection.weight, torch.eye(32)) and square.fit_start(DOCUMENTS) is None
    torch.manual_seed(0)
    fitted = ColBert.build(ModelConfig(**config, colbert_dim=8), "full", {})
    torch.manual_seed(0)
    random = ColBert.build(ModelConfig(**config, colbert_dim=8, projection_start="random"), "full", {})
    note = fitted.fit_start(DOCUMENTS * 3, seed=0)
    assert note and "principal directions" in note
    assert random.fit_start(DOCUMENTS) is None  # projection_start random: left as initialised
    weight = fitted.projection.weight.detach()
    assert torch.allclose(weight @ weight.T, torch.eye(8), atol=1e-4)  # orthonormal directions
    again = ColBert.build(ModelConfig(**config, colbert_dim=8), "full", {})
    again.fit_start(DOCUMENTS * 3, seed=0)
    assert torch.equal(again.projection.weight, weight)  # deterministic: a resumed run fits the same start
    # the fitted directions keep more of the token states' variance than the default start's (its ranking on real
    # text: benchmarks/efficacy.py); the identity of a square projection scores as the checkpoint's token geometry
    states = fitted.backbone(**{k: v for k, v in fitted.tokenize_documents(DOCUMENTS).items()}, tower="document")
    tokens = states.detach().reshape(-1, 32)
    tokens = tokens - tokens.mean(0)
    kept = (tokens @ weight.T).pow(2).sum()
    default = torch.nn.functional.normalize(random.projection.weight.detach(), dim=-1)
    assert kept > (tokens @ default.T).pow(2).sum()
    assert fitted.fit_start(DOCUMENTS) is None  # fitted once
    wider = ColBert.build(ModelConfig(**config, colbert_dim=48), "full", {})  # more dimensions than the hidden size
    assert wider.fit_start(DOCUMENTS * 3) is None  # no 48 principal directions of 32-wide states: the default start


def test_the_projection_start_reads_only_its_sample_of_a_large_corpus(tiny_model_dir, monkeypatch):
    """A corpus larger than the sample: only the sampled documents' texts are built (DocumentTexts, by position),
    and the fit equals the fit over the same corpus given as a list."""
    monkeypatch.setattr(colbert_module, "PCA_DOCUMENTS", 4)
    documents = [Document(title=f"t{i}", text=text) for i, text in enumerate(DOCUMENTS * 5)]
    read = []

    class Counted(DocumentTexts):
        def __getitem__(self, position):
            read.append(position)
            return super().__getitem__(position)

    config = {"name": str(tiny_model_dir), "max_length": 32, "query_max_length": 8, "architecture": "colbert"}
    lazy = ColBert.build(ModelConfig(**config, colbert_dim=8), "full", {})
    assert lazy.fit_start(Counted(documents), seed=3)
    assert len(read) == 4 and len(set(read)) == 4
    listed = ColBert.build(ModelConfig(**config, colbert_dim=8), "full", {})
    listed.fit_start([d.full_text for d in documents], seed=3)
    assert torch.equal(lazy.projection.weight, listed.projection.weight)


def _recipe(model_dir, dataset, out, **training):
    return {"model": {"name": str(model_dir), "max_length": 48, "architecture": "twin", "query_max_length": 8},
            "adapter": {"method": "lora", "r": 4}, "loss": "listwise_ce",
            "data": {"dataset": str(dataset), "num_negatives": 2, "negatives": "random"},
            "eval": {"depth": 6},
            "training": {"output_dir": str(out), "per_device_train_batch_size": 4, "learning_rate": 1e-2, **training}}


def test_a_one_step_run_under_a_long_warm_up_moves_the_weights(tmp_path, tiny_dataset, tiny_model_dir, caplog):
    recipe = _recipe(tiny_model_dir, tiny_dataset, tmp_path / "run", max_steps=1, warmup_steps=10)
    recipe["data"]["validation_split"] = None  # no best-epoch selection that could hand back the start
    run = ssft.train(recipe)
    assert run.info["weights_changed"] is True
    assert "start" in run.metrics  # the cosine-started combiner ranks at step 0: the start row is scored
    assert any("warm-up: 10 step(s) asked" in r.getMessage() for r in caplog.records)


def test_a_run_that_did_not_change_the_weights_says_so(tmp_path, tiny_dataset, tiny_model_dir, capsys):
    recipe = _recipe(tiny_model_dir, tiny_dataset, tmp_path / "run", max_steps=2, learning_rate=0.0)
    recipe["model"].update(head_learning_rate=0.0, scorer="cosine")  # cosine: a twin that exports
    recipe["eval"]["start"] = False  # no validation epoch 0 to fall back on: only the learning rate keeps the weights
    run = ssft.train(recipe)
    assert run.info["weights_changed"] is False
    assert "this run did not fine-tune it" in capsys.readouterr().out
    assert "did not fine-tune them" in (run.output_dir / "README.md").read_text()
    info = json.loads((run.output_dir / "run_info.json").read_text())
    assert info["weights_changed"] is False
    ssft.export(run, tmp_path / "export")
    card = (tmp_path / "export" / "README.md").read_text()
    assert "as it was, not fine-tuned" in card and "fine-tuned with ssft" not in card
    recipe = _recipe(tiny_model_dir, tiny_dataset, tmp_path / "trained", max_steps=2)
    recipe["data"]["validation_split"] = None
    trained = ssft.train(recipe)
    assert trained.info["weights_changed"] is True
    assert "did not fine-tune" not in (trained.output_dir / "README.md").read_text()
