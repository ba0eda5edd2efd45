"""ssft-mine: the false-negative filters on a toy ranking with known scores, and the CLI end to end."""
from __future__ import annotations

import json

import pytest
import torch

from ssft.core.errors import SsftError
from ssft.eval.mining import MiningFilters, filter_reason, mine_negatives, teacher_run, to_records

# query q: positive p scored 10; candidates ranked by the miner's scores
CANDIDATES = {"q": {"p": 10.0, "twin": 9.8, "close": 9.0, "mid": 7.0, "far": 2.0, "other_pos": 9.9}}
QRELS = {"q": {"p": 1, "other_pos": 1, "judged_negative": 0}}
POSITIVE_SCORES = {"q": {"p": 10.0, "other_pos": 9.9}}


def test_margin_filters_a_positive_like_document_and_keeps_one_below():
    rows, report = mine_negatives(CANDIDATES, {"q": {"p": 1}}, {"q": {"p": 10.0}}, MiningFilters(absolute_margin=0.5))
    assert [(r.positive, r.negatives) for r in rows] == [("p", ["close", "mid", "far"])]  # twin (9.8 > 9.5) is filtered
    assert rows[0].scores == [9.0, 7.0, 2.0]
    assert report.removed == {"absolute_margin": 2}  # twin and the unjudged other_pos (9.9)
    rows, _ = mine_negatives(CANDIDATES, {"q": {"p": 1}}, {"q": {"p": 10.0}}, MiningFilters(relative_margin=0.05))
    assert rows[0].negatives == ["close", "mid", "far"]  # 9.8 > 9.5 = 10 * 0.95 removed, 9.0 kept
    rows, _ = mine_negatives(CANDIDATES, {"q": {"p": 1}}, {"q": {"p": 10.0}}, MiningFilters(max_score=8.0))
    assert rows[0].negatives == ["mid", "far"]


def test_judged_documents_are_never_negatives_and_rank_range_counts_them():
    rows, report = mine_negatives(CANDIDATES, QRELS, POSITIVE_SCORES, MiningFilters(range_min=3, range_max=5))
    # ranking: p 1, other_pos 2, twin 3, close 4, mid 5, far 6 -> ranks 3..5 are twin, close, mid
    assert [(r.positive, r.negatives) for r in rows] == [("other_pos", ["twin", "close", "mid"]),
                                                       ("p", ["twin", "close", "mid"])]
    assert report.removed == {"rank_range": 2}  # far, once per positive
    # the judged-relevant documents (p at rank 1, other_pos at 2) are excluded first, counted once for the query
    assert report.as_dict()["judged_excluded"] == 2 and report.as_dict()["judged_excluded_by_rank"] == {"1-10": 2}
    assert report.queries == 1 and report.candidates == 8  # 4 unjudged candidates per positive
    rows, report = mine_negatives(CANDIDATES, QRELS, POSITIVE_SCORES, MiningFilters(num_negatives=1, absolute_margin=0.5))
    # against other_pos (9.9) the margin keeps close (9.0 <= 9.4); the cap of 1 keeps the best survivor only
    assert [r.negatives for r in rows] == [["close"], ["close"]]
    assert report.removed["num_negatives"] == 4


def test_rows_left_without_negatives_are_dropped_and_reported():
    rows, report = mine_negatives(CANDIDATES, {"q": {"p": 1}}, {"q": {"p": 10.0}}, MiningFilters(max_score=1.0))
    assert rows == [] and report.rows_dropped == 1 and report.queries == 0
    rows, report = mine_negatives(CANDIDATES, {"q": {"p": 1}}, {"q": {"p": 10.0}},
                                  MiningFilters(max_score=1.0, min_negatives=0))
    assert len(rows) == 1 and rows[0].negatives == []


def test_filter_reason_boundaries():
    f = MiningFilters(absolute_margin=1.0)
    assert filter_reason(1, 9.0, 10.0, f) is None  # exactly at the margin: kept
    assert filter_reason(1, 9.01, 10.0, f) == "absolute_margin"
    with pytest.raises(SsftError, match="relative_margin"):
        MiningFilters(relative_margin=1.5).check()


