"""Encode a corpus once with a frozen document tower and keep its pooled, pre-projection vectors on disk.

    SSFT_DATA_HOME=../shared/data python benchmarks/dense_doc_cache.py --model sentence-transformers/all-mpnet-base-v2 \
        --data scifact --max-length 128 --out /tmp/mpnet_scifact_128.pt

DAFT's alignment stage freezes the document tower, so every evaluation of a stage-1 model (and of the
untrained model) can reuse these vectors (``load_into`` fills a DenseDualEncoder's frozen-document store).
Resumable: partial progress is saved every ``--save-every`` batches.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load_into(model, dataset, path: Path) -> int:
    """Fill ``model``'s frozen-document store from a cache file; returns how many documents it held."""
    from ssft.models.dense import row_keys

    saved = torch.load(path)
    if saved["max_length"] != model.spec["max_length"] or saved["model"] != model.spec["document_name"]:
        raise SystemExit(f"{path}: made for {saved['model']} at max_length {saved['max_length']}, not this model")
    ids = [d for d in saved["doc_ids"] if d in dataset.corpus]
    for start in range(0, len(ids), 256):
        chunk = ids[start : start + 256]
        tok = model.tokenize_documents([dataset.corpus[d].full_text for d in chunk])
        for d, key in zip(chunk, row_keys(tok["input_ids"], tok["attention_mask"])):
            model._frozen_documents[key] = saved["vectors"][saved["row"][d]]
    return len(ids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--pooling", default="mean")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    ns = parser.parse_args()
    from ssft.data.beir import load_dataset
    from ssft.models.base import load_transformer
    from ssft.models.twin import mean_pool

    dataset = load_dataset(ns.data)
    transformer, tokenizer = load_transformer(ns.model)
    transformer.eval()
    ids = sorted(dataset.corpus, key=lambda d: len(dataset.corpus[d].full_text))
    done: dict[str, torch.Tensor] = {}
    partial = ns.out.with_suffix(".partial.pt")
    if partial.is_file():
        done = torch.load(partial)["done"]
    todo = [d for d in ids if d not in done]
    started = time.time()
    with torch.inference_mode():
        for n, start in enumerate(range(0, len(todo), ns.batch_size), 1):
            chunk = todo[start : start + ns.batch_size]
            tok = tokenizer([dataset.corpus[d].full_text for d in chunk], padding=True, truncation=True,
                            max_length=ns.max_length, return_tensors="pt")
            hidden = transformer(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"]).last_hidden_state
            pooled = hidden[:, 0] if ns.pooling == "cls" else mean_pool(hidden, tok["attention_mask"])
            for d, v in zip(chunk, pooled):
                done[d] = v.clone()
            if n % ns.save_every == 0:
                torch.save({"done": done}, partial)
                rate = (start + len(chunk)) / (time.time() - started)
                print(f"{len(done)}/{len(ids)} documents, {rate:.1f}/s", flush=True)
    doc_ids = sorted(done)
    torch.save({"model": ns.model, "max_length": ns.max_length, "pooling": ns.pooling, "doc_ids": doc_ids,
                "row": {d: i for i, d in enumerate(doc_ids)}, "vectors": torch.stack([done[d] for d in doc_ids]),
                "seconds": time.time() - started}, ns.out)
    partial.unlink(missing_ok=True)
    print(f"wrote {ns.out}: {len(doc_ids)} documents in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
