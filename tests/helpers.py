"""Shared test steps."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.models import load_ranker


def _torch_runs_bf16() -> bool:
    """Whether torch's CPU kernels (oneDNN) compute bfloat16 here at all: not on a CPU without AVX-512."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


# a test that asks torch for bf16 explicitly: on a CPU whose oneDNN has no bf16 kernels it cannot run at all
needs_torch_bf16 = pytest.mark.skipif(not _torch_runs_bf16(), reason="this CPU's oneDNN has no bfloat16 kernels "
                                                                      "(no AVX-512): torch cannot compute bf16 here")


def load_script(path: Path):
    """A script that is not part of the package (benchmarks/, recipes/), imported as a module from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def save_tiny_bert(path: Path, hidden_size: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A tiny random BERT (4 heads, intermediate 64) saved under ``path`` with the real MiniLM tokenizer
    (offline, shipped by pip), so tests tokenise real text without any download."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from ssft.core.hub import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("sentence-transformers/all-MiniLM-L6-v2"))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    BertModel(config, add_pooling_layer=False).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def assert_save_load_round_trip(ranker, folder: Path, queries: list[str], documents: list[str]):
    """Move every trainable weight off its initial value (so a weight lost in saving would show), save, load,
    and check the loaded ranker scores the pairs identically and trains nothing. Returns the loaded ranker."""
    with torch.no_grad():
        for p in ranker.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    ranker.eval()
    with torch.no_grad():
        expected = ranker(**ranker.tokenize(queries, documents))
    ranker.save(folder)
    loaded = load_ranker(folder)
    assert type(loaded) is type(ranker)
    with torch.no_grad():
        got = loaded(**loaded.tokenize(queries, documents))
    torch.testing.assert_close(got, expected)
    assert not any(p.requires_grad for p in loaded.parameters())
    return loaded


def move_trainable_weights(model, scale: float = 0.2) -> None:
    """Add scale x N(0, 1) noise to every trainable weight, so that a weight lost on the way (export, import, reload)
    shows in the scores."""
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn_like(p))


def write_synthetic_beir(root: Path, queries: int = 60, docs: int = 80, seed: int = 0) -> Path:
    """A BEIR folder of random-word documents and queries (each query shares words with its one relevant
    document): big enough for tens of training steps, small enough to train in seconds on a tiny model."""
    import json
    import random

    rng = random.Random(seed)
    words = ["vitamin", "bone", "statin", "heart", "fish", "oil", "sugar", "sleep", "memory", "coffee", "liver",
             "cancer", "diet", "protein", "fiber", "iron", "blood", "pressure", "salt", "tea", "exercise", "brain"]
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    texts = {f"d{i}": " ".join(rng.choices(words, k=12)) for i in range(docs)}
    with open(root / "corpus.jsonl", "w") as fh:
        for doc_id, text in texts.items():
            fh.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    rels = {}
    with open(root / "queries.jsonl", "w") as fh:
        for i in range(queries):
            doc_id = f"d{rng.randrange(docs)}"
            rels[f"q{i}"] = doc_id
            fh.write(json.dumps({"_id": f"q{i}", "text": " ".join(rng.sample(texts[doc_id].split(), 3))}) + "\n")
    ids = list(rels)
    splits = {"train": ids[: queries * 2 // 3], "dev": ids[queries * 2 // 3: queries * 5 // 6], "test": ids[queries * 5 // 6:]}
    for split, qids in splits.items():
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                                     + "".join(f"{q}\t{rels[q]}\t1\n" for q in qids))
    return root


def tiny_frozen_ranker(model_dir, architecture: str = "dense", nudge: float = 0.0):
    """A frozen ranker of ``architecture`` (dense or colbert, 16 dimensions) on the tiny model, seeded; ``nudge`` moves
    its first weight (another model's encoding)."""
    torch.manual_seed(0)
    options = {"colbert_dim": 16, "query_max_length": 12} if architecture == "colbert" else {}
    cfg = ModelConfig(architecture=architecture, name=str(model_dir), max_length=32, **options)
    model = MODELS.get(architecture).build(cfg, "full", {}).eval().requires_grad_(False)
    if nudge:
        with torch.no_grad():
            next(model.parameters()).add_(nudge)
    return model