def test_records_in_the_data_train_forms():
    rows, _ = mine_negatives(CANDIDATES, {"q": {"p": 1}}, {"q": {"p": 10.0}}, MiningFilters(absolute_margin=0.5))
    assert to_records(rows, "ids") == [{"query_id": "q", "positive_id": "p", "negative_ids": ["close", "mid", "far"]}]
    assert to_records(rows, "scored")[0]["scores"] == [10.0, 9.0, 7.0, 2.0]  # the miner's scores
    teacher = {"q": {d: float(i) for i, d in enumerate(teacher_run(rows)["q"])}}
    assert to_records(rows, "scored", teacher)[0] == {"query_id": "q", "document_ids": ["p", "close", "mid", "far"],
                                                      "scores": [0.0, 1.0, 2.0, 3.0]}


def test_ssft_mine_bm25_then_train_reads_it(tmp_path, capsys):
    from ssft.cli.mine import main
    from ssft.data.beir import load_dataset
    from ssft.data.hf_sources import load_train_source
    from tests.helpers import write_synthetic_beir

    data = write_synthetic_beir(tmp_path / "syn")
    out = tmp_path / "mined.jsonl"
    assert main(["--data", str(data), "--bm25", "--output", str(out), "--depth", "20", "--relative-margin", "0.1",
                 "--num-negatives", "5"]) == 0
    info = json.loads(out.with_suffix(".mining.json").read_text())
    assert info["miner"] == "bm25" and info["command"][0] == "ssft-mine"
    assert info["rows"] > 0 and 0 < info["negatives_per_row"] <= 5 and info["removed"]["relative_margin"] > 0
    assert info["queries"] == len({json.loads(line)["query_id"] for line in out.read_text().splitlines()}) > 0
    assert info["judged_excluded"] == sum(info["judged_excluded_by_rank"].values()) > 0
    dataset = load_dataset(str(data))
    source = load_train_source(str(out), dataset)
    assert source.form == "ids" and {ex.qid for ex in source.examples} <= set(dataset.qrels("train"))
    assert all(ex.positive not in ex.negatives for ex in source.examples)
    assert main(["--data", str(data), "--bm25", "--output", str(out)]) == 2  # no --overwrite: refused
    assert "exists; pass --overwrite" in capsys.readouterr().err


def test_ssft_mine_dense_with_a_teacher(tiny_dataset, tiny_model_dir, tmp_path):
    from ssft.cli.mine import main
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    torch.manual_seed(0)
    teacher = CrossEncoder.build(ModelConfig(architecture="cross", name=str(tiny_model_dir), max_length=48), "full", {})
    teacher.save(tmp_path / "teacher" / "model")
    out = tmp_path / "scored.jsonl"
    assert main(["--data", str(tiny_dataset), "--model", str(tiny_model_dir), "--output", str(out), "--depth", "4",
                 "--teacher", str(tmp_path / "teacher"), "--max-length", "48", "--query-max-length", "16",
                 "--precision", "fp32", "--backend", "torch"]) == 0
    assert json.loads(out.with_suffix(".mining.json").read_text())["served"] == {"miner": "fp32", "teacher": "fp32"}
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records and all(len(r["document_ids"]) == len(r["scores"]) >= 2 for r in records)
    # the scores are the teacher's: its own score of the first pair
    first = records[0]
    from ssft.data.beir import load_dataset

    dataset = load_dataset(str(tiny_dataset))
    teacher.eval()
    with torch.no_grad():
        expected = teacher(**teacher.tokenize([dataset.queries[first["query_id"]]],
                                              [dataset.corpus[first["document_ids"][0]].full_text])).item()
    assert first["scores"][0] == pytest.approx(expected, abs=1e-4)


