"""Where the CPU time of ssft's OpenVINO encoding goes on real text: OpenVINO's own per-node profile of a dense
bi-encoder's graph, and what static shapes would save against the dynamic ones ssft serves with.

    SSFT_DATA_HOME=../shared/data python benchmarks/openvino_profile.py [--dataset scifact] [--docs 500] \
        [--max-length 512] [--batch-size 32] [--precision bf16] [--lengths 64,128,256,384,512] [--repeats 3] \
        [--grain 32] [--notes benchmarks/notes/openvino_profile.md] [--write]

The graph: all-MiniLM-L6-v2's encoder as ssft converts it for serving (``ssft.models.interop.openvino.convert``,
dynamic batch and sequence dimensions), compiled with ssft's CPU configuration (``compile_config``) on one thread,
with OpenVINO's ``PERF_COUNT``. The inputs: the first ``--docs`` documents of the corpus (title and text), tokenised at
``--max-length`` and cut into batches of ``--batch-size`` by exact token count, as ssft encodes a corpus. Each
repeat runs every batch once; each node type's time is the median over repeats of its sum over batches, as the
profiler reports it (``real_time``).

Useful work, counted on the batches' padded shapes: the linear layers' FLOPs (2 × tokens × the layer's weights) and
the attention score elements (batch × length² × heads × layers), each over the time of the node types that do it.

Static shapes (``--lengths``): one batch of ``--batch-size`` rows of each length, on the dynamic graph and on a copy
reshaped to exactly that shape (its own compile), median CPU-seconds of ``--repeats`` runs after one warm-up; the
compile's CPU-seconds and the process's resident memory added by each static model. ``--write``: BENCHMARKS.md
§ openvino_profile.

The whole job both ways (``--grain``): every batch on the dynamic graph (compiled once) against static models, one
per length rounded up to a multiple of ``--grain`` with the last batch padded to full rows, each compiled when first
needed; compiles counted.
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import openvino
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_notes_option, cpu, with_notes, write_section  # noqa: E402

from ssft.config.model import ModelConfig  # noqa: E402
from ssft.config.registry import MODELS  # noqa: E402
from ssft.data.beir import load_dataset  # noqa: E402
from ssft.models.batching import length_order  # noqa: E402
from ssft.models.interop import openvino as ov  # noqa: E402
from ssft.models.interop.export import merged_encoder  # noqa: E402

CHECKPOINT = "sentence-transformers/all-MiniLM-L6-v2"
LINEAR = ("FullyConnected",)  # node types that run the linear layers
ATTENTION = ("Subgraph",)  # the fused attention (scores, softmax, weighted sum) OpenVINO builds from SDPA


def batches_by_tokens(ids: list[list[int]], batch_size: int) -> list[list[int]]:
    """Indices of ``ids`` cut into batches of ``batch_size`` by decreasing token count (ssft's corpus order)."""
    order = length_order([len(row) for row in ids])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def feed(ids: list[list[int]], rows: list[int], length: int | None = None) -> list[np.ndarray]:
    """(input_ids, attention_mask, token_type_ids) of ``rows`` padded to their longest row (or ``length``)."""
    width = length or max(len(ids[i]) for i in rows)
    input_ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros_like(input_ids)
    for r, i in enumerate(rows):
        input_ids[r, : len(ids[i])] = ids[i]
        mask[r, : len(ids[i])] = 1
    return [input_ids, mask, np.zeros_like(input_ids)]


def useful_work(shapes: list[tuple[int, int]], hidden: int, intermediate: int, layers: int, heads: int) -> dict:
    """The linear layers' FLOPs and the attention score elements of batches of these (rows, length) shapes."""
    positions = sum(b * n for b, n in shapes)
    per_token = 2 * layers * (4 * hidden * hidden + 2 * hidden * intermediate)  # Q, K, V, output; FFN in and out
    return {"positions": positions, "linear_flops": positions * per_token,
            "score_elements": sum(b * n * n for b, n in shapes) * heads * layers}


def profile(request, feeds: list[list[np.ndarray]], repeats: int) -> dict[tuple[str, str], float]:
    """(node type, kernel) → seconds over all ``feeds``, median of ``repeats`` passes."""
    passes = []
    for _ in range(repeats):
        spent: collections.Counter = collections.Counter()
        for inputs in feeds:
            request.infer(inputs)
            for node in request.profiling_info:
                spent[(node.node_type, node.exec_type)] += node.real_time.total_seconds()
        passes.append(spent)
    keys = set().union(*passes)
    return {key: statistics.median(p.get(key, 0.0) for p in passes) for key in keys}


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def cpu_seconds(request, inputs: list[np.ndarray], repeats: int) -> float:
    request.infer(inputs)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        request.infer(inputs)
        times.append(time.process_time() - start)
    return statistics.median(times)


def static_rows(model, config: dict, lengths: list[int], batch: int, repeats: int, vocab: int) -> list[dict]:
    core = openvino.Core()
    dynamic = core.compile_model(model, "CPU", config).create_infer_request()
    rng = np.random.default_rng(0)
    rows = []
    for length in lengths:
        inputs = [rng.integers(1000, vocab, (batch, length)).astype(np.int64), np.ones((batch, length), np.int64),
                  np.zeros((batch, length), np.int64)]
        fixed = model.clone()
        fixed.reshape({port: openvino.PartialShape([batch, length]) for port in fixed.inputs})
        before, start = rss_mb(), time.process_time()
        static = core.compile_model(fixed, "CPU", config).create_infer_request()
        compile_s = time.process_time() - start
        static_s = cpu_seconds(static, inputs, repeats)
        rows.append({"length": length, "dynamic": cpu_seconds(dynamic, inputs, repeats), "static": static_s,
                     "compile": compile_s, "rss": rss_mb() - before})
    return rows


def bucketed_seconds(model, config: dict, ids: list[list[int]], batches: list[list[int]], grain: int,
                     batch: int) -> tuple[float, int]:
    """CPU-seconds to run every batch on static models, one per (rows, length rounded up to ``grain``) bucket, each
    compiled when first needed (its compile counted); the number of models compiled."""
    core, models = openvino.Core(), {}
    start = time.process_time()
    for rows in batches:
        length = -(-max(len(ids[i]) for i in rows) // grain) * grain
        inputs = feed(ids, rows + [rows[-1]] * (batch - len(rows)), length)  # the last batch padded to full rows
        if length not in models:
            fixed = model.clone()
            fixed.reshape({port: openvino.PartialShape([batch, length]) for port in fixed.inputs})
            models[length] = core.compile_model(fixed, "CPU", config).create_infer_request()
        models[length].infer(inputs)
    return time.process_time() - start, len(models)


def dynamic_seconds(model, config: dict, feeds: list[list[np.ndarray]]) -> float:
    """CPU-seconds to compile the dynamic graph and run every batch on it (what ssft does)."""
    start = time.process_time()
    request = openvino.Core().compile_model(model, "CPU", config).create_infer_request()
    for inputs in feeds:
        request.infer(inputs)
    return time.process_time() - start


def report(a, times: dict, work: dict, tokens: int, shapes: list, static: list[dict], whole: dict) -> str:
    total = sum(times.values())
    by_type: collections.Counter = collections.Counter()
    for (node, kernel), seconds in times.items():
        by_type[f"{node} ({kernel})"] += seconds
    lines = [f"| {name} | {seconds:.2f} | {100 * seconds / total:.1f}% |" for name, seconds in by_type.most_common(10)]
    linear = sum(s for (node, _), s in times.items() if node in LINEAR)
    attention = sum(s for (node, _), s in times.items() if node in ATTENTION)
    static_lines = [f"| {r['length']} | {1000 * r['dynamic']:.0f} | {1000 * r['static']:.0f} | "
                    f"{r['dynamic'] / r['static']:.2f}× | {r['compile']:.2f} | {r['rss']:.0f} |" for r in static]
    return f"""## Where OpenVINO's encoding time goes: a per-node profile on real text

`python benchmarks/openvino_profile.py --dataset {a.dataset} --docs {a.docs} --max-length {a.max_length} \
--batch-size {a.batch_size} --precision {a.precision} --lengths {a.lengths} --repeats {a.repeats} \
--grain {a.grain}`: all-MiniLM-L6-v2's encoder as ssft serves
it (dynamic shapes, OpenVINO {a.precision}, one thread), {a.docs} {a.dataset} documents in {len(shapes)} batches by
exact token count: {tokens:,} tokens, {work['positions']:,} positions computed. Seconds as OpenVINO's profiler
reports them, median of {a.repeats} passes (the profiler's sum, {total:.2f} s, exceeds the pass's CPU time a little).

| node type (kernel) | seconds | share |
|---|---:|---:|
{chr(10).join(lines)}

- Linear layers: {work['linear_flops'] / 1e12:.2f} TFLOP in {linear:.2f} s, {work['linear_flops'] / linear / 1e9:.0f} GFLOP/s.
- Attention: {work['score_elements'] / 1e9:.2f} G score elements (each a 32-wide dot product, a softmax entry and a
  32-wide weighted sum: the model's heads are 32 wide) in {attention:.2f} s, {1e9 * attention / work['score_elements']:.2f} ns
  an element.

Static shapes against the dynamic graph, one batch of {a.batch_size} rows (milliseconds: median CPU time of
{a.repeats} runs; compile: CPU-seconds; memory: resident MiB the static model added):

| length | dynamic ms | static ms | dynamic ÷ static | compile s | memory MiB |
|---:|---:|---:|---:|---:|---:|
{chr(10).join(static_lines)}

The whole job both ways (compiles included, the two interleaved, median CPU-seconds of {a.repeats}): the dynamic graph
{whole['dynamic']:.2f} s; static models per length rounded up to a multiple of {a.grain} ({whole['models']} compiled)
{whole['static']:.2f} s, {whole['dynamic'] / whole['static']:.2f}× the dynamic graph's speed.
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--docs", type=int, default=500)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    p.add_argument("--lengths", default="64,128,256,384,512")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--grain", type=int, default=32, help="static lengths: multiples of this")
    add_notes_option(p)
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ranker = MODELS.get("dense").build(ModelConfig(architecture="dense", name=CHECKPOINT, max_length=a.max_length,
                                                   query_max_length=32), "full", {})
    ranker.requires_grad_(False)
    corpus = load_dataset(a.dataset).corpus
    texts = [corpus[d].full_text for d in list(corpus)[: a.docs]]
    ids = [ranker.tokenizer(t, truncation=True, max_length=a.max_length)["input_ids"] for t in texts]
    batches = batches_by_tokens(ids, a.batch_size)
    feeds = [feed(ids, rows) for rows in batches]
    model = ov.convert(ov.Graph(merged_encoder(ranker.backbone, None)))
    config = ov.compile_config(a.precision)
    request = openvino.Core().compile_model(model, "CPU", {**config, "PERF_COUNT": True}).create_infer_request()
    request.infer(feeds[0])
    times = profile(request, feeds, a.repeats)
    c = ranker.backbone.config
    shapes = [tuple(f[0].shape) for f in feeds]
    work = useful_work(shapes, c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads)
    static = static_rows(model, config, [int(x) for x in a.lengths.split(",")], a.batch_size, a.repeats, c.vocab_size)
    dynamic, static_whole, models = [], [], 0
    for _ in range(a.repeats):
        dynamic.append(dynamic_seconds(model, config, feeds))
        seconds, models = bucketed_seconds(model, config, ids, batches, a.grain, a.batch_size)
        static_whole.append(seconds)
    whole = {"dynamic": statistics.median(dynamic), "static": statistics.median(static_whole), "models": models}
    text = report(a, times, work, sum(len(row) for row in ids), shapes, static, whole)
    text = with_notes(text + f"\nCPU: {cpu()}.\n", a.notes)
    print(text)
    if a.write:
        write_section("openvino_profile", text)


if __name__ == "__main__":
    main()
