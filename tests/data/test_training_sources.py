"""data.train sources (text / ids / scored forms), the distillation losses on precomputed scores,
in-batch-only training (data.num_negatives: 0) and the cached BM25 index."""
from __future__ import annotations

import json
import math
import random
from collections import Counter

import pytest
import torch

from ssft.config.recipe import ModelConfig
from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from ssft.data.examples import RankerCollator, ScoredGroups, TextGroups, TrainingGroups
from ssft.data.hf_sources import load_train_source, negative_columns
from ssft.losses.listwise_kl import ListwiseKLLoss
from ssft.losses.margin_mse import MarginMSELoss
from ssft.training.objectives import PrecomputedDistillationObjective, RankingObjective, objective_for


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------ losses against hand-computed values
def test_margin_mse_hand_computed():
    student = torch.tensor([[3.0, 1.0, 0.0], [2.0, 2.0, 1.0]], requires_grad=True)
    teacher = torch.tensor([[5.0, 4.0, 1.0], [1.0, 3.0, 0.0]])
    # margins: student [2, 3], [0, 1]; teacher [1, 4], [-2, 1] -> squared errors 1, 1, 4, 0 -> mean 1.5
    loss = MarginMSELoss()(student, teacher)
    assert loss.item() == pytest.approx(1.5)
    loss.backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    # a constant shift of the teacher's scores changes no margin
    assert MarginMSELoss()(student, teacher + 7).item() == pytest.approx(1.5)


def test_listwise_kl_hand_computed():
    student = torch.tensor([[1.0, 0.0, -1.0]])
    teacher = torch.tensor([[0.0, 0.0, math.log(2.0)]])
    p = [0.25, 0.25, 0.5]  # softmax of the teacher's scores
    z = sum(math.exp(x) for x in (1.0, 0.0, -1.0))
    q = [math.exp(x) / z for x in (1.0, 0.0, -1.0)]
    expected = sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q))
    assert ListwiseKLLoss()(student, teacher).item() == pytest.approx(expected, rel=1e-5)
    # temperature 2: both lists halved, times tau^2 = 4
    p2 = [math.exp(x / 2) for x in (0.0, 0.0, math.log(2.0))]
    p2 = [x / sum(p2) for x in p2]
    q2 = [math.exp(x / 2) for x in (1.0, 0.0, -1.0)]
    q2 = [x / sum(q2) for x in q2]
    expected2 = 4 * sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p2, q2))
    assert ListwiseKLLoss(temperature=2.0)(student, teacher).item() == pytest.approx(expected2, rel=1e-5)
    assert ListwiseKLLoss()(teacher, teacher).item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="temperature"):
        ListwiseKLLoss(temperature=0.0)


def test_distillation_losses_pick_their_objective():
    assert isinstance(objective_for(MarginMSELoss()), PrecomputedDistillationObjective)
    with pytest.raises(ValueError, match="precomputed"):
        RankingObjective(ListwiseKLLoss())


# ------------------------------------------------------------ the three source forms, read from files written here
def test_text_form_jsonl(tmp_path, tiny_dataset):
    dataset = load_dataset(str(tiny_dataset))
    path = _jsonl(tmp_path / "triplets.jsonl", [
        {"query": "vitamin bones", "positive": "vitamin d text", "negative_1": "sugar text", "negative_2": "coffee"},
        {"query": "statins", "positive": "statin text", "negative_1": "fish text", "negative_2": "sleep"}])
    source = load_train_source(str(path), dataset)
    assert source.form == "text"
    assert [ex.negatives for ex in source.examples] == [["sugar text", "coffee"], ["fish text", "sleep"]]
    item = TextGroups(source.examples, dataset, 1, seed=0)[0]
    assert item["query"] == "vitamin bones" and item["documents"][0] == "vitamin d text"
    assert item["documents"][1] in ("sugar text", "coffee")


