"""Epoch 0: every run scores its starting model, on validation as a candidate of the best-epoch
selection and on test as metrics.json's ``start``; a run never hands back a model worse on validation than the one it
started from."""
import json

import pytest
import torch
from transformers import TrainingArguments

from ssft.config.recipe import ModelConfig, recipe_from_dict
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset, RankerCollator, TrainingGroups, build_examples
from ssft.data.trec import read_run
from ssft.losses import PairwiseSoftmaxLoss
from ssft.models.twin import TwinBert
from ssft.training.callbacks.best_epoch import BestEpochCallback, evaluate_start
from ssft.training.trainer import RankingTrainer
from tests.helpers import needs_torch_bf16, write_synthetic_beir

DESTROY = 5.0  # a learning rate that wrecks a full fine-tune in a few AdamW steps


@pytest.fixture
def synthetic(tmp_path):
    return write_synthetic_beir(tmp_path / "syn", queries=30, docs=24)


def _trainer(model_dir, data, out, learning_rate, epochs=2):
    torch.manual_seed(0)
    ranker = TwinBert.build(ModelConfig(name=str(model_dir), max_length=32, architecture="twin", scorer="cosine"),
                            "full", {})
    ds = load_dataset(str(data))
    examples = build_examples(ds.qrels("train"), list(ds.corpus), None)
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=4, learning_rate=learning_rate,
                             num_train_epochs=epochs, eval_strategy="epoch", report_to=[], remove_unused_columns=False,
                             use_cpu=True, save_strategy="no", dataloader_pin_memory=False, lr_scheduler_type="constant")
    dev = ds.qrels("dev")
    pairs = PairDataset({q: dict.fromkeys(ds.corpus, 1.0) for q in dev}, len(ds.corpus), ds)
    best = BestEpochCallback("nDCG@10")
    trainer = RankingTrainer(model=ranker, args=args, train_dataset=TrainingGroups(examples, ds, 2), eval_dataset=pairs,
                             data_collator=RankerCollator(ranker), loss=PairwiseSoftmaxLoss(), eval_qrels=dev,
                             eval_metrics=["nDCG@10"], callbacks=[best])
    return trainer, ranker, best


def test_epoch_zero_wins_when_training_only_hurts(tiny_model_dir, synthetic, tmp_path):
    trainer, ranker, best = _trainer(tiny_model_dir, synthetic, tmp_path / "out", DESTROY)
    start = {n: p.detach().clone() for n, p in ranker.named_parameters()}
    start_value = evaluate_start(trainer)["eval_nDCG@10"]
    trainer.train()
    assert [h["epoch"] for h in best.history] == [0.0, 1.0, 2.0]
    assert best.history[0]["eval_nDCG@10"] == start_value
    assert max(h["eval_nDCG@10"] for h in best.history[1:]) < start_value  # the learning rate did destroy the model
    assert best.best_epoch == 0 and best.start_selected
    # the run hands back the starting weights, exactly
    for name, p in ranker.named_parameters():
        assert torch.equal(p.detach(), start[name]), name
    ranker.eval()
    assert trainer.evaluate()["eval_nDCG@10"] == pytest.approx(start_value, abs=1e-9)


def test_a_later_epoch_wins_when_it_beats_the_start():
    """The callback alone, on a toy module: epoch 0 is a candidate like any other, not a favourite."""
    from types import SimpleNamespace

    model = torch.nn.Linear(2, 1)
    best = BestEpochCallback("nDCG@10")
    weights = []
    for epoch, value in [(None, 0.30), (1.0, 0.45), (2.0, 0.40)]:  # before training the Trainer's epoch is None
        with torch.no_grad():
            model.weight.add_(1.0)
        weights.append(model.weight.detach().clone())
        best.on_evaluate(None, SimpleNamespace(epoch=epoch, global_step=int(epoch or 0) * 5), None,
                         metrics={"eval_nDCG@10": value}, model=model)
    best.on_train_end(None, None, None, model=model)
    assert [h["epoch"] for h in best.history] == [0.0, 1.0, 2.0]
    assert best.best_epoch == 1.0 and not best.start_selected and torch.equal(model.weight, weights[1])
    # the same history with the start on top selects the start
    best = BestEpochCallback("nDCG@10")
    for epoch, value in [(None, 0.50), (1.0, 0.45)]:
        best.on_evaluate(None, SimpleNamespace(epoch=epoch, global_step=int(epoch or 0) * 5), None,
                         metrics={"eval_nDCG@10": value}, model=model)
    assert best.start_selected


