import json
import math
import os
from pathlib import Path

import pytest

from ssft.models.interop import openvino
from tests.helpers import save_tiny_bert

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    # the ssft cache (embeddings, downloads) of a test is its own, never ~/.cache/ssft
    monkeypatch.setenv("SSFT_CACHE", str(tmp_path_factory.mktemp("ssft-cache")))
    # a test calling ssft.pipeline.run.prepare() directly points TensorBoard at its run through the environment;
    # monkeypatch puts the variable back as it was, so no later test's subprocess inherits that folder
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", os.environ.get("TENSORBOARD_LOGGING_DIR", ""))
    # a tiny random cross-encoder scores nearly alike whatever it reads, so int8's check of its own scores would serve
    # it at float: tests of int8's mechanics lift the limit, tests of the check (tests/models/test_int8_check.py) set it
    monkeypatch.setattr(openvino, "CHECK_LIMIT", math.inf)
    if not os.environ["TENSORBOARD_LOGGING_DIR"]:
        monkeypatch.delenv("TENSORBOARD_LOGGING_DIR")


@pytest.fixture(scope="session")
def wordnet_dir(tmp_path_factory) -> str:
    """Where the OEWN 2024 wn database is built, once per test session (~20-30 s; ssft.analysis.wordnet), unless
    WN_DATA_DIR names one already built."""
    return os.environ.get("WN_DATA_DIR") or str(tmp_path_factory.mktemp("wn") / "db")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random BERT (2 layers, hidden 32) saved with the real MiniLM tokenizer (offline, pip-shipped)."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), hidden_size=32, layers=2, seed=0)


@pytest.fixture
def tiny_dataset(tmp_path) -> Path:
    """A 6-document BEIR folder with CRLF qrels (as the official BEIR files have)."""
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    docs = {
        "d1": ("Vitamin D", "vitamin d and bone health in adults"),
        "d2": ("Statins", "statin drugs lower cholesterol and heart risk"),
        "d3": ("Fish oil", "omega three fatty acids in fish oil"),
        "d4": ("Sugar", "added sugar and diabetes risk"),
        "d5": ("Sleep", "sleep duration and memory"),
        "d6": ("Coffee", "coffee consumption and liver disease"),
    }
    with open(root / "corpus.jsonl", "w") as fh:
        for i, (t, x) in docs.items():
            fh.write(json.dumps({"_id": i, "title": t, "text": x}) + "\n")
    queries = {"q1": "vitamin d bones", "q2": "cholesterol statins", "q3": "fish oil omega", "q4": "sugar diabetes",
               "q5": "coffee liver", "q6": "sleep memory"}
    with open(root / "queries.jsonl", "w") as fh:
        for i, t in queries.items():
            fh.write(json.dumps({"_id": i, "text": t}) + "\n")
    train = [("q1", "d1"), ("q2", "d2"), ("q3", "d3"), ("q4", "d4")]
    (root / "qrels" / "train.tsv").write_bytes(("query-id\tcorpus-id\tscore\r\n"
                                                + "".join(f"{q}\t{d}\t1\r\n" for q, d in train)).encode())
    (root / "qrels" / "dev.tsv").write_bytes(b"query-id\tcorpus-id\tscore\r\nq5\td6\t1\r\n")
    (root / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\r\nq6\td5\t2\r\nq5\td6\t1\r\n")
    return root


def pytest_collection_modifyitems(config, items):
    if not SHARED_DATA.is_dir() and not os.environ.get("SSFT_DATA_HOME"):
        skip = pytest.mark.skip(reason="real data not found (../shared/data or SSFT_DATA_HOME)")
        for item in items:
            if "integration" in item.keywords:
                item.add_marker(skip)
