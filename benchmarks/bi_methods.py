"""Benchmark: TwinBERT and ColBERT from all-MiniLM-L6-v2 with full / prefix / hidden_prefix / lora /
semi-Siamese hidden prefix (average) / semi-Siamese LoRA (hetero value), reranking NFCorpus's BM25 top-100 on
all 323 test queries and, from the same run files, on the 192 short test queries (``qrels/test_short.tsv``).

    SSFT_DATA_HOME=../shared/data python benchmarks/bi_methods.py [--seeds 42] [--archs twin,colbert] [--methods ...]

Each run is the committed grid recipe ``recipes/grid/<arch>_<method>.yaml`` (plus ``eval.interpolation=auto`` so
the BM25 interpolation is reported on its own row); runs are resumable (a run folder with metrics.json is reused).
Also measured, in this process after the runs: encoder calls per distinct document while reranking the test top-100
(a trained model, first without and then with the on-disk embedding cache), and the inference overhead of the
hidden-state prefix against the same backbone without it on 256-token documents (interleaved repeats, median).
Writes the 'bi_methods' section of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

METHODS = ["full", "prefix", "hidden_prefix", "lora", "ss_hidden_prefix_average", "ss_lora_hetero_value"]
ARCH_TITLES = {"twin": "TwinBERT", "colbert": "ColBERT"}
METRICS = ["nDCG@10", "P@20", "nDCG@20"]


def train_run(arch: str, method: str, seed: int, out_root: Path, extra: list[str]) -> Path:
    out = out_root / f"{arch}_{method}-s{seed}"
    if not (out / "metrics.json").is_file():
        recipe = ROOT / "recipes" / "grid" / f"{arch}_{method}.yaml"
        cmd = [sys.executable, "-m", "ssft.train", str(recipe), f"seed={seed}", f"training.output_dir={out}",
               "eval.interpolation=auto", *extra]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
    return out


def tower_counts(arch: str, method: str) -> dict[str, int]:
    """Trainable parameters per tower of the recipe's model, as built (no training)."""
    from ssft.adapters.semi_siamese import tower_parameter_counts
    from ssft.config.recipe import load_recipe
    from ssft.config.registry import MODELS

    recipe = load_recipe(ROOT / "recipes" / "grid" / f"{arch}_{method}.yaml")
    model = MODELS.get(arch).build(recipe.model, recipe.adapter.method, recipe.adapter.options)
    return tower_parameter_counts(model)


def run_metrics(out: Path, dataset) -> dict:
    """Metrics of the run's model / BM25 / interpolated test runs on the full test and on test_short."""
    from ssft.data.trec import read_run
    from ssft.eval.metrics import evaluate_run

    info = json.loads((out / "run_info.json").read_text())
    result = {"info": info, "full": json.loads((out / "metrics.json").read_text())}
    short_qrels = dataset.qrels("test_short")
    short = {}
    for name, file in [("test", "run.test.trec"), ("bm25", "run.bm25.test.trec"), ("test+bm25", "run.test+bm25.trec"),
                       ("start", "run.start.test.trec")]:
        if (out / file).is_file():
            run = read_run(out / file)
            short[name], _ = evaluate_run(short_qrels, {q: run[q] for q in short_qrels if q in run}, METRICS)
    result["short"] = short
    return result


def count_document_encodes(model_dir: Path, dataset, depth: int = 100) -> dict:
    """Rerank the BM25 top-``depth`` of every test query with a saved model, counting the texts the document
    tower encodes: a fresh embedding cache first, then again (frozen model → cached embeddings where cached)."""
    import torch

    from ssft.firststage.bm25 import BM25
    from ssft.models.base import load_ranker
    from ssft.models.bi import score_run

    queries = {q: dataset.queries[q] for q in dataset.qrels("test")}
    run = BM25(dataset).search(queries, depth)
    pairs = sum(min(depth, len(v)) for v in run.values())
    unique_docs = len({d for v in run.values() for d in sorted(v, key=v.get, reverse=True)[:depth]})
    model = load_ranker(model_dir)
    model.requires_grad_(False)
    counted = {"document": 0, "query": 0}
    encode = model.encode_tokens

    def counting_encode(input_ids, attention_mask, tower):
        counted[tower] += int(input_ids.shape[0])
        return encode(input_ids, attention_mask, tower)

    model.encode_tokens = counting_encode
    torch.set_num_threads(2)
    out = {"pairs": pairs, "unique_documents": unique_docs}
    previous_cache = os.environ.get("SSFT_CACHE")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SSFT_CACHE"] = cache
        for label in ("first", "second"):
            counted.update(document=0, query=0)
            started = time.perf_counter()
            score_run(model, run, dataset, depth, queries=queries)
            out[label] = {"document_encodes": counted["document"], "query_encodes": counted["query"],
                          "seconds": time.perf_counter() - started}
    if previous_cache is None:
        os.environ.pop("SSFT_CACHE", None)
    else:
        os.environ["SSFT_CACHE"] = previous_cache
    return out