def _recipe(model_dir, data, out, architecture="twin", learning_rate=DESTROY, eval_precision="auto", loss=None, **model):
    return recipe_from_dict({
        "model": {"architecture": architecture, "name": str(model_dir), "max_length": 32, **model},
        "adapter": {"method": "full"},
        **({"loss": {"name": loss}} if loss else {}),
        "data": {"dataset": str(data), "num_negatives": 2, "negatives": "random"},
        "eval": {"depth": 24, "metrics": ["nDCG@10", "RR@10"], "precision": eval_precision},
        "training": {"output_dir": str(out), "num_train_epochs": 2, "per_device_train_batch_size": 4,
                     "learning_rate": learning_rate, "lr_scheduler_type": "constant", "use_cpu": True, "report_to": []},
    }, "start.yaml")


def test_run_reports_start_and_hands_back_the_starting_model(tiny_model_dir, synthetic, tmp_path, monkeypatch, capsys):
    from ssft.pipeline.run import run_recipe

    out = tmp_path / "run"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(out / "logs"))
    results = run_recipe(_recipe(tiny_model_dir, synthetic, out, scorer="cosine"))
    assert set(results) == {"test", "bm25", "start"}
    info = json.loads((out / "run_info.json").read_text())
    assert info["start"] == {"scored": True, "split": "test"}
    assert info["start_selected"] is True and info["best_validation"]["epoch"] == 0
    assert [h["epoch"] for h in info["validation_history"]] == [0.0, 1.0, 2.0]
    # the model handed back is the starting model: its test run is the start's run
    assert results["test"] == pytest.approx(results["start"], abs=1e-6)
    assert read_run(out / "run.start.test.trec").keys() == read_run(out / "run.test.trec").keys()
    assert (out / "per_query.start.test.tsv").is_file()
    assert json.loads((out / "metrics.json").read_text())["start"] == results["start"]
    assert "hands back the STARTING weights" in capsys.readouterr().out


@needs_torch_bf16
@pytest.mark.parametrize("architecture, loss", [("colbert", None), ("dense", "contrastive")])
def test_a_run_that_hands_back_its_start_reports_one_row_twice(architecture, loss, tiny_model_dir, synthetic, tmp_path,
                                                              monkeypatch):
    """One precision per table: the start row is scored as the trained rows are (eval.precision, here bf16; it was
    scored in fp32). A run whose weights never move (learning rate 0) hands back its start: both rows, and their run
    files, are the same to the last digit; run_info records the precision and backend every row was scored with."""
    from ssft.pipeline.run import run_recipe

    out = tmp_path / "run"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(out / "logs"))
    results = run_recipe(_recipe(tiny_model_dir, synthetic, out, architecture, learning_rate=0.0, eval_precision="bf16",
                                 loss=loss, head_learning_rate=0.0))
    info = json.loads((out / "run_info.json").read_text())
    assert info["start_selected"] is True
    assert results["start"] == results["test"]
    assert read_run(out / "run.start.test.trec") == read_run(out / "run.test.trec")
    assert (out / "per_query.start.test.tsv").read_text() == (out / "per_query.test.tsv").read_text()
    assert info["precision"] == "bf16"
    assert info["scoring"] == {"precision": "bf16", "backend": "torch", "rows": ["test", "start"]}
    assert set(json.loads((out / "metrics.json").read_text())) == {"test", "bm25", "start"}  # metrics.json: rows only