def test_a_mining_teacher_is_anything_ssft_load_takes(tiny_dataset, tiny_model_dir, tmp_path):
    """``teacher`` takes what ``ssft.load`` takes: a loaded ranker (its scores, the caller's object left as it was)
    and a checkpoint folder that is no ssft run (imported), each recorded in .mining.json."""
    import ssft
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    torch.manual_seed(0)
    teacher = CrossEncoder.build(ModelConfig(architecture="cross", name=str(tiny_model_dir), max_length=48), "full", {})
    teacher.train()
    out = tmp_path / "scored.jsonl"
    ssft.mine(str(tiny_dataset), out, model=str(tiny_model_dir), depth=4, teacher=teacher, max_length=48,
              query_max_length=16)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records and all(len(r["document_ids"]) == len(r["scores"]) >= 2 for r in records)
    assert teacher.training  # the caller's ranker: not switched to eval mode by the call
    info = json.loads(out.with_suffix(".mining.json").read_text())
    assert info["teacher"] == str(tiny_model_dir)  # the loaded teacher's checkpoint
    imported = tmp_path / "imported.jsonl"
    ssft.mine(str(tiny_dataset), imported, model=str(tiny_model_dir), depth=4, teacher=str(tiny_model_dir),
              max_length=48, query_max_length=16)
    assert json.loads(imported.with_suffix(".mining.json").read_text())["teacher"] == str(tiny_model_dir)
    assert [json.loads(line)["scores"] for line in imported.read_text().splitlines()]


def test_mining_serves_the_miner_and_the_teacher_at_the_precision_and_backend_asked(tiny_dataset, tiny_model_dir,
                                                                                    tmp_path):
    """``precision`` / ``backend`` reach both models, as ssft-rerank's: on OpenVINO fp32 the rows and the teacher's
    scores are torch fp32's (within OpenVINO's float error), and .mining.json records how each model scored."""
    pytest.importorskip("openvino")
    import ssft
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    torch.manual_seed(0)
    teacher = CrossEncoder.build(ModelConfig(architecture="cross", name=str(tiny_model_dir), max_length=48), "full", {})
    mined = {}
    for backend in ("torch", "openvino"):
        out = tmp_path / f"{backend}.jsonl"
        ssft.mine(str(tiny_dataset), out, model=str(tiny_model_dir), depth=4, teacher=teacher, max_length=48,
                  query_max_length=16, precision="fp32", backend=backend)
        mined[backend] = [json.loads(line) for line in out.read_text().splitlines()]
        served = json.loads(out.with_suffix(".mining.json").read_text())["served"]
        expected = "fp32" if backend == "torch" else "openvino:fp32"
        assert served == {"miner": expected, "teacher": expected}
    assert [(r["query_id"], r["document_ids"]) for r in mined["torch"]] == [
        (r["query_id"], r["document_ids"]) for r in mined["openvino"]]
    for on_torch, on_openvino in zip(mined["torch"], mined["openvino"]):
        assert on_openvino["scores"] == pytest.approx(on_torch["scores"], abs=1e-3)


def test_int8_mining_calibrates_both_models_on_what_they_serve(tiny_dataset, tiny_model_dir, tmp_path):
    """int8: the miner is calibrated on the queries and corpus, the teacher on the kept pairs; both then serve int8."""
    pytest.importorskip("openvino")
    import ssft
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    torch.manual_seed(0)
    teacher = CrossEncoder.build(ModelConfig(architecture="cross", name=str(tiny_model_dir), max_length=48), "full", {})
    out = tmp_path / "int8.jsonl"
    ssft.mine(str(tiny_dataset), out, model=str(tiny_model_dir), depth=4, teacher=teacher, max_length=48,
              query_max_length=16, precision="int8", backend="openvino")
    served = json.loads(out.with_suffix(".mining.json").read_text())["served"]
    assert served == {"miner": "openvino:int8", "teacher": "openvino:int8"}
    assert all(len(json.loads(line)["scores"]) >= 2 for line in out.read_text().splitlines())


@pytest.mark.parametrize("precision, backend, says", [
    ("fp16", "auto", "--precision"), ("int8", "torch", "int8 runs on OpenVINO"), ("fp32", "onnx", "--backend")])
def test_mining_refuses_a_precision_or_backend_it_cannot_serve_before_writing(tiny_dataset, tiny_model_dir, tmp_path,
                                                                              precision, backend, says):
    import ssft

    out = tmp_path / "mined.jsonl"
    with pytest.raises(SsftError, match=says):
        ssft.mine(str(tiny_dataset), out, model=str(tiny_model_dir), depth=4, max_length=48, query_max_length=16,
                  precision=precision, backend=backend)
    assert not out.exists() and not out.with_suffix(".mining.json").exists()