def hidden_prefix_overhead(dataset, repeats: int = 15, batch: int = 32, length: int = 256) -> dict:
    """Median seconds to encode ``batch`` documents of exactly ``length`` tokens: the backbone alone, with 001's
    hidden-state prefix (10 positions), and with PEFT's key/value prefix (10 virtual tokens); interleaved."""
    import torch

    from ssft.config.recipe import ModelConfig
    from ssft.models.colbert import ColBert

    torch.manual_seed(0)
    torch.set_num_threads(2)
    cfg = ModelConfig(architecture="colbert", max_length=length, query_max_length=20)
    models = {
        "none": ColBert.build(cfg, "full", {}),
        "hidden_prefix": ColBert.build(cfg, "hidden_prefix", {"length": 10, "mlp_dim": 256}),
        "prefix": ColBert.build(cfg, "prefix", {"num_virtual_tokens": 10}),
    }
    longest = sorted(dataset.corpus.values(), key=lambda d: len(d.full_text), reverse=True)[:batch]
    tokens = models["none"].tokenize_documents([d.full_text for d in longest])
    assert tokens["input_ids"].shape[1] == length and bool(tokens["attention_mask"].all()), "need full-length documents"
    times: dict[str, list[float]] = {k: [] for k in models}
    with torch.inference_mode():
        for m in models.values():
            m.eval()
            m.encode_tokens(tokens["input_ids"], tokens["attention_mask"], "document")  # warm-up
        for _ in range(repeats):
            for name, m in models.items():
                started = time.perf_counter()
                m.encode_tokens(tokens["input_ids"], tokens["attention_mask"], "document")
                times[name].append(time.perf_counter() - started)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"median_seconds": med, "batch": batch, "length": length, "repeats": repeats,
            "overhead": {k: med[k] / med["none"] - 1 for k in ("hidden_prefix", "prefix")}}


def fmt(vals: list[float]) -> str:
    return f"{statistics.mean(vals):.4f}" + (f" ± {statistics.stdev(vals):.4f}" if len(vals) > 1 else "")