def test_a_run_that_scores_its_start_trains_in_bf16(tiny_model_dir, synthetic, tmp_path, monkeypatch):
    """Scoring the start builds a prediction Trainer (mixed precision "no") before the training Trainer: a bf16
    run must still get its bf16 Accelerator (accelerate refused it, "AcceleratorState has already been
    initialized", until the trainer released the state) and train under bf16 autocast."""
    from ssft.pipeline.run import run_recipe

    out = tmp_path / "run"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(out / "logs"))
    recipe = _recipe(tiny_model_dir, synthetic, out, learning_rate=1e-4, scorer="cosine")
    recipe.training["bf16"] = True
    results = run_recipe(recipe)
    info = json.loads((out / "run_info.json").read_text())
    assert "start" in results and info["start"]["scored"] is True
    assert info["training_precision"] == "bf16" and len(info["validation_history"]) == 3


def test_a_random_head_is_not_scored_on_test(tiny_model_dir, synthetic, tmp_path, monkeypatch):
    """A cross-encoder (and TwinBERT's combiner) starts with a random scoring head: no 'start' entry, and the reason
    is in run_info; epoch 0 still takes part in the validation selection."""
    from ssft.pipeline.run import run_recipe

    out = tmp_path / "run"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(out / "logs"))
    results = run_recipe(_recipe(tiny_model_dir, synthetic, out, architecture="cross", learning_rate=1e-3))
    assert set(results) == {"test", "bm25"}
    info = json.loads((out / "run_info.json").read_text())
    assert info["start"]["scored"] is False and "random" in info["start"]["reason"]
    assert info["validation_history"][0]["epoch"] == 0.0 and len(info["validation_history"]) == 3
    assert not list(out.glob("*start*"))


def test_a_resumed_run_reads_the_start_it_scored_before_the_kill(tmp_path):
    """On resume the weights have moved: the start entry comes from the run file written before training began."""
    from types import SimpleNamespace

    from ssft.data.trec import write_run
    from ssft.eval.metrics import evaluate_run
    from ssft.pipeline.report import evaluate_start

    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"a": 2.0, "b": 1.0}, "q2": {"a": 2.0, "b": 1.0}}
    recipe = SimpleNamespace(eval=SimpleNamespace(metrics=["nDCG@10", "RR@10"], precision="bf16", start=True),
                             data=SimpleNamespace(test_split="test"))
    built = SimpleNamespace(ranker=SimpleNamespace(ranks_untrained=True, architecture="dense"))
    inputs = SimpleNamespace(test_qrels=qrels)
    metrics, info = evaluate_start(recipe, inputs, built, tmp_path, write=True, resumed=True, file_precision="bf16")
    assert metrics is None and info["scored"] is False and "resumed" in info["reason"]  # no file: said, not guessed
    write_run(run, tmp_path / "run.start.test.trec")
    metrics, info = evaluate_start(recipe, inputs, built, tmp_path, write=True, resumed=True, file_precision="bf16")
    assert info == {"scored": True, "split": "test"}
    assert metrics == pytest.approx(evaluate_run(qrels, run, ["nDCG@10", "RR@10"])[0]) and metrics["RR@10"] == 0.75


