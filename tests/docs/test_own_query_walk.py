"""A new user's walk, on a tiny model: from README's Python example to their own queries over their own corpus,
from Python (``ssft.index`` / ``Index.search`` / ``ssft.Index.load``) and from the shell (``ssft-retrieve --corpus
--queries``, a real process), each step as the docs show it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

import ssft
from ssft.config.recipe import ModelConfig
from ssft.models.dense import DenseDualEncoder

DOCS = ["Statins block cholesterol synthesis in the liver.", "Paris is in France.", "Vitamin D keeps bones strong."]


def test_own_queries_over_own_corpus_from_python_and_the_shell(tiny_model_dir, tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=32)
    DenseDualEncoder.build(cfg, "full", {}).save(tmp_path / "model")
    model = ssft.load(tmp_path / "model", precision="fp32")
    # README: a list of texts, searched at once
    hits = ssft.index(model, DOCS).search(["do statins lower cholesterol?", "bone health"], top_k=2)
    assert len(hits) == 2 and all(len(row) == 2 and set(row[0]) == {"corpus_id", "score"} for row in hits)
    # docs/api.md: a corpus file kept in a folder, reopened later without encoding again
    (tmp_path / "corpus.tsv").write_text("".join(f"doc{i}\tTitle {i}\t{t}\n" for i, t in enumerate(DOCS)))
    kept = ssft.index(str(tmp_path / "model"), tmp_path / "corpus.tsv", tmp_path / "index").search("statins", top_k=3)
    assert ssft.Index.load(tmp_path / "index").search("statins", top_k=3) == kept
    # docs/evaluation.md: the same from the shell, a real process
    (tmp_path / "queries.txt").write_text("do statins lower cholesterol?\nbone health\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run([sys.executable, "-m", "ssft.cli.retrieve", str(tmp_path / "model"), "--corpus",
                             str(tmp_path / "corpus.tsv"), "--queries", str(tmp_path / "queries.txt"), "--output",
                             str(tmp_path / "search"), "--depth", "2"], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [json.loads(line) for line in (tmp_path / "search" / "results.jsonl").read_text().splitlines()]
    assert [line["query"] for line in lines] == ["do statins lower cholesterol?", "bone health"]
    assert all(len(line["hits"]) == 2 and line["hits"][0]["title"].startswith("Title ") for line in lines)
    assert (tmp_path / "search" / "run.trec").read_text().count("\n") == 4