def test_ids_form_parquet_and_csv(tmp_path, tiny_dataset):
    import datasets

    dataset = load_dataset(str(tiny_dataset))
    rows = {"query_id": ["q1", "q2"], "positive_id": ["d1", "d2"], "negative_1_id": ["d4", "d5"],
            "negative_2_id": ["d3", "d1"]}
    datasets.Dataset.from_dict(rows).to_parquet(str(tmp_path / "ids.parquet"))
    source = load_train_source(str(tmp_path / "ids.parquet"), dataset)
    assert source.form == "ids"
    assert [(ex.qid, ex.positive, ex.negatives) for ex in source.examples] == [("q1", "d1", ["d4", "d3"]),
                                                                               ("q2", "d2", ["d5", "d1"])]
    group = TrainingGroups(source.examples, dataset, 2, seed=0)[1]
    assert group["documents"][0] == dataset.corpus["d2"].full_text
    assert set(group["documents"][1:]) == {dataset.corpus["d5"].full_text, dataset.corpus["d1"].full_text}
    # sentence-transformers' "-ids" subsets: query / positive / negative holding integer ids
    (tmp_path / "ids.csv").write_text("query,positive,negative\n1,2,3\n")
    numeric = tmp_path / "numeric"
    numeric.mkdir()
    (numeric / "corpus.jsonl").write_text("".join(json.dumps({"_id": str(i), "text": f"doc {i}"}) + "\n" for i in (2, 3)))
    (numeric / "queries.jsonl").write_text(json.dumps({"_id": "1", "text": "query one"}) + "\n")
    (numeric / "qrels").mkdir()
    (numeric / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t2\t1\n")
    source = load_train_source(str(tmp_path / "ids.csv"), load_dataset(str(numeric)))
    assert source.form == "ids" and (source.examples[0].qid, source.examples[0].negatives) == ("1", ["3"])


def test_scored_form_jsonl(tmp_path, tiny_dataset):
    dataset = load_dataset(str(tiny_dataset))
    path = _jsonl(tmp_path / "scored.jsonl", [{"query_id": "q1", "document_ids": ["d1", "d2", "d3"], "scores": [9.0, 2.0, 1.5]},
                                              {"query_id": "q2", "document_ids": ["d2", "d4", "d5"], "scores": [7, 6, 1]}])
    source = load_train_source(str(path), dataset)
    assert source.form == "scored" and source.examples[1].scores == [7.0, 6.0, 1.0]
    groups = ScoredGroups(source.examples, dataset, 1, seed=0)
    item = groups[0]
    assert item["documents"][0] == dataset.corpus["d1"].full_text and item["teacher_scores"][0] == 9.0
    assert len(item["documents"]) == 2 and item["teacher_scores"][1] in (2.0, 1.5)
    with pytest.raises(SsftError, match="row 1: 3 documents, fewer than 1 \\+ data.num_negatives = 4"):
        ScoredGroups(source.examples, dataset, 3)


@pytest.mark.parametrize("rows, message", [
    ([{"query_id": "q1", "document_ids": ["d1", "d2"], "scores": [1.0]}], "column 'scores', row 1: 1 scores for 2"),
    ([{"query_id": "q1", "document_ids": ["d1"], "scores": [1.0]}, {"query_id": "q1", "document_ids": ["d1", "dX"],
                                                                   "scores": [1.0, 2.0]}],
     "column 'document_ids', row 2: document id 'dX' is not in"),
    ([{"query_id": "qX", "document_ids": ["d1"], "scores": [1.0]}], "column 'query_id', row 1: query id 'qX'"),
    ([{"query_id": "q1", "document_ids": ["d1", "d2"], "scores": [1.0, float("nan")]}],
     "column 'scores', row 1: scores must be finite"),
    ([{"query": "a", "positive": "", "negative": "c"}], "column 'positive', row 1: expected a non-empty text"),
    ([{"query_id": "q1", "postive_id": "d1"}], "needs a column 'positive_id' or 'positive'"),
    ([{"question": "a", "answer": "b"}], "no column 'query', 'query_id' or 'document_ids'"),
])
def test_bad_rows_name_the_column_and_row(tmp_path, tiny_dataset, rows, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in rows))
    with pytest.raises(SsftError, match=message) as err:
        load_train_source(str(path), load_dataset(str(tiny_dataset)))
    assert str(path) in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------ repeats and judged positives among a row's negatives
