"""Does inference precision change ranking quality? nDCG@10 of ssft at bf16 and int8 against fp32, same models.

    SSFT_DATA_HOME=../shared/data python benchmarks/precision_quality.py [--threads 1] [--write]

- NFCorpus test, reranking the BM25 (bm25s) top-k with a cross-encoder (``--cross-depth``, 20 by default: the
  cross-encoder scores every pair) and a ColBERT (``--colbert-depth``, 100), both built from all-MiniLM-L6-v2 as-is
  (untrained heads: the ColBERT's 128-d projection and the cross-encoder's score head are random). Their
  absolute nDCG says nothing; what is measured is how far a precision moves the ranking of the same model.
- SciFact test, full retrieval of the corpus with the dense all-MiniLM-L6-v2 zero-shot (mean pooling, cosine:
  the sentence-transformers model itself), exact inner-product search, top-100.

Every model scores through ssft's own paths (``prediction_trainer(..., precision=p).score``, ``precision.inference``
+ ``retrieve``), so this is what ``eval.precision`` / ``--precision`` give. Quality is deterministic; the seconds
beside it are the CPU-seconds of one run each (one thread; steadier than wall-clock on a shared machine).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PRECISIONS = ("fp32", "bf16", "int8")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cross-depth", type=int, default=20)
    p.add_argument("--colbert-depth", type=int, default=100)
    p.add_argument("--parts", default="dense,colbert,cross", help="run in this order; the section is rewritten after each")
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--cross-run", default=None,
                   help="cross part: a trained ssft cross-encoder run (or its model/ folder) instead of MiniLM with a "
                        "random head")
    p.add_argument("--rows-file", default=str(ROOT / "runs" / "bench" / "precision_quality.json"),
                   help="rows of earlier invocations, kept and reported beside this one's (a row measured again "
                        "replaces its earlier self)")
    p.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from ssft.cli._common import model_dir
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.core import precision
    from ssft.data.beir import load_dataset
    from ssft.data.examples import PairDataset
    from ssft.eval.metrics import evaluate_run
    from ssft.eval.retrieve import retrieve
    from ssft.firststage.bm25 import BM25
    from ssft.models.base import load_ranker
    from ssft.training.prediction import prediction_trainer

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    parts = [x for x in a.parts.split(",") if x]
    rows_file = Path(a.rows_file)
    rows = json.loads(rows_file.read_text()) if rows_file.is_file() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    commit += "+changes" if dirty else ""
    load = [os.getloadavg()[0]]

    def measure(name: str, task: str, fn) -> None:
        values, seconds = {}, {}
        for prec in PRECISIONS:
            start = time.process_time()
            values[prec] = fn(prec)
            seconds[prec] = time.process_time() - start
            load.append(os.getloadavg()[0])
            print(f"{name} {prec}: nDCG@10 {values[prec]:.4f} ({seconds[prec]:.0f} CPU-s)", flush=True)
        rows[:] = [r for r in rows if r["name"] != name] + [
            {"name": name, "task": task, "values": values, "seconds": seconds, "commit": commit,
             "load": [min(load), max(load)], "command": " ".join(sys.argv[1:])}]
        rows_file.parent.mkdir(parents=True, exist_ok=True)
        rows_file.write_text(json.dumps(rows, indent=1) + "\n")
        report(rows, a)

    nf_cache: dict = {}

    def nfcorpus_part(arch: str) -> None:
        if not nf_cache:
            nf = load_dataset("nfcorpus")
            nf_cache.update(nf=nf, qrels=nf.qrels("test"))
            depth = max(a.cross_depth, a.colbert_depth)
            nf_cache["bm25"] = BM25(nf).search({q: nf.queries[q] for q in nf_cache["qrels"]}, depth)
        nf, qrels, bm25 = nf_cache["nf"], nf_cache["qrels"], nf_cache["bm25"]
        k = a.cross_depth if arch == "cross" else a.colbert_depth
        torch.manual_seed(0)
        if arch == "cross" and a.cross_run:
            model = load_ranker(model_dir(Path(a.cross_run)))
            name = f"cross (trained: {Path(a.cross_run).name} run, {model.spec['max_length']} tokens)"
        else:
            model = MODELS.get(arch).build(ModelConfig(architecture=arch, name=MODEL, max_length=a.max_length), "full",
                                           {})
            name = f"{arch} (MiniLM, untrained head)"
        model.eval().requires_grad_(False)
        pairs = PairDataset({q: dict(sorted(d.items(), key=lambda kv: -kv[1])[:k]) for q, d in bm25.items()}, k, nf)

        def rerank(prec):
            run = pairs.to_run(prediction_trainer(model, 64, precision=prec).score(pairs))
            return evaluate_run(qrels, run, ["nDCG@10"])[0]["nDCG@10"]

        measure(name, f"NFCorpus test, rerank BM25 top-{k} ({len(pairs)} pairs)", rerank)

    def scifact_part() -> None:
        sf = load_dataset("scifact")
        qrels = sf.qrels("test")
        model = MODELS.get("dense").build(ModelConfig(architecture="dense", name=MODEL, max_length=a.max_length), "full",
                                          {})
        model.eval().requires_grad_(False)

        def full_retrieval(prec):
            with precision.inference(model, prec) as m:
                run = retrieve(m, sf, {q: sf.queries[q] for q in qrels}, 100)
            return evaluate_run(qrels, run, ["nDCG@10"])[0]["nDCG@10"]

        measure("dense (MiniLM zero-shot)", f"SciFact test, full retrieval of {len(sf.corpus)} abstracts", full_retrieval)

    for part in parts:
        if part in ("cross", "colbert"):
            nfcorpus_part(part)
        elif part == "dense":
            scifact_part()
        else:
            p.error(f"--parts: unknown part '{part}' (dense, colbert, cross)")
    return 0


def report(rows: list[dict], a) -> None:
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").is_file() else []
    cpu = ", ".join(f for f in ("avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8") if f in flags) or "none of them"
    lines = ["## Inference precision and ranking quality (bf16, int8 against fp32)", "",
             "`python benchmarks/precision_quality.py ARGS` (each row's ARGS and commit below; rows of earlier "
             f"invocations are kept in `--rows-file`): all-MiniLM-L6-v2 unless the row names a trained run, ssft's own "
             f"scoring paths at each `eval.precision`; CPU flags {cpu}; 1 thread per row, on a machine shared with "
             "other jobs (each row's 1-minute load average range below).", "",
             "| model | task | fp32 nDCG@10 | bf16 | Δ bf16 | int8 | Δ int8 | CPU-seconds fp32 / bf16 / int8 | measured at |",
             "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        v, s = r["values"], r["seconds"]
        lines.append(f"| {r['name']} | {r['task']} | {v['fp32']:.4f} | {v['bf16']:.4f} | {v['bf16'] - v['fp32']:+.4f} | "
                     f"{v['int8']:.4f} | {v['int8'] - v['fp32']:+.4f} | {s['fp32']:.0f} / {s['bf16']:.0f} / {s['int8']:.0f} | "
                     f"{r['commit']} |")
    lines += [""] + [f"- {r['name']}: `{r['command']}`, load average {r['load'][0]:.1f}–{r['load'][1]:.1f}." for r in rows]
    worst = max(abs(r["values"]["bf16"] - r["values"]["fp32"]) for r in rows)
    lines += ["", f"Largest |Δ| of bf16: {worst:.4f} (the bar for `auto` choosing bf16 was 0.003).", ""]
    text = "\n".join(lines)
    print(text)
    if a.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report import write_section

        write_section("precision_quality", text)


if __name__ == "__main__":
    sys.exit(main())
