"""ssft-eval: one model on several datasets beside BM25 (ssft.pipeline.evaluate). The numbers are checked against the
same model and BM25 scored through ssft's own paths independently; refusals are one line, exit 2, nothing written."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from tests.cli_runner import run_cli
from tests.data.test_dataset_layouts import write_mteb_hub
from tests.helpers import write_synthetic_beir


@pytest.fixture(scope="module")
def saved_cross(tiny_model_dir, tmp_path_factory) -> Path:
    """A saved LoRA cross-encoder on the tiny BERT (untrained: scores, not quality, are what is checked)."""
    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    path = tmp_path_factory.mktemp("cross") / "model"
    CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), "lora", {"r": 4}).save(path)
    return path


@pytest.fixture
def two_datasets(tmp_path, tiny_dataset) -> list[str]:
    """A BEIR folder and a local copy of an MTEB-layout hub repository (built from another BEIR folder)."""
    synthetic = write_synthetic_beir(tmp_path / "synthetic", queries=24, docs=30)
    return [str(tiny_dataset), str(write_mteb_hub(synthetic, tmp_path / "hub"))]


def _dense(tiny_model_dir):
    from ssft.models.frozen import dense_reference, load_dense_model

    return load_dense_model(dense_reference(str(tiny_model_dir), "mean", 256, 64))


def _expected(dataset_spec: str, run_of, metrics=("nDCG@10", "R@100")):
    """BM25's and the model's aggregates and per-query values, computed here through ssft's own paths."""
    from ssft.eval.metrics import evaluate_run
    from ssft.firststage.bm25 import BM25

    dataset = load_dataset(dataset_spec)
    qrels = dataset.qrels("test")
    queries = {q: dataset.queries[q] for q in qrels}
    sparse = BM25(dataset, cache=False).search(queries, 100)
    model = evaluate_run(qrels, run_of(dataset, queries, sparse, qrels), list(metrics))
    return evaluate_run(qrels, sparse, list(metrics)), model