def _grades(root, lines: str):
    """The tiny dataset's training qrels plus ``lines`` (query, document, grade)."""
    with open(root / "qrels" / "train.tsv", "a") as fh:
        fh.write(lines)
    return load_dataset(str(root))


def test_ids_rows_drop_repeats_and_judged_positives_with_counts(tmp_path, tiny_dataset):
    # training qrels: q1-d1, q2-d2, q3-d3, q4-d4 (grade 1), and q1-d6 grade 0, q2-d5 grade 2
    dataset = _grades(tiny_dataset, "q1\td6\t0\nq2\td5\t2\n")
    path = _jsonl(tmp_path / "ids.jsonl", [
        {"query_id": "q1", "positive_id": "d1", "negative_ids": ["d2", "d1", "d2", "d3", "d6"]},
        {"query_id": "q1", "positive_id": "d4", "negative_ids": ["d1", "d5"]},  # d1: judged relevant to q1
        {"query_id": "q2", "positive_id": "d2", "negative_ids": ["d5", "d1", "d5"]}])  # d5 judged (grade 2), twice
    source = load_train_source(str(path), dataset, train_split="train", min_relevance=1)
    assert [ex.negatives for ex in source.examples] == [["d2", "d3", "d6"], ["d5"], ["d1"]]
    assert [w for w in dataset.warnings if "data.train" in w] == [
        f"data.train: {path}: 1 negative equal to the row's positive dropped (row 1)",
        f"data.train: {path}: 2 negatives listed again in the same row dropped (rows 1, 3)",
        f"data.train: {path}: 2 negatives judged relevant to the row's query by the training qrels (train, grade >= 1) "
        "dropped (rows 2, 3)"]
    # the threshold is data.min_relevance's: grade 1 is not a positive at 2
    dataset = _grades(tiny_dataset, "")
    source = load_train_source(str(path), dataset, train_split="train", min_relevance=2)
    assert [ex.negatives for ex in source.examples] == [["d2", "d3", "d6"], ["d1", "d5"], ["d1"]]
    assert f"data.train: {path}: 1 negative judged relevant to the row's query by the training qrels (train, grade >= 2) " \
           "dropped (row 3)" in dataset.warnings
    # without training qrels (none named, or the dataset has no such split) only the repeats go
    for split in (None, "absent"):
        dataset = load_dataset(str(tiny_dataset))
        source = load_train_source(str(path), dataset, train_split=split)
        assert [ex.negatives for ex in source.examples] == [["d2", "d3", "d6"], ["d1", "d5"], ["d5", "d1"]]
        assert not any("judged relevant" in w for w in dataset.warnings)


def test_scored_rows_drop_repeats_and_judged_positives_with_their_scores(tmp_path, tiny_dataset):
    dataset = load_dataset(str(tiny_dataset))
    path = _jsonl(tmp_path / "scored.jsonl", [
        {"query_id": "q1", "document_ids": ["d1", "d2", "d1", "d3", "d2", "d4"], "scores": [9, 5, 9, 4, 5, 3]},
        {"query_id": "q2", "document_ids": ["d3", "d2", "d4", "d5"], "scores": [8, 7, 2, 1]}])  # d2: q2's positive
    source = load_train_source(str(path), dataset, train_split="train")
    assert [(ex.document_ids, ex.scores) for ex in source.examples] == [
        (["d1", "d2", "d3", "d4"], [9.0, 5.0, 4.0, 3.0]), (["d3", "d4", "d5"], [8.0, 2.0, 1.0])]
    assert [w for w in dataset.warnings if "data.train" in w] == [
        f"data.train: {path}: 1 negative equal to the row's positive dropped (row 1)",
        f"data.train: {path}: 1 negative listed again in the same row dropped (row 1)",
        f"data.train: {path}: 1 negative judged relevant to the row's query by the training qrels (train, grade >= 1) "
        "dropped (row 2)"]
    # a list left too short names what was dropped from it
    with pytest.raises(SsftError, match=r"row 2: 3 documents \(1 dropped: .*\), fewer than 1 \+ data.num_negatives = 4"):
        ScoredGroups(source.examples, dataset, 3, name=str(path))
    # the row named is the file's, after a subsample too
    kept = source.subsample(None, None, 0)
    kept.examples = kept.examples[1:]
    with pytest.raises(SsftError, match="row 2: 3 documents"):
        ScoredGroups(kept.examples, dataset, 3)