@needs_torch_bf16
def test_a_resumed_run_scores_its_start_again_when_the_file_was_scored_in_another_precision(tiny_model_dir, synthetic,
                                                                                           tmp_path):
    """One precision per table across a resume: a start run file scored in another precision than the run's (a
    checkpoint from before the record: the start was scored in fp32) is scored again, in the run's precision, from the
    starting weights (a resumed run loads its checkpoint only once training starts); the file is rewritten."""
    from types import SimpleNamespace

    from ssft.data.trec import write_run
    from ssft.pipeline.report import evaluate_start
    from ssft.training.prediction import prediction_trainer

    torch.manual_seed(0)
    ranker = TwinBert.build(ModelConfig(name=str(tiny_model_dir), max_length=32, architecture="twin", scorer="cosine"),
                            "full", {}).eval()
    ds = load_dataset(str(synthetic))
    qrels = ds.qrels("test")
    first = {q: {d: float(-i) for i, d in enumerate(sorted(ds.corpus))} for q in qrels}
    recipe = SimpleNamespace(eval=SimpleNamespace(metrics=["nDCG@10"], precision="bf16", depth=8, batch_size=16,
                                                  start=True),
                             data=SimpleNamespace(test_split="test"))
    inputs = SimpleNamespace(test_qrels=qrels, test_first=first, dataset=ds)
    built = SimpleNamespace(ranker=ranker)
    pairs = PairDataset(first, 8, ds)
    want = pairs.to_run(prediction_trainer(ranker, 16, precision="bf16").score(pairs))
    stale = {q: {d: -v for d, v in docs.items()} for q, docs in want.items()}  # what another scoring left there
    path = tmp_path / "run.start.test.trec"

    def close_to(run, other) -> bool:
        return run.keys() == other.keys() and all(
            run[q].keys() == other[q].keys() and all(abs(run[q][d] - other[q][d]) < 1e-5 for d in run[q]) for q in run)

    write_run(stale, path)
    evaluate_start(recipe, inputs, built, tmp_path, write=True, resumed=True, file_precision="bf16")
    assert close_to(read_run(path), stale)  # scored in the run's precision: the file is the start, read back
    for recorded in ("fp32", None):  # another precision, or none recorded
        write_run(stale, path)
        metrics, info = evaluate_start(recipe, inputs, built, tmp_path, write=True, resumed=True,
                                       file_precision=recorded)
        assert info["scored"] and close_to(read_run(path), want)


def test_without_per_epoch_validation_the_start_is_weighed_against_the_end(tiny_model_dir, synthetic, tmp_path):
    """training.eval_strategy "no" with a validation set: epoch 0 and the final model are both evaluated, the better
    is handed back (here the start: the learning rate destroys the model)."""
    trainer, ranker, best = _trainer(tiny_model_dir, synthetic, tmp_path / "out", DESTROY)
    trainer.args.eval_strategy = "no"
    start = {n: p.detach().clone() for n, p in ranker.named_parameters()}
    evaluate_start(trainer)
    trainer.train()
    assert [h["epoch"] for h in best.history] == [0.0, 2.0]  # the start and the end, nothing in between
    assert best.start_selected and all(torch.equal(p.detach(), start[n]) for n, p in ranker.named_parameters())


def test_epoch_zero_from_a_sequence_classification_checkpoint_is_what_the_checkpoint_scores(synthetic, tmp_path,
                                                                                            monkeypatch):
    """A cross-encoder run started from a sequence-classification folder (saved here by transformers from a
    tiny random BERT, its head moved off its initial values) takes the checkpoint's pooler and classifier (``head:
    classifier``): its epoch-0 validation nDCG@10 is the value the checkpoint's own logits
    (``AutoModelForSequenceClassification``) give on the same validation candidates — the dev queries' BM25 top-k —, and
    its start on test (run.start.test.trec) holds those logits."""
    import ir_measures
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertConfig, BertForSequenceClassification

    from ssft.core.hub import resolve_model
    from ssft.firststage.runs import first_stage_run
    from ssft.pipeline.run import run_recipe

    folder = tmp_path / "seqcls"
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("sentence-transformers/all-MiniLM-L6-v2"))
    torch.manual_seed(11)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=128, num_labels=1))
    with torch.no_grad():  # a trained-looking head: far from transformers' initialisation (zero bias, std 0.02)
        for name, p in model.named_parameters():
            if "pooler" in name or "classifier" in name:
                p.add_(0.5 * torch.randn_like(p))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    out = tmp_path / "run"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(out / "logs"))
    recipe = recipe_from_dict({
        "model": {"architecture": "cross", "name": str(folder), "max_length": 48},  # head: classifier, the default
        "adapter": {"method": "lora", "r": 4},
        "data": {"dataset": str(synthetic), "num_negatives": 2, "negatives": "random"},
        # fp32: the reference below is the checkpoint's float32 logits (bf16 rounding reorders this tiny model's
        # near-equal scores)
        "eval": {"depth": 10, "metrics": ["nDCG@10"], "precision": "fp32"},
        "training": {"output_dir": str(out), "max_steps": 1, "per_device_train_batch_size": 4, "learning_rate": 1e-3,
                     "use_cpu": True, "report_to": []},
    }, "seqcls.yaml")
    results = run_recipe(recipe)
    info = json.loads((out / "run_info.json").read_text())
    start = info["validation_history"][0]
    assert (start["epoch"], start["step"]) == (0.0, 0) and "start" in results  # the checkpoint's head ranks untrained

    reference = AutoModelForSequenceClassification.from_pretrained(folder).eval()

    def logits(pairs: list[tuple[str, str]]) -> list[float]:
        inputs = tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="longest_first",
                           max_length=48, return_tensors="pt")
        with torch.no_grad():
            return reference(**inputs).logits[:, 0].tolist()

    ds = load_dataset(str(synthetic))
    dev = ds.qrels("dev")
    _, first = first_stage_run("bm25", ds, {}, {q: ds.queries[q] for q in dev}, 10)
    pairs = [(q, d) for q in sorted(first) for d, _ in sorted(first[q].items(), key=lambda kv: (-kv[1], kv[0]))[:10]]
    scores = logits([(ds.queries[q], ds.corpus[d].full_text) for q, d in pairs])
    run: dict[str, dict[str, float]] = {}
    for (q, d), s in zip(pairs, scores):
        run.setdefault(q, {})[d] = s
    per_query = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.nDCG @ 10], dev, run)}
    want = sum(per_query.get(q, 0.0) for q in dev) / len(dev)
    assert start["eval_nDCG@10"] == pytest.approx(want, abs=1e-6), (start, want)
    assert len(set(scores)) == len(scores)  # distinct scores: the ranking (and so the metric) is not an artefact of ties

    started = read_run(out / "run.start.test.trec")
    test_pairs = [(q, d) for q, docs in started.items() for d in docs]
    want_test = logits([(ds.queries[q], ds.corpus[d].full_text) for q, d in test_pairs])
    assert torch.allclose(torch.tensor([started[q][d] for q, d in test_pairs]), torch.tensor(want_test), atol=1e-4)


