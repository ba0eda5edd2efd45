"""Real data (../shared/data or $SSFT_DATA_HOME) and real all-MiniLM-L6-v2 weights (pip-shipped)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def data_home() -> str:
    return os.environ.get("SSFT_DATA_HOME") or str(SHARED_DATA)


def test_quickstart_recipe_shortened_on_scifact(tmp_path):
    """The quickstart recipe itself, cut down to a minute (documents cut at 8 tokens, the corpus cut to 500 around
    the judged ones): fine-tunes the dense model with semi-Siamese LoRA on SciFact, validates on training queries held
    out of training, scores its start, keeps the best validation evaluation, retrieves from the (cut) corpus for the
    test queries, says how the corpus was cut, and writes the output contract."""
    out = tmp_path / "qs"
    env = {**os.environ, "SSFT_DATA_HOME": data_home(), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "ssft.train", str(ROOT / "recipes" / "quickstart.yaml"), f"training.output_dir={out}",
           "data.max_train_queries=12", "data.max_positives_per_query=1", "data.max_validation_queries=8",
           "data.max_test_queries=16", "data.max_documents=500", "model.max_length=8", "model.query_max_length=16",
           "training.max_steps=4", "training.eval_strategy=steps", "training.eval_steps=4",
           "training.per_device_train_batch_size=4"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"test", "bm25", "start"}  # the start ranks as the checkpoint does: always scored
    info = json.loads((out / "run_info.json").read_text())
    assert len(info["validation_history"]) == 2  # epoch 0 (the starting model) + the trained model
    assert info["validation_history"][0]["step"] == 0
    assert 0 < info["trainable_parameters"] < 300_000 < info["total_parameters"]
    assert isinstance(info["weights_changed"], bool)
    assert any(note.startswith("corpus: 500 of 5,183 documents (data.max_documents 500") for note in info["notes"])
    # BM25's row is the BM25 run itself: recompute it from the written run file
    from ssft.data.beir import load_dataset
    from ssft.data.examples import subsample_queries
    from ssft.data.trec import read_run
    from ssft.eval.metrics import evaluate_run

    ds = load_dataset(str(Path(data_home()) / "scifact"))
    qrels = subsample_queries(ds.qrels("test"), 16, 0)  # the recipe's data.sample_seed
    bm25 = read_run(out / "run.bm25.test.trec")
    assert set(bm25) <= set(qrels) and len(bm25) >= 14
    assert evaluate_run(qrels, bm25, ["nDCG@10"])[0]["nDCG@10"] == pytest.approx(metrics["bm25"]["nDCG@10"])
    # the dense model retrieves from the cut corpus: every test query gets 100 of its documents, as BM25's do
    trained = read_run(out / "run.test.trec")
    assert set(trained) == set(qrels) and all(len(docs) == 100 for docs in trained.values())
    kept = {d for run in (trained, bm25) for docs in run.values() for d in docs}
    assert len(kept) <= 500
    assert "nDCG@10" in result.stdout and "bm25" in result.stdout
    # validation: held-out training queries, none of them trained on
    assert "8 queries of train held out of training" in result.stderr + result.stdout


def test_bm25_reference_figure_on_scifact():
    """bm25s with English stopwords reproduces the DESIGN.md reference: SciFact test nDCG@10 0.662."""
    from ssft.data.beir import load_dataset
    from ssft.eval.metrics import evaluate_run
    from ssft.firststage.bm25 import BM25

    ds = load_dataset(str(Path(data_home()) / "scifact"))
    qrels = ds.qrels("test")
    run = BM25(ds).search({q: ds.queries[q] for q in qrels}, 100)
    metrics, _ = evaluate_run(qrels, run, ["nDCG@10", "R@100"])
    assert metrics["nDCG@10"] == pytest.approx(0.662, abs=0.002)
    assert metrics["R@100"] == pytest.approx(0.876, abs=0.002)


def test_nfcorpus_loads_with_crlf_qrels():
    from ssft.data.beir import load_dataset

    ds = load_dataset(str(Path(data_home()) / "nfcorpus"))
    assert len(ds.corpus) == 3633 and len(ds.queries) == 3237
    assert len(ds.qrels("test")) == 323 and len(ds.qrels("dev")) == 324 and len(ds.qrels("train")) == 2590
    assert len(ds.qrels("test_short")) == 192
    assert not any("\r" in d for rels in ds.qrels("test").values() for d in rels)