def test_text_rows_drop_the_positive_and_repeats_with_counts(tmp_path, tiny_dataset):
    dataset = load_dataset(str(tiny_dataset))
    path = _jsonl(tmp_path / "t.jsonl", [
        {"query": "a", "positive": "same", "negative_1": "same", "negative_2": "other", "negative_3": "other"},
        {"query": "b", "positive": "p", "negative_1": "n1", "negative_2": "n2", "negative_3": "n3"}])
    source = load_train_source(str(path), dataset, train_split="train")
    assert [ex.negatives for ex in source.examples] == [["other"], ["n1", "n2", "n3"]]
    assert sum("data.train" in w for w in dataset.warnings) == 2


@pytest.mark.parametrize("ids, scores, message", [
    (["d1", "d2", "d1"], [9.0, 2.0, 1.0], "row 1: document 'd1' is the row's positive (score 9) and listed again at "
                                          "position 3 with score 1"),
    (["d1", "d2", "d3", "d2"], [9.0, 2.0, 1.0, 2.5], "row 1: document 'd2' is listed at positions 2 and 4 with scores 2 and 2.5"),
])
def test_scored_row_with_two_scores_for_one_document_is_refused(tmp_path, tiny_dataset, ids, scores, message):
    path = _jsonl(tmp_path / "s.jsonl", [{"query_id": "q1", "document_ids": ids, "scores": scores}])
    with pytest.raises(SsftError, match=message.replace("(", "\\(").replace(")", "\\)")) as err:
        load_train_source(str(path), load_dataset(str(tiny_dataset)))
    assert str(path) in str(err.value) and "column 'document_ids'" in str(err.value) and "\n" not in str(err.value)


def test_empty_dataset_is_refused(tmp_path, tiny_dataset):
    import datasets

    datasets.Dataset.from_dict({"query": [], "positive": []}).to_parquet(str(tmp_path / "empty.parquet"))
    (tmp_path / "empty.jsonl").write_text("")
    for name in ("empty.parquet", "empty.jsonl"):
        with pytest.raises(SsftError, match=f"{name}: the dataset has no rows"):
            load_train_source(str(tmp_path / name), load_dataset(str(tiny_dataset)))


def test_negative_columns_in_order():
    assert negative_columns(["query", "negative_10", "negative_2", "positive", "negative_1"]) == [
        "negative_1", "negative_2", "negative_10"]
    assert negative_columns(["negative_id", "negative_ids", "negative_3_id"]) == ["negative_id", "negative_3_id"]


# ------------------------------------------------------------ distillation on the data's scores: every architecture
@pytest.mark.parametrize("architecture, method", [("cross", "lora"), ("twin", "ss_lora"), ("colbert", "ss_hidden_prefix"),
                                                  ("dense", "ss_lora"), ("dense", "full")])
