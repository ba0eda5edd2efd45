"""Writes the model folders in this directory: tiny random rankers of every architecture as ssft saved them before
the per-architecture model configs (git commit 8f0bba6), plus ``expected.json`` (the scores that code gave a few
pairs). ``tests/models/test_legacy_models.py`` loads them with the current code and checks the scores. Kept for the record:
rerunning it with later code writes folders of that code, not of 8f0bba6. Run from the repository root:
``PYTHONPATH=. python tests/models/legacy_models/make_legacy_models.py`` (the folders here were written with
``PYTHONPATH`` on an export of that commit's ``ssft/``)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from transformers import BertConfig, BertModel, BertTokenizerFast

from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS

HERE = Path(__file__).resolve().parent
WORDS = ["vitamin", "bone", "statin", "heart", "fish", "oil", "sugar", "sleep", "memory", "coffee", "liver", "diet",
         "and", "the", "of", "in", "risk", "health", "drugs", "lower", "omega", "blood", "tea", "brain"]
PAIRS = [("vitamin bone", "vitamin and bone health"), ("coffee liver", "coffee and the liver"),
         ("fish oil", "sleep and memory in the brain"), ("heart risk", "statin drugs lower heart risk")]


def tiny_bert(folder: Path, seed: int, hidden: int = 16, layers: int = 2) -> Path:
    """A tiny random BERT with a 90-token WordPiece vocabulary (a few KB of weights)."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = (["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(".,;:!?'\"()-")
             + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [f"##{chr(c)}" for c in range(ord("a"), ord("z") + 1)]
             + WORDS)
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, pad_token_id=0)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main() -> None:
    work = HERE / "_work"
    shutil.rmtree(work, ignore_errors=True)
    query_base = tiny_bert(work / "query_bert", seed=1)
    document_base = tiny_bert(work / "document_bert", seed=2, hidden=24)
    models = {
        "cross_classifier": (dict(architecture="cross", head="classifier"), "full", {}),
        "cross_cls_linear": (dict(architecture="cross", head="cls_linear"), "full", {}),
        "cross_dual_pooled": (dict(architecture="cross", head="dual_pooled", dual_pooling="segment_mean"), "full", {}),
        "twin_combiner": (dict(architecture="twin", pooling="cls", scorer="combiner"), "full", {}),
        "twin_cosine": (dict(architecture="twin", pooling="mean", scorer="cosine"), "full", {}),
        "colbert": (dict(architecture="colbert", colbert_dim=8), "full", {}),
        "dense": (dict(architecture="dense", pooling="cls", projection_dim=8, normalize=False, score_scale=1.0,
                       query_layers=1), "full", {}),
        "dense_two_towers": (dict(architecture="dense", document_name=str(document_base), projection_dim=12,
                                  score_scale=10.0), "full", {}),
    }
    for index, (name, (keys, method, options)) in enumerate(models.items()):
        torch.manual_seed(100 + index)
        cfg = ModelConfig(name=str(query_base), max_length=48, query_max_length=12, **keys)
        ranker = MODELS.get(keys["architecture"]).build(cfg, method, options)
        with torch.no_grad():  # every weight away from its initial value, so a weight lost in loading shows
            for p in ranker.parameters():
                if p.requires_grad:
                    p.add_(0.05 * torch.randn_like(p))
        ranker.eval()
        with torch.no_grad():
            scores = ranker(**ranker.tokenize([q for q, _ in PAIRS], [d for _, d in PAIRS]))
        folder = HERE / name
        shutil.rmtree(folder, ignore_errors=True)
        ranker.save(folder)
        spec_file = folder / "ssft_model.json"  # the tower paths of this machine, written relative to this folder
        spec_file.write_text(spec_file.read_text().replace(str(work), "BASE"))
        (folder / "expected.json").write_text(json.dumps({"pairs": PAIRS, "scores": scores.tolist()}, indent=1) + "\n")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