def main() -> None:
    from report import add_section_options, write_section

    from ssft.data.beir import load_dataset

    parser = argparse.ArgumentParser()
    parser.add_argument("--archs", default="twin,colbert")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench" / "bi"))
    parser.add_argument("--skip-speed", action="store_true", help="skip the encode-count and prefix-overhead measurements")
    add_section_options(parser, "bi_methods")
    parser.add_argument("overrides", nargs="*", help="extra key=value recipe overrides for every run")
    ns = parser.parse_args()
    archs, methods = ns.archs.split(","), ns.methods.split(",")
    seeds = [int(s) for s in ns.seeds.split(",")]
    started = time.time()
    dataset = load_dataset("nfcorpus")
    runs = {(a, m): [run_metrics(train_run(a, m, s, Path(ns.out), ns.overrides), dataset) for s in seeds]
            for a in archs for m in methods}
    first = next(iter(runs.values()))[0]
    towers = {key: tower_counts(*key) for key in runs}

    lines = [
        "## Bi-encoders (TwinBERT, ColBERT) and semi-Siamese methods on NFCorpus (BM25 top-100 rerank)"
        if len(archs) > 1 else  # a one-architecture re-run names it: its section sits beside the other's
        f"## Bi-encoders and semi-Siamese methods on NFCorpus: {ARCH_TITLES[archs[0]]} (BM25 top-100 rerank)",
        "",
        f"Command: `SSFT_DATA_HOME=../shared/data python benchmarks/bi_methods.py --seeds {ns.seeds}"
        + (f" --archs {ns.archs}" if ns.archs != "twin,colbert" else "")
        + (f" --methods {ns.methods}" if ns.methods != ",".join(METHODS) else "")
        + (" --skip-speed" if ns.skip_speed else "") + (f" --section {ns.section}" if ns.section != "bi_methods" else "")
        + (" " + " ".join(ns.overrides) if ns.overrides else "") + "`",
        "Recipes: `recipes/grid/<arch>_<method>.yaml` + `eval.interpolation=auto`; all-MiniLM-L6-v2; 2 CPU cores. "
        "Budget, the same for each run: " + "; ".join(first["info"]["notes"][:2]) + ".",
        "Full test = all 323 test queries; short = the 192 queries of `qrels/test_short.tsv` (1–3 words), "
        "evaluated on the same run files. Mean over seeds (± standard deviation when more than one).",
        "Start = the starting model (all-MiniLM-L6-v2 before any training, the head as built) scoring the same BM25 "
        "top-100 (metrics.json's `start`; – where the starting model cannot rank: TwinBERT's combiner head starts "
        "random). Best epoch = the validation epoch handed back; 0 = the starting model won on validation (epoch 0 "
        "takes part in the selection), marked ⚠. Trainable parameters count every parameter that trains, the "
        "(hidden) prefix's reparameterisation MLP included; 001's tables count the prefix without its MLPs (0.1M for "
        "BERT-base, against ~4.7M with them).",
        "",
    ]
    bm25_full, bm25_short = first["full"]["bm25"], first["short"]["bm25"]
    for split, label in (("full", "all 323 test queries"), ("short", "192 short test queries")):
        bm25 = bm25_full if split == "full" else bm25_short
        lines += [
            f"### {label}",
            "",
            "| model | method | trainable params | query / document encoder (+ head) | " + " | ".join(METRICS)
            + " | + BM25 interp. nDCG@10 | start nDCG@10 | best epoch |",
            "|---|---|---:|---:|" + "---:|" * len(METRICS) + "---:|---:|---:|",
            "| BM25 (bm25s) | – | – | – | " + " | ".join(f"{bm25[k]:.4f}" for k in METRICS) + " | – | – | – |",
        ]
        for (a, m), rs in runs.items():
            table = [r["full"] if split == "full" else r["short"] for r in rs]
            fused = [t.get("test+bm25", {}).get("nDCG@10") for t in table]
            start = [t.get("start", {}).get("nDCG@10") for t in table]
            epochs = [r["info"]["best_validation"]["epoch"] for r in rs]
            best = ", ".join("?" if e is None else ("0 ⚠" if e == 0 else f"{e:g}") for e in epochs)
            lines.append(
                f"| {ARCH_TITLES[a]} | {m} | {rs[0]['info']['trainable_parameters']:,} | "
                f"{towers[a, m]['query_tower']:,} / {towers[a, m]['document_tower']:,} (+ {towers[a, m]['head']:,}) | "
                + " | ".join(fmt([t["test"][k] for t in table]) for k in METRICS)
                + f" | {fmt(fused) if None not in fused else '–'} | {fmt(start) if None not in start else '–'} | {best} |"
            )
        lines.append("")
    alphas = {f"{a}/{m}": [r["info"].get("interpolation_alpha") for r in rs] for (a, m), rs in runs.items()}
    lines.append("Interpolation weights α (model share, tuned on dev per run): "
                 + "; ".join(f"{k} {', '.join(f'{x:.2f}' for x in v if x is not None)}" for k, v in alphas.items()) + ".")
    lines.append("Validation nDCG@10 by epoch (epoch 0 = the starting model): " + "; ".join(
        f"{a}/{m} " + " → ".join(f"{h['eval_nDCG@10']:.4f}" for h in rs[0]["info"]["validation_history"])
        for (a, m), rs in runs.items()) + ".")
    lines.append("Training seconds per run: " + "; ".join(
        f"{a}/{m} {statistics.mean(r['info']['train_seconds'] for r in rs):.0f}" for (a, m), rs in runs.items()) + ".")
    lines.append("")

    if not ns.skip_speed:
        lines += ["### Encoder calls per distinct document (test rerank, BM25 top-100)", "",
                  "| model (trained run) | (query, doc) pairs | distinct docs | doc encodes, 1st eval | per distinct doc "
                  "| seconds | doc encodes, 2nd eval (cache) | seconds |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for a in archs:
            method = "ss_lora_hetero_value" if "ss_lora_hetero_value" in methods else methods[0]
            c = count_document_encodes(Path(ns.out) / f"{a}_{method}-s{seeds[0]}" / "model", dataset)
            lines.append(f"| {ARCH_TITLES[a]} {method} | {c['pairs']:,} | {c['unique_documents']:,} | "
                         f"{c['first']['document_encodes']:,} | {c['first']['document_encodes'] / c['unique_documents']:.2f} | "
                         f"{c['first']['seconds']:.0f} | {c['second']['document_encodes']:,} | {c['second']['seconds']:.0f} |")
        lines += ["", "Only ColBERT caches document embeddings on disk (per-token, expensive to recompute); TwinBERT "
                  "re-encodes each distinct document once per evaluation.", ""]
        o = hidden_prefix_overhead(dataset)
        med = o["median_seconds"]
        lines += [
            f"### Inference overhead of prefixes ({o['batch']} documents × {o['length']} tokens, ColBERT encode, "
            f"median of {o['repeats']} interleaved repeats)", "",
            "| backbone | median s / batch | overhead vs none |", "|---|---:|---:|",
            f"| none (plain MiniLM) | {med['none']:.3f} | – |",
            f"| hidden_prefix (001, 10 positions) | {med['hidden_prefix']:.3f} | {100 * o['overhead']['hidden_prefix']:+.1f}% |",
            f"| prefix (PEFT key/value, 10 virtual tokens) | {med['prefix']:.3f} | {100 * o['overhead']['prefix']:+.1f}% |",
            "",
        ]
    lines.append(f"Benchmark wall time: {time.time() - started:.0f} s (runs reused from earlier invocations count 0).")
    write_section(ns.section, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