def test_precomputed_distillation_trains_every_architecture(tiny_model_dir, tiny_dataset, tmp_path, architecture, method):
    from ssft.config.registry import MODELS

    dataset = load_dataset(str(tiny_dataset))
    path = _jsonl(tmp_path / "scored.jsonl", [{"query_id": "q1", "document_ids": ["d1", "d2", "d3"], "scores": [9.0, 2.0, 1.5]},
                                              {"query_id": "q2", "document_ids": ["d2", "d4", "d5"], "scores": [7, 6, 1]}])
    source = load_train_source(str(path), dataset)
    torch.manual_seed(0)
    cfg = ModelConfig(architecture=architecture, name=str(tiny_model_dir), max_length=48, query_max_length=16)
    options = {"r": 4} if "lora" in method else {}
    ranker = MODELS.get(architecture).build(cfg, method, options)
    with torch.no_grad():  # LoRA B starts at zero: move it off its init so A gets a gradient too
        for n, p in ranker.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    ranker.train()
    groups = ScoredGroups(source.examples, dataset, 2, seed=0)
    batch = RankerCollator(ranker)([groups[0], groups[1]])
    assert batch["teacher_scores"].tolist() == [[9.0, 2.0, 1.5], [7.0, 6.0, 1.0]]
    for loss in (MarginMSELoss(), ListwiseKLLoss(temperature=2.0)):
        ranker.zero_grad()
        value, student = objective_for(loss).compute(ranker, ranker, batch)
        assert student.shape == (2, 3) and torch.isfinite(value)
        assert value.item() == pytest.approx(loss(student.detach(), batch["teacher_scores"]).item(), rel=1e-5)
        value.backward()
        trainable = [(n, p) for n, p in ranker.named_parameters() if p.requires_grad]
        assert trainable and all(p.grad is not None for _, p in trainable), [n for n, p in trainable if p.grad is None]


# ------------------------------------------------------------ in-batch negatives alone
def test_in_batch_only_rows_cover_the_other_positives(tiny_model_dir, tiny_dataset):
    from ssft.data.examples import build_examples
    from ssft.models.dense import DenseDualEncoder

    dataset = load_dataset(str(tiny_dataset))
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=48, query_max_length=16)
    ranker = DenseDualEncoder.build(cfg, "full", {})
    ranker.train()
    examples = build_examples(dataset.qrels("train"), list(dataset.corpus), None)
    groups = TrainingGroups(examples, dataset, 0, seed=0)
    items = [groups[i] for i in range(4)]
    assert all(len(it["documents"]) == 1 for it in items)  # the positive alone: no explicit negative
    batch = RankerCollator(ranker)(items)
    loss, rows = RankingObjective(objective_for_contrastive()).compute(ranker, ranker, batch)
    # every query's row: its positive, then every document of the batch with its own positive masked out
    assert rows.shape == (4, 5)
    assert torch.isfinite(rows[:, 1:]).sum(1).tolist() == [3, 3, 3, 3]
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in ranker.parameters() if p.requires_grad)


def objective_for_contrastive():
    from ssft.losses.contrastive import ContrastiveLoss

    return ContrastiveLoss()


@pytest.mark.parametrize("architecture, extra, message", [
    ("cross", "", "data.num_negatives: 0 trains on in-batch negatives alone, which only model.architecture 'dense' has"),
    ("dense", "loss: {name: margin_mse}\n", "loss.name: 'margin_mse' distils teacher scores: set data.train"),
])
def test_recipe_refuses_what_needs_explicit_negatives(tmp_path, tiny_model_dir, tiny_dataset, architecture, extra, message):
    from ssft.config.recipe import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(f"model: {{architecture: {architecture}, name: {tiny_model_dir}, max_length: 48}}\nadapter: full\n"
                    f"data: {{dataset: {tiny_dataset}, num_negatives: 0}}\n{extra}"
                    f"training: {{output_dir: {tmp_path / 'out'}}}\n")
    with pytest.raises(SsftError, match=message.replace("(", "\\(")):
        load_recipe(path)


