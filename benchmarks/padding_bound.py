"""What batching by exact token count can gain over sentence-transformers' batching by characters, on each whole
collection: no timing, only arithmetic on the token counts each library's batches compute.

    SSFT_DATA_HOME=../shared/data python benchmarks/padding_bound.py [--datasets scifact,nfcorpus,cranfield] \
        [--lengths 256,512] [--depth 50] [--batch-size 32] [--write]

For each collection and maximum length: encoding is every document of the corpus; reranking is every judged test
query with its BM25 top ``--depth`` documents as (query, document) pairs. sentence-transformers cuts batches by
decreasing character count (its ``_input_length``), ssft by exact token count (``ssft.models.batching.length_batches``,
what its rankers batch by); each batch is padded to its longest row. FLOPs are the encoder's matmuls
(``vs_sentence_transformers.flops_per_row``: projections, feed-forward and attention, whose cost grows with the square
of the length). On the same kernels, time follows these FLOPs closely (on the sample § vs_sentence_transformers_real_amd
timed they give 1.17× for encoding and 1.15× × the [CLS]-only layer for reranking; it measured 1.18× and 1.36×), so
their ratio is the speed-up batching can bring, and the ratio to the
useful FLOPs (every row at its own length: no padding at all, as packing or variable-length kernels would do) is the
most any batching can bring. A cross-encoder served by ssft also runs its last layer for the [CLS] token only (keys
and values for every token), which the last column adds.
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from transformers import AutoConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_notes_option, add_section_options, with_notes, write_section  # noqa: E402
from serve_length_dev import length_list  # noqa: E402
from vs_sentence_transformers import MODEL, batch_accounting, character_batches, flops_per_row, ssft_model  # noqa: E402

from ssft.core.hub import resolve_model  # noqa: E402
from ssft.data.beir import load_dataset  # noqa: E402
from ssft.firststage.bm25 import BM25  # noqa: E402
from ssft.models.batching import length_batches  # noqa: E402

SECTION = "padding_bound"
TITLE = "What batching by token count can gain on each collection (arithmetic, no timing)"


def first_token_last_layer_flops(n: int, config: dict) -> float:
    """``flops_per_row`` with the last layer computing queries, the output projection and the feed-forward for the
    first token only (keys and values for all ``n`` tokens): ssft's cross-encoder serving graph."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    last = 2 * n * (2 * h * h) + 2 * (2 * h * h + 2 * h * inter) + 4 * n * h
    return flops_per_row(n, config) * (layers - 1) / layers + last


@functools.cache
def length_models(limit: int):
    """The dense and cross-encoder rankers whose token counts the accounting reads, built once per maximum length."""
    return ssft_model("dense", limit, 32), ssft_model("cross", limit, 32)


def collection_rows(dataset_name: str, lengths: list[int], depth: int, batch_size: int) -> list[dict]:
    """The accounting of encoding the corpus and reranking BM25's top ``depth`` of the test queries, per length."""
    dataset = load_dataset(dataset_name)
    test = dataset.qrels("test")
    queries = {q: dataset.queries[q] for q in sorted(test) if q in dataset.queries}
    run = BM25(dataset).search(queries, depth)
    pairs = [(queries[q], dataset.corpus[d].full_text) for q in sorted(run) for d in run[q]]
    corpus = [dataset.corpus[d].full_text for d in sorted(dataset.corpus)]
    config = AutoConfig.from_pretrained(str(resolve_model(MODEL))).to_dict()
    rows = []
    for limit in lengths:
        dense, cross = length_models(limit)
        doc_lengths = dense.token_lengths(corpus, "document")
        pair_lengths = cross.pair_token_lengths([q for q, _ in pairs], [d for _, d in pairs])
        for task, n, characters in (("encode", doc_lengths, [len(d) for d in corpus]),
                                    ("rerank", pair_lengths, [len(q) + len(d) for q, d in pairs])):
            st = batch_accounting(n, character_batches(characters, batch_size), config)
            ours_batches = length_batches(n, batch_size)
            ours = batch_accounting(n, ours_batches, config)
            row = {"dataset": dataset_name, "max_length": limit, "task": task, "items": len(n),
                   "mean_tokens": sum(n) / len(n), "st": st, "ssft": ours}
            if task == "rerank":
                row["ssft_first_token"] = sum(len(b) * first_token_last_layer_flops(max(n[i] for i in b), config)
                                              for b in ours_batches if b)
            rows.append(row)
            print(f"{dataset_name} {limit} {task}: {len(n)} items, st {st['efficiency']:.1%}, ssft "
                  f"{ours['efficiency']:.1%}, batching {st['computed_flops'] / ours['computed_flops']:.3f}x, bound "
                  f"{st['computed_flops'] / ours['useful_flops']:.3f}x", flush=True)
    return rows


def report(rows: list[dict], a: argparse.Namespace) -> str:
    lines = [f"`python benchmarks/padding_bound.py --datasets {','.join(a.datasets)} --lengths "
             f"{','.join(map(str, a.lengths))} --depth {a.depth} --batch-size {a.batch_size}` — {MODEL}, batches of "
             f"{a.batch_size}. Encode: every document of the corpus; rerank: every judged test query × BM25's top "
             f"{a.depth}. Token efficiency: real tokens / token positions computed. The ratios divide the matmul FLOPs "
             "sentence-transformers' batches compute (sorted by characters) by ssft's (sorted by exact token count), "
             "by the useful FLOPs (no padding at all), and, for reranking, by ssft's serving graph with the last layer "
             "for [CLS] only.",
             "",
             "| collection | max length | task | items | mean tokens | ST efficiency | ssft efficiency | ST ÷ ssft "
             "(batching) | ST ÷ no padding (bound) | ST ÷ ssft + [CLS]-only last layer |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        st, ours = r["st"], r["ssft"]
        first = f"{st['computed_flops'] / r['ssft_first_token']:.2f}×" if "ssft_first_token" in r else "—"
        lines.append(f"| {r['dataset']} | {r['max_length']} | {r['task']} | {r['items']:,} | {r['mean_tokens']:.0f} | "
                     f"{st['efficiency']:.1%} | {ours['efficiency']:.1%} | "
                     f"{st['computed_flops'] / ours['computed_flops']:.2f}× | "
                     f"{st['computed_flops'] / ours['useful_flops']:.2f}× | {first} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", type=lambda s: [x for x in s.split(",") if x], default="scifact,nfcorpus,cranfield")
    p.add_argument("--lengths", type=length_list, default="256,512", help="maximum lengths, comma-separated")
    p.add_argument("--depth", type=int, default=50, help="BM25's top-k reranked per test query")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--write", action="store_true", help=f"write BENCHMARKS.md § {SECTION}")
    add_section_options(p, SECTION, TITLE)
    add_notes_option(p)
    a = p.parse_args(argv)
    rows = [row for name in a.datasets for row in collection_rows(name, a.lengths, a.depth, a.batch_size)]
    text = report(rows, a)
    print(text)
    if a.write:
        write_section(a.section, with_notes(f"## {a.title}\n\n{text}", a.notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