def test_eval_backend_openvino_scores_the_start_and_the_test_split_there_and_validates_on_torch(
        tiny_model_dir, synthetic, tmp_path, monkeypatch):
    """eval.backend: openvino: the start is converted, scored and put back on torch before training (validation,
    whose weights change, runs on torch); the trained model is scored there once its weights are final. Weights that
    never move (learning rate 0) give the same rows, and run_info and the checkpoints say how they were scored."""
    pytest.importorskip("openvino")
    from ssft.adapters.backbone import Backbone
    from ssft.pipeline.run import run_recipe
    from ssft.training.checkpoints import checkpoint_record

    validated = []
    evaluate = RankingTrainer.evaluate

    def on_torch(self, *args, **kwargs):  # validation: never through a converted encoder
        validated.append(all(m.serving is None for m in self.model.modules() if isinstance(m, Backbone)))
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(RankingTrainer, "evaluate", on_torch)
    out = tmp_path / "run"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(out / "logs"))
    recipe = _recipe(tiny_model_dir, synthetic, out, "dense", learning_rate=0.0, eval_precision="fp32",
                     loss="contrastive", head_learning_rate=0.0)
    recipe.eval.backend = "openvino"
    recipe.training["save_strategy"] = "epoch"
    results = run_recipe(recipe)
    info = json.loads((out / "run_info.json").read_text())
    assert info["scoring"] == {"precision": "fp32", "backend": "openvino", "rows": ["test", "start"]}
    assert validated and all(validated)
    assert results["start"] == pytest.approx(results["test"], abs=1e-6)
    assert checkpoint_record(out)["start_precision"] == "openvino:fp32"  # a resume re-reads its start only so


def test_eval_backend_is_checked_with_the_recipe(tiny_model_dir, synthetic, tmp_path):
    from ssft.core.errors import SsftError

    recipe = _recipe(tiny_model_dir, synthetic, tmp_path / "run").to_dict()
    recipe["eval"]["backend"] = "onnx"
    with pytest.raises(SsftError, match=r"^start.yaml: eval.backend: expected one of auto, torch, openvino, got 'onnx'$"):
        recipe_from_dict(recipe, "start.yaml")