# ------------------------------------------------------------ the BM25 index: built once, then loaded
def test_bm25_index_is_saved_and_reused(tiny_dataset, monkeypatch):
    import bm25s

    from ssft.firststage.bm25 import BM25

    dataset = load_dataset(str(tiny_dataset))
    calls = []
    original = bm25s.BM25.index
    monkeypatch.setattr(bm25s.BM25, "index", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    first = BM25(dataset, save=False)
    assert first.indexed and not first.folder.exists()  # a pipeline saves only once it writes
    first.save()
    expected = first.search(dataset.queries, 3)
    second = BM25(dataset)
    assert not second.indexed and len(calls) == 1  # the second run does not index
    assert second.search(dataset.queries, 3) == expected
    assert BM25(dataset, stem=True).indexed and len(calls) == 2  # another tokenisation: another key
    dataset.corpus["d1"].text += " changed"
    assert BM25(dataset).indexed and len(calls) == 3  # another corpus content: another key


# ------------------------------------------------------------ ssft-train end to end on data.train / in-batch only
@pytest.mark.parametrize("architecture, loss, data", [
    ("cross", "margin_mse", {"train": "SCORED", "num_negatives": 1}),
    ("dense", "listwise_kl", {"train": "SCORED", "num_negatives": 2}),
    ("dense", "contrastive", {"train": "IDS", "num_negatives": 1}),
    ("dense", "contrastive", {"num_negatives": 0}),
])
def test_run_recipe_on_training_sources(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch, architecture, loss, data):
    from ssft.config.recipe import recipe_from_dict
    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "logs"))
    files = {"SCORED": _jsonl(tmp_path / "scored.jsonl", [
        {"query_id": q, "document_ids": [d, *[x for x in ("d5", "d6", "d1") if x != d]][:3], "scores": [5.0, 1.0, 0.5]}
        for q, d in (("q1", "d1"), ("q2", "d2"), ("q3", "d3"), ("q4", "d4"))]),
        "IDS": _jsonl(tmp_path / "ids.jsonl", [{"query_id": q, "positive_id": d, "negative_ids": ["d5", "d6"]}
                                               for q, d in (("q1", "d1"), ("q2", "d2"), ("q3", "d3"))])}
    if "train" in data:
        data = {**data, "train": str(files[data["train"]])}
    out = tmp_path / "run"
    recipe = recipe_from_dict({
        "model": {"architecture": architecture, "name": str(tiny_model_dir), "max_length": 48, "query_max_length": 16},
        "adapter": {"method": "full"}, "loss": {"name": loss},
        "data": {"dataset": str(tiny_dataset), "validation_split": None, **data},
        "eval": {"depth": 5, "metrics": ["nDCG@10"]},
        "training": {"output_dir": str(out), "num_train_epochs": 1, "per_device_train_batch_size": 2, "use_cpu": True,
                     "report_to": []},
    }, "sources.yaml")
    results = run_recipe(recipe)
    assert "test" in results
    import os
    from pathlib import Path

    assert len(list((Path(os.environ["SSFT_CACHE"]) / "bm25").iterdir())) == 1  # the finished run cached its BM25 index
    info = json.loads((out / "run_info.json").read_text())
    assert info["train_loss"] > 0
    if "train" in data:
        assert f"rows of {data['train']}" in info["notes"][0]
    else:
        assert "in-batch negatives only" in info["notes"][0]


def test_run_recipe_records_dropped_negatives_in_data_warnings(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch):
    """An ids-form row listing a judged positive of the recipe's training qrels (data.train_split, here 'dev': q5-d6)
    as a negative trains without it, and run_info.json's data_warnings counts it."""
    from ssft.config.recipe import recipe_from_dict
    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "logs"))
    rows = _jsonl(tmp_path / "ids.jsonl", [{"query_id": "q5", "positive_id": "d1", "negative_ids": ["d6", "d2", "d6"]},
                                           {"query_id": "q2", "positive_id": "d2", "negative_ids": ["d2", "d3"]}])
    out = tmp_path / "run"
    recipe = recipe_from_dict({
        "model": {"architecture": "dense", "name": str(tiny_model_dir), "max_length": 48, "query_max_length": 16},
        "adapter": {"method": "full"}, "loss": {"name": "contrastive"},
        "data": {"dataset": str(tiny_dataset), "train_split": "dev", "validation_split": None, "train": str(rows),
                 "num_negatives": 1},
        "eval": {"depth": 5, "metrics": ["nDCG@10"]},
        "training": {"output_dir": str(out), "num_train_epochs": 1, "per_device_train_batch_size": 2, "use_cpu": True,
                     "report_to": []},
    }, "sources.yaml")
    run_recipe(recipe)
    warnings = json.loads((out / "run_info.json").read_text())["data_warnings"]
    assert f"data.train: {rows}: 1 negative judged relevant to the row's query by the training qrels (dev, grade >= 1) " \
           "dropped (row 1)" in warnings
    assert f"data.train: {rows}: 1 negative listed again in the same row dropped (row 1)" in warnings
    assert f"data.train: {rows}: 1 negative equal to the row's positive dropped (row 2)" in warnings