def test_full_retrieval_on_two_datasets(tmp_path, two_datasets, tiny_model_dir, capsys):
    from ssft.cli.eval import main
    from ssft.core.precision import set_precision
    from ssft.eval.retrieve import retrieve
    from ssft.eval.significance import paired_ttest

    out = tmp_path / "out"
    assert main([str(tiny_model_dir), "--datasets", ",".join(two_datasets), "--output", str(out), "--first-stage", "full",
                 "--depth", "10", "--precision", "fp32"]) == 0
    result = json.loads((out / "eval.json").read_text())
    assert [r["dataset"] for r in result["datasets"]] == two_datasets
    assert result["precision"] == "fp32" and result["first_stage"] == "full"
    model = set_precision(_dense(tiny_model_dir), "fp32")
    for row, spec in zip(result["datasets"], two_datasets):
        (bm25, bm25_pq), (want, want_pq) = _expected(spec, lambda d, q, s, r: retrieve(model, d, q, 10, 64))
        # R@100 of a top-10 retrieval is not computed (its cutoff is deeper than the depth), nor tested
        assert row["bm25"] == pytest.approx(bm25) and row["model"] == {"nDCG@10": pytest.approx(want["nDCG@10"]),
                                                                       "R@100": None}
        assert row["significance"]["R@100"] == {"pvalue": None, "statistic": None, "mark": ""}
        test = paired_ttest({q: v["nDCG@10"] for q, v in want_pq.items()},
                            {q: v["nDCG@10"] for q, v in bm25_pq.items()}, alternative="two-sided")
        if math.isnan(test.pvalue):
            assert row["significance"]["nDCG@10"]["pvalue"] is None
        else:
            assert row["significance"]["nDCG@10"]["pvalue"] == pytest.approx(test.pvalue)
    assert result["datasets"][1]["identity"]["layout"] == "hub-mteb"
    assert result["mean"]["model"]["R@100"] is None and result["not_computed"] == {"R@100": "its cutoff is deeper than "
                                                                                             "the depth (10)"}
    for side in ("model", "bm25"):
        assert result["mean"][side]["nDCG@10"] == pytest.approx(
            sum(r[side]["nDCG@10"] for r in result["datasets"]) / 2)
    table = (out / "eval.md").read_text()
    assert table.count("\n| ") == 3 and "| mean |" in table and "BM25 nDCG@10" in table
    assert table.strip() in capsys.readouterr().out
    assert (out / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    manifest = json.loads((out / ".ssft-outputs.json").read_text())
    assert manifest["tool"] == "ssft-eval" and set(manifest["outputs"]) == {"eval.json", "eval.md", "eval.png"}


def test_rerank_bm25_with_a_saved_cross_encoder(tmp_path, tiny_dataset, saved_cross):
    from ssft.data.examples import PairDataset
    from ssft.data.trec import top_k
    from ssft.firststage.bm25 import BM25
    from ssft.models import load_ranker
    from ssft.pipeline.evaluate import evaluate_datasets
    from ssft.training.prediction import prediction_trainer

    result = evaluate_datasets(saved_cross, [str(tiny_dataset)], first_stage="bm25", depth=10, precision="fp32")
    score = prediction_trainer(load_ranker(saved_cross), 64, None, "fp32").score

    def rerank(dataset, queries, sparse, qrels):
        first = BM25(dataset, cache=False).search(queries, 10)  # what ssft-rerank --first-stage bm25 --depth 10 reranks
        pairs = PairDataset(top_k({q: first[q] for q in qrels if first.get(q)}, 10), 10, dataset)
        return pairs.to_run(score(pairs))

    (bm25, _), (want, _) = _expected(str(tiny_dataset), rerank)
    row = result["datasets"][0]
    assert row["model"] == {"nDCG@10": pytest.approx(want["nDCG@10"]), "R@100": None}  # R@100: deeper than the depth
    assert row["bm25"] == pytest.approx(bm25)
    assert result["model"] == saved_cross.parent.name and "BM25 top-10" in result["what"]


def test_output_folder_contract(tmp_path, tiny_dataset, tiny_model_dir):
    from ssft.pipeline.evaluate import evaluate_datasets

    out = tmp_path / "out"
    args = dict(first_stage="full", depth=5, precision="fp32", output_dir=out)
    evaluate_datasets(str(tiny_model_dir), [str(tiny_dataset)], **args)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(SsftError, match=r"holds a finished ssft-eval result \(eval.json\).*--overwrite"):
        evaluate_datasets(str(tiny_model_dir), [str(tiny_dataset)], **args)
    first = (out / "eval.json").read_text()
    evaluate_datasets(str(tiny_model_dir), [str(tiny_dataset)], overwrite=True, **args)
    assert (out / "notes.txt").read_text() == "mine"
    again = json.loads((out / "eval.json").read_text())
    for result in (again, first := json.loads(first)):
        for row in result["datasets"]:
            row.pop("seconds")
    assert again == first
    with pytest.raises(SsftError, match=r"lies inside the dataset being evaluated"):
        evaluate_datasets(str(tiny_model_dir), [str(tiny_dataset)], first_stage="full", output_dir=tiny_dataset / "x")
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.json").write_text("{}")
    (other / "run.trec").write_text("")
    with pytest.raises(SsftError, match=r"holds no ssft-eval output"):
        evaluate_datasets(str(tiny_model_dir), [str(tiny_dataset)], first_stage="full", output_dir=other)


def test_rerank_cli_takes_a_hub_layout_copy(tmp_path, tiny_dataset, saved_cross):
    """--data of the other CLIs reads the hub layouts too (ssft-rerank here)."""
    from ssft.cli.rerank import main

    repo = write_mteb_hub(tiny_dataset, tmp_path / "hub")
    out = tmp_path / "rr"
    assert main([str(saved_cross), "--data", str(repo), "--first-stage", "bm25", "--split", "test", "--output", str(out),
                 "--depth", "3", "--precision", "fp32"]) == 0
    direct = tmp_path / "rr-direct"
    assert main([str(saved_cross), "--data", str(tiny_dataset), "--first-stage", "bm25", "--split", "test", "--output",
                 str(direct), "--depth", "3", "--precision", "fp32"]) == 0
    assert json.loads((out / "metrics.json").read_text()) == json.loads((direct / "metrics.json").read_text())


# ---------------------------------------------------------------- refusals: one line, exit 2, nothing written


def _bad(tmp_path, tiny_dataset, tiny_model_dir, saved_cross):
    data = tmp_path / "data"
    shutil.copytree(tiny_dataset, data)
    scifact_like = tmp_path / "nodev"
    shutil.copytree(tiny_dataset, scifact_like)
    (scifact_like / "qrels" / "dev.tsv").unlink()
    return {
        "unknown-dataset": ([str(tiny_model_dir), "--datasets", f"{data},{tmp_path / 'nowhere'}"],
                            "no BEIR folder (corpus.jsonl) at"),
        "missing-split": ([str(tiny_model_dir), "--datasets", f"{data},{scifact_like}", "--split", "dev"],
                          "no split 'dev' (have: test, train)"),
        "hub-offline": ([str(tiny_model_dir), "--datasets", f"{data},BeIR/nfcorpus"],
                        "dataset 'BeIR/nfcorpus': offline (HF_HUB_OFFLINE=1) and nothing of it is in the datasets cache"),
        "twice": ([str(tiny_model_dir), "--datasets", f"{data},{data}"], f"--datasets: {data} named twice"),
        "depth": ([str(tiny_model_dir), "--datasets", str(data), "--depth", "0"], "--depth must be >= 1"),
        "metric": ([str(tiny_model_dir), "--datasets", str(data), "--metrics", "nDCG@10,nope@3"], "--metrics"),
        "first-stage": ([str(tiny_model_dir), "--datasets", str(data), "--first-stage", "dense"],
                        "argument --first-stage: invalid choice"),
        "full-with-cross": ([str(saved_cross), "--datasets", str(data), "--first-stage", "full"],
                            "--first-stage full: full retrieval needs a single-vector dense model"),
        "no-model": ([str(tmp_path / "no-model"), "--datasets", str(data)], "no-model"),
        "output-is-dataset": ([str(tiny_model_dir), "--datasets", str(data), "--output", str(data)],
                              "holds no ssft-eval output"),
        "output-in-dataset": ([str(tiny_model_dir), "--datasets", str(data), "--output", str(data / "eval")],
                              "lies inside the dataset being evaluated"),
    }


CASES = ["unknown-dataset", "missing-split", "hub-offline", "twice", "depth", "metric", "first-stage", "full-with-cross",
         "no-model", "output-is-dataset", "output-in-dataset"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case, tmp_path, tiny_dataset, tiny_model_dir, saved_cross):
    argv, culprit = _bad(tmp_path, tiny_dataset, tiny_model_dir, saved_cross)[case]
    out = tmp_path / "out"
    if "--output" not in argv:
        argv = [*argv, "--output", str(out)]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    result = run_cli("ssft.cli.eval", argv, cwd=cwd, env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": tmp_path / "hf"})
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert lines[-1].startswith("ssft-eval: error: ") and culprit in lines[-1], lines[-1]
    assert sorted(str(p) for p in tmp_path.rglob("*") if not str(p).startswith(str(tmp_path / "hf"))) == before
    assert not out.exists()


def test_rerank_row_is_what_ssft_rerank_gives(tmp_path, saved_cross):
    """The model's row reranks the candidates ssft-rerank / ssft-train rerank (BM25 retrieved at --depth: with ties at
    the cut-off, the top-k of a deeper search can hold other documents), so the numbers are the same."""
    from ssft.cli.rerank import main as rerank
    from ssft.pipeline.evaluate import evaluate_datasets

    data = tmp_path / "ties"
    (data / "qrels").mkdir(parents=True)
    # twelve documents BM25 cannot tell apart for the query: which four a top-4 holds is a matter of tie-breaking
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"vitamin bone health {w}"})
                                               + "\n" for i, w in zip(range(1, 13), "abcdefghijkl")))
    (data / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": "vitamin"}) + "\n" for i in (1, 2)))
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td9\t1\nq2\td1\t1\n")
    # metrics whose cutoff is within the depth (a deeper one is n/a in ssft-eval's table)
    result = evaluate_datasets(saved_cross, [str(data)], first_stage="bm25", depth=4, precision="fp32",
                               metrics=["nDCG@4", "R@4", "RR@4"])
    assert rerank([str(saved_cross), "--data", str(data), "--first-stage", "bm25", "--split", "test", "--output",
                   str(tmp_path / "rr"), "--depth", "4", "--precision", "fp32", "--metrics", "nDCG@4,R@4,RR@4"]) == 0
    metrics = json.loads((tmp_path / "rr" / "metrics.json").read_text())
    assert result["datasets"][0]["model"] == pytest.approx(metrics["test"], abs=1e-9)


@pytest.mark.parametrize("first_stage", ["bm25", "full"])
def test_int8_calibrates_on_what_the_job_serves(monkeypatch, tiny_dataset, tiny_model_dir, saved_cross, first_stage):
    """Reranking: every (query, candidate) pair reranked, and nothing else; full retrieval: the queries and the
    corpus. (A cross-encoder given lone texts drops them: calibrating on queries paired with arbitrary documents left
    it a few dozen unrepresentative pairs.)"""
    from ssft.data.trec import top_k
    from ssft.firststage.bm25 import BM25
    from ssft.pipeline import evaluate

    seen: list = []

    def serve(ranker, backend, precision, calibration, inputs):
        seen.extend(calibration())
        return ranker, None, "fp32"

    monkeypatch.setattr(evaluate.openvino, "serve", serve)
    model = saved_cross if first_stage == "bm25" else _dense(tiny_model_dir)
    evaluate.evaluate_datasets(model, [str(tiny_dataset)], first_stage=first_stage, depth=10, precision="int8")
    dataset = load_dataset(str(tiny_dataset))
    qrels = dataset.qrels("test")
    queries = {q: dataset.queries[q] for q in qrels}
    if first_stage == "bm25":
        first = top_k(BM25(dataset, cache=False).search(queries, 10), 10)
        want = {(queries[q], dataset.corpus[d].full_text) for q in first for d in first[q]}
        assert len(seen) == len(want) == sum(len(v) for v in first.values()) and set(seen) == want
    else:
        assert {q for q, _ in seen[:len(queries)]} == set(queries.values())
        assert {d for d in seen if isinstance(d, str)} | {d for _, d in seen[:len(queries)]} == {
            doc.full_text for doc in dataset.corpus.values()}
