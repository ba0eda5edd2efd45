"""Ranking quality of the serving backends and precisions on real data: nDCG@10 of each (backend, precision) arm
against torch fp32, for a trained cross-encoder reranking NFCorpus BM25 top-100 and for a dense model retrieving the
full SciFact corpus.

Why: int8 is offered only where it keeps the ranking (|ΔnDCG@10| ≤ 0.005 against fp32); this measures it the way a
user runs it (``ssft.pipeline.rerank.rerank`` / ``retrieve_corpus``, what ``ssft-rerank`` / ``ssft-retrieve`` call:
the same loading, calibration and scoring). Each arm's wall time (loading, conversion, calibration and scoring, on a
machine shared with other jobs) is stated as a rough cost, not a throughput figure (that is
``benchmarks/vs_sentence_transformers.py``).

    SSFT_DATA_HOME=/work/shared/data python benchmarks/openvino_quality.py --cross runs/nfcorpus-cross --queries 100

The reranking arms score a fixed random subset of the test queries (``--queries``, ``--seed``; the same for every
arm) over BM25's top ``--depth``, averaged over those queries. Results go to ``--results`` (JSON, one entry per arm,
written as each finishes) and BENCHMARKS.md § openvino_quality. The section's ``torch:int8`` rows (torch's dynamic
int8) were measured at commit 0b539f5, when serving still offered it; serving refuses it since, so it is no arm here.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ARMS = ["torch:fp32", "torch:bf16", "openvino:fp32", "openvino:bf16", "openvino:int8"]
DENSE = "sentence-transformers/all-MiniLM-L6-v2"
TITLE = "Serving backends and int8: ranking quality against torch fp32 (NFCorpus reranking, SciFact dense retrieval)"


def _arms(text: str) -> list[str]:
    arms = [a.strip() for a in text.split(",") if a.strip()]
    for arm in arms:
        if arm not in ARMS:
            raise SystemExit(f"--arms: {arm!r} is not one of {', '.join(ARMS)}")
    return arms


def subset_run(data: str, split: str, depth: int, n: int, seed: int, path: Path) -> int:
    """BM25's top ``depth`` for ``n`` test queries drawn with ``seed`` (all when n <= 0), written as a TREC run."""
    from ssft.data.beir import load_dataset
    from ssft.data.trec import write_run
    from ssft.firststage.runs import first_stage_run

    dataset = load_dataset(data)
    judged = sorted(q for q in dataset.qrels(split) if q in dataset.queries)
    chosen = sorted(random.Random(seed).sample(judged, n)) if 0 < n < len(judged) else judged
    _, run = first_stage_run("bm25", dataset, {}, {q: dataset.queries[q] for q in chosen}, depth)
    write_run(run, path, tag="bm25")
    return len(chosen)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cross", help="a trained cross-encoder (run folder) for the reranking arms")
    p.add_argument("--rerank-data", default="nfcorpus")
    p.add_argument("--queries", type=int, default=0, help="test queries drawn for reranking (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--dense", default=DENSE, help="a dense model for the full-retrieval arms ('' to skip)")
    p.add_argument("--retrieve-data", default="scifact")
    p.add_argument("--split", default="test")
    p.add_argument("--arms", default="torch:fp32,openvino:int8,openvino:fp32",
                   help=f"comma-separated backend:precision arms, in order (of {', '.join(ARMS)})")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=0, help="torch / OpenVINO threads (0: torch's default)")
    p.add_argument("--results", type=Path, default=Path("openvino_quality.json"))
    p.add_argument("--merge", type=Path, nargs="*", default=[],
                   help="results files of other runs of this script (e.g. the two tasks run apart) added to the section")
    p.add_argument("--write-only", action="store_true", help="write the section from --results, measure nothing")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    arms = _arms(args.arms)
    results = json.loads(args.results.read_text()) if args.results.is_file() else {"runs": []}
    if not args.write_only:
        import torch
        from report import command

        from ssft.pipeline.rerank import rerank
        from ssft.pipeline.retrieve import retrieve_corpus

        if args.threads:
            torch.set_num_threads(args.threads)
        results["threads"] = torch.get_num_threads()
        results["commands"] = [c for c in results.get("commands", []) if c != command()] + [command()]

        def save(entry: dict) -> None:
            results["runs"] = [r for r in results["runs"] if (r["task"], r["arm"]) != (entry["task"], entry["arm"])]
            results["runs"].append(entry)
            args.results.write_text(json.dumps(results, indent=1))
            print(json.dumps(entry), flush=True)

        if args.cross:
            with tempfile.TemporaryDirectory() as tmp:
                run_file = Path(tmp) / "bm25.test.trec"
                n = subset_run(args.rerank_data, args.split, args.depth, args.queries, args.seed, run_file)
                results["rerank"] = {"model": args.cross, "data": args.rerank_data, "queries": n, "seed": args.seed,
                                     "depth": args.depth}
                for arm in arms:
                    backend, precision = arm.split(":")
                    start = time.perf_counter()
                    out = rerank(args.cross, args.rerank_data, str(run_file), args.split, None, depth=args.depth,
                                 metrics="nDCG@10,RR@10", batch_size=args.batch_size, queries="run",
                                 precision=precision, backend=backend)
                    save({"task": "rerank", "arm": arm, "seconds": time.perf_counter() - start,
                          "metrics": out[args.split], "first_stage": out.get("bm25")})
        if args.dense:
            results["retrieve"] = {"model": args.dense, "data": args.retrieve_data}
            with tempfile.TemporaryDirectory() as tmp:
                folder = args.dense
                if not Path(folder).is_dir():  # a checkpoint ssft imports (a hub id), saved as an ssft model once
                    import ssft

                    folder = str(Path(tmp) / "dense")
                    ssft.load(args.dense, precision="fp32").save(folder)
                for arm in arms:
                    backend, precision = arm.split(":")
                    start = time.perf_counter()
                    out = retrieve_corpus(folder, args.retrieve_data, args.split, None, depth=100,
                                          metrics="nDCG@10,R@100", batch_size=args.batch_size, precision=precision,
                                          backend=backend)
                    save({"task": "retrieve", "arm": arm, "seconds": time.perf_counter() - start,
                          "metrics": out[args.split]})
    if not args.no_write:
        merged = dict(results)
        for other in args.merge:
            extra = json.loads(other.read_text())
            merged.update({k: v for k, v in extra.items() if k not in ("runs", "commands")})
            merged["runs"] = merged["runs"] + extra["runs"]
            merged["commands"] = merged.get("commands", []) + extra.get("commands", [])
        write(merged, args)
    return 0