# ------------------------------------------------------------ data.max_train_queries / max_positives_per_query on data.train
def _all_pairs_qrels() -> dict[str, dict[str, int]]:
    return {"q1": {"d1": 1, "d2": 1, "d3": 1}, "q2": {"d2": 1, "d4": 1}, "q3": {"d3": 1, "d5": 1, "d6": 1},
            "q4": {"d4": 1}, "q5": {"d6": 1, "d1": 1}}


@pytest.mark.parametrize("max_queries, max_positives, seed", [(3, 1, 0), (2, 2, 7), (3, None, 1), (None, 1, 3), (9, 1, 0)])
def test_train_rows_subsampled_as_the_qrels_are(tmp_path, tiny_dataset, max_queries, max_positives, seed):
    from ssft.data.examples import build_examples, subsample_queries

    dataset = load_dataset(str(tiny_dataset))
    qrels = _all_pairs_qrels()
    # two rows for (q1, d1): every row of a kept (query, positive) stays
    rows = [{"query_id": q, "positive_id": d, "negative_ids": ["d5"] if d != "d5" else ["d4"]}
            for q in sorted(qrels, reverse=True) for d in qrels[q]] + [{"query_id": "q1", "positive_id": "d1",
                                                                         "negative_ids": ["d6"]}]
    source = load_train_source(str(_jsonl(tmp_path / "ids.jsonl", rows)), dataset)
    kept = source.subsample(max_queries, max_positives, seed)
    expected = build_examples(subsample_queries(qrels, max_queries, seed), list(dataset.corpus), None, 1, max_positives, seed)
    assert {(ex.qid, ex.positive) for ex in kept.examples} == {(ex.qid, ex.positive) for ex in expected}
    assert len({ex.qid for ex in kept.examples}) == min(max_queries or 5, 5)
    if max_positives is not None:
        assert max(Counter(q for q, _ in {(ex.qid, ex.positive) for ex in kept.examples}).values()) <= max_positives
    assert [ex for ex in source.examples if ex in kept.examples] == kept.examples  # row order kept
    assert sum(ex.qid == "q1" and ex.positive == "d1" for ex in kept.examples) in (0, 2)
    again = source.subsample(max_queries, max_positives, seed)
    assert [(ex.qid, ex.positive) for ex in again.examples] == [(ex.qid, ex.positive) for ex in kept.examples]


def test_text_and_scored_rows_subsampled_by_query(tmp_path, tiny_dataset):
    dataset = load_dataset(str(tiny_dataset))
    text = load_train_source(str(_jsonl(tmp_path / "t.jsonl", [
        {"query": f"query {i % 4}", "positive": f"positive {i}", "negative": "n"} for i in range(12)])), dataset)
    kept = text.subsample(2, 1, 0)
    assert len({ex.query for ex in kept.examples}) == 2 and len(kept.examples) == 2
    assert {ex.query for ex in kept.examples} == set(random.Random(0).sample(sorted({f"query {i}" for i in range(4)}), 2))
    assert text.subsample(None, None, 0) is text
    scored = load_train_source(str(_jsonl(tmp_path / "s.jsonl", [
        {"query_id": q, "document_ids": [d, "d5", "d6"], "scores": [3.0, 2.0, 1.0]}
        for q, d in (("q1", "d1"), ("q1", "d2"), ("q2", "d2"), ("q3", "d3"))])), dataset)
    one = scored.subsample(None, 1, 0)
    assert sorted(ex.qid for ex in one.examples) == ["q1", "q2", "q3"]  # q1 keeps one of its two positives
    assert scored.subsample(1, None, 5).query_texts(dataset)[0] in dataset.queries.values()


