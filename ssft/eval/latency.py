"""ssft-latency MODEL_DIR --data DATASET --split SPLIT — query encoding latency (000 §5.3.3, Table 2, Fig. 6).

Milliseconds per query at each batch size (default 1 and 32) on a fixed number of CPU threads, tokenizer
time measured apart from the encoder's (000 ignores the tokenizer; both are reported), median over
``repeats`` passes over the same queries after one warm-up pass. ``--tower document`` times the document
tower encoding the queries (what a Siamese model with that encoder would pay per query); ``both`` times
each. Writes ``latency.json`` when ``--output`` is given.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from ssft.core.errors import SsftError


def _tower_functions(model, tower: str):
    """(tokenize(texts) → batch, encode(batch) → vectors) of a tower of a bi-encoder, at the query length limit."""
    if tower == "query":
        tokenize = model.tokenize_queries
    else:
        tokenizer = getattr(model, "document_tokenizer", model.tokenizer)

        def tokenize(texts):
            out = tokenizer(texts, padding=True, truncation=True, max_length=model.spec["query_max_length"], return_tensors="pt")
            return {"input_ids": out["input_ids"], "attention_mask": out["attention_mask"]}

    def encode(batch):
        return model.encode_tokens(batch["input_ids"], batch["attention_mask"], tower).vectors

    return tokenize, encode


def measure_latency(model, queries: list[str], batch_sizes: tuple[int, ...] = (1, 32), repeats: int = 5,
                    threads: int | None = 1, tower: str | list[str] = "query", max_queries: int = 256):
    """{batch size: {tokenize_ms_per_query, encode_ms_per_query, total_ms_per_query, ...}} for one tower, or a
    list of such results for a list of towers. Each repeat encodes the same ``max_queries`` queries in batches;
    figures are medians over repeats. Several towers are timed interleaved (repeat by repeat), so that a
    noisy machine slows them alike and their ratio holds."""
    towers = [tower] if isinstance(tower, str) else list(tower)
    for t in towers:
        if t not in ("query", "document"):
            raise SsftError(f"tower must be 'query' or 'document', got '{t}'")
    if not queries:
        raise SsftError("no queries to time")
    if repeats < 1 or any(b < 1 for b in batch_sizes):
        raise SsftError("repeats and batch sizes must be >= 1")
    queries = queries[:max_queries]
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    functions = {t: _tower_functions(model, t) for t in towers}
    was_training = model.training
    keep = getattr(model, "keep_frozen_documents", None)
    if keep is not None:  # time the tower itself, not a lookup of representations it computed before
        model.keep_frozen_documents = False
    model.eval()
    results = {t: {"tower": t, "threads": torch.get_num_threads(), "queries": len(queries), "repeats": repeats,
                   "device": str(next(model.parameters()).device), "batch_sizes": {}} for t in towers}
    try:
        with torch.inference_mode():
            for batch_size in batch_sizes:
                batches = [queries[i : i + batch_size] for i in range(0, len(queries), batch_size)]
                times = {t: ([], []) for t in towers}
                for repeat in range(repeats + 1):  # the first pass warms up and is dropped
                    for t in towers:
                        tokenize, encode = functions[t]
                        tok, enc = 0.0, 0.0
                        for texts in batches:
                            t0 = time.perf_counter()
                            batch = model._to_device(tokenize(texts))
                            t1 = time.perf_counter()
                            vectors = encode(batch)
                            if vectors.is_cuda:
                                torch.cuda.synchronize()
                            t2 = time.perf_counter()
                            tok += t1 - t0
                            enc += t2 - t1
                        if repeat:
                            times[t][0].append(1000 * tok / len(queries))
                            times[t][1].append(1000 * enc / len(queries))
                for t in towers:
                    tok_times, enc_times = times[t]
                    results[t]["batch_sizes"][str(batch_size)] = {
                        "tokenize_ms_per_query": statistics.median(tok_times),
                        "encode_ms_per_query": statistics.median(enc_times),
                        "total_ms_per_query": statistics.median(a + b for a, b in zip(tok_times, enc_times)),
                        "encode_ms_per_query_all_repeats": enc_times,
                    }
    finally:
        model.train(was_training)
        torch.set_num_threads(previous_threads)
        if keep is not None:
            model.keep_frozen_documents = keep
    return results[towers[0]] if isinstance(tower, str) else [results[t] for t in towers]


def format_latency(results: list[dict[str, Any]]) -> str:
    lines = [f"{'tower':10}{'batch':>7}{'tokenize ms/q':>15}{'encode ms/q':>13}{'total ms/q':>12}"]
    for r in results:
        for b, v in r["batch_sizes"].items():
            lines.append(f"{r['tower']:10}{b:>7}{v['tokenize_ms_per_query']:15.3f}{v['encode_ms_per_query']:13.3f}{v['total_ms_per_query']:12.3f}")
    return "\n".join(lines)