def table(runs: list[dict], task: str, extra: str) -> list[str]:
    rows = [r for r in runs if r["task"] == task]
    ref = next((r for r in rows if r["arm"] == "torch:fp32"), None)
    lines = [f"| backend:precision | nDCG@10 | Δ vs torch fp32 | {extra} | wall s (load+convert+calibrate+score) |",
             "|---|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: ARMS.index(r["arm"])):
        m = r["metrics"]
        delta = f"{m['nDCG@10'] - ref['metrics']['nDCG@10']:+.4f}" if ref is not None and r is not ref else "reference"
        lines.append(f"| {r['arm']} | {m['nDCG@10']:.4f} | {delta} | {m.get(extra, float('nan')):.4f} | "
                     f"{r['seconds']:.0f} |")
    return lines


def write(results: dict, args: argparse.Namespace) -> None:
    from report import write_section

    runs = results["runs"]
    text = [f"## {TITLE}", "",
            "Ranking quality of each serving backend and precision against torch fp32, measured as a user runs it "
            "(`ssft.pipeline.rerank.rerank` / `retrieve_corpus`, what `ssft-rerank` / `ssft-retrieve` call). int8 on "
            "OpenVINO is NNCF static quantisation calibrated on up to 400 inputs drawn from what is served (the "
            "candidate pairs being reranked; the queries and corpus being retrieved from). Wall seconds include "
            "loading, conversion and calibration, on a machine that may be shared with other jobs "
            f"({results.get('threads', '?')} torch threads), and a corpus already in the on-disk embedding cache is "
            "not encoded again (a torch fp32 row of a few seconds): a rough cost, not a throughput figure (see "
            "§ vs_sentence_transformers_openvino).", "",
            "Torch's dynamic int8 (no arm since serving refuses it) was measured at commit 0b539f5, the same "
            "models, queries and CPU: nDCG@10 0.1853 reranking (Δ −0.0069) and 0.6279 retrieving (Δ −0.0172).", ""]
    if results.get("commands"):
        text += ["Measured by: " + "; ".join(f"`{c}`" for c in results["commands"]) + " (arms run apart are merged "
                 "into one section with `--merge`).", ""]
    if any(r["task"] == "rerank" for r in runs):
        info = results["rerank"]
        text += [f"**Reranking** — `{info['model']}` (a MiniLM cross-encoder trained by ssft on {info['data']}), "
                 f"BM25 top-{info['depth']} of {info['queries']} {args.split} queries (a fixed random subset, seed "
                 f"{info['seed']}, the same for every arm), averaged over those queries:", ""]
        text += table(runs, "rerank", "RR@10") + [""]
        bm25 = next((r["first_stage"] for r in runs if r["task"] == "rerank" and r.get("first_stage")), None)
        if bm25:
            text += [f"BM25 itself on these queries: nDCG@10 {bm25['nDCG@10']:.4f}. What is compared is the serving of "
                     "one model, not the model against its first stage.", ""]
    if any(r["task"] == "retrieve" for r in runs):
        info = results["retrieve"]
        text += [f"**Dense full retrieval** — `{info['model']}` (zero-shot), all of {info['data']}'s {args.split} "
                 f"queries against its whole corpus (flat index, top 100):", ""]
        text += table(runs, "retrieve", "R@100") + [""]
    write_section("openvino_quality", "\n".join(text))


if __name__ == "__main__":
    sys.exit(main())