# ------------------------------------------------------------ the collapse monitor on a text-form data.train
def test_collapse_monitor_samples_the_text_rows_queries(tiny_model_dir, tiny_dataset, tmp_path):
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from ssft.models.dense import DenseDualEncoder
    from ssft.training.callbacks.collapse_monitor import CollapseMonitorCallback

    dataset = load_dataset(str(tiny_dataset))
    source = load_train_source(str(_jsonl(tmp_path / "t.jsonl", [
        {"query": "novel query one", "positive": "vitamin d text", "negative": "sugar"},
        {"query": "novel query two", "positive": "statin text", "negative": "coffee"},
        {"query": "novel query one", "positive": "fish text", "negative": "sleep"}])), dataset)
    torch.manual_seed(0)
    model = DenseDualEncoder.build(ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=48,
                                               query_max_length=16), "full", {})
    # given no setup context, it reads the training set the Trainer hands it (TextGroups: no query ids)
    monitor = CollapseMonitorCallback(sample_size=4)
    loader = SimpleNamespace(dataset=TextGroups(source.examples, dataset, 1, seed=0))
    monitor.on_train_begin(SimpleNamespace(output_dir=str(tmp_path)), TrainerState(), TrainerControl(), model=model,
                           train_dataloader=loader)
    assert sorted(monitor.queries) == ["novel query one", "novel query two"]
    assert monitor.history[0]["query"]["samples"] == 2
    # with the pipeline's context: the source's query texts, not the dataset's queries
    monitor = CollapseMonitorCallback(sample_size=4)
    monitor.setup(dataset=dataset, validation_qrels=None, train_qrels={}, train_queries=source.query_texts(dataset))
    assert sorted(monitor.queries) == ["novel query one", "novel query two"] and len(monitor.documents) == 4


def test_run_recipe_text_rows_subsampled_with_the_collapse_monitor(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch):
    from ssft.config.recipe import recipe_from_dict
    from ssft.pipeline.run import run_recipe

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "logs"))
    rows = _jsonl(tmp_path / "t.jsonl", [{"query": f"text query {i % 3}", "positive": f"positive text {i}",
                                          "negative_1": "negative a", "negative_2": "negative b"} for i in range(9)])
    out = tmp_path / "run"
    recipe = recipe_from_dict({
        "model": {"architecture": "dense", "name": str(tiny_model_dir), "max_length": 48, "query_max_length": 16},
        "adapter": {"method": "full"}, "loss": {"name": "contrastive"},
        "data": {"dataset": str(tiny_dataset), "validation_split": None, "train": str(rows), "max_train_queries": 2,
                 "max_positives_per_query": 1, "num_negatives": 1},
        "eval": {"depth": 5, "metrics": ["nDCG@10"]},
        "callbacks": [{"name": "collapse_monitor", "every_steps": 1}],
        "training": {"output_dir": str(out), "num_train_epochs": 1, "per_device_train_batch_size": 2, "use_cpu": True,
                     "report_to": []},
    }, "sources.yaml")
    run_recipe(recipe)
    info = json.loads((out / "run_info.json").read_text())
    assert info["notes"][0].startswith(f"training: 2 rows of {rows} (text form) (2 queries drawn, at most 2; at most 1 "
                                       "positive(s) per query)")
    history = json.loads((out / "collapse.json").read_text())["history"]
    assert history and all(h["query"]["samples"] == 2 for h in history)  # the 2 training queries, not the dataset's 6
