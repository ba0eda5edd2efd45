"""One model on several datasets in one ``ssft-eval`` call: nDCG@10 / R@100 per dataset and their mean, BM25 beside it.

    SSFT_DATA_HOME=../shared/data python benchmarks/multi_dataset_eval.py \
        --cross-run runs/cross_lora_nfcorpus [--datasets nfcorpus,scifact,cranfield] [--write]

Runs two ``ssft-eval`` commands (each its own process, timed) and writes their tables into BENCHMARKS.md
(§ multi_dataset_eval) with the commands, the commit, the CPU and the date:

- zero-shot ``sentence-transformers/all-MiniLM-L6-v2`` (dense, mean pooling, cosine), full retrieval of each corpus,
  top-100, fp32 (``--minilm-args`` to change);
- the cross-encoder of ``ssft-train recipes/cross_lora_nfcorpus.yaml`` (all-MiniLM-L6-v2 with LoRA, trained on 400
  NFCorpus queries), reranking the BM25 top-20 as that recipe does, at ``auto`` precision (``--cross-args``).

``--reuse PARTS`` reports those parts' earlier results (under ``--out``) without running them again.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cross-run", default=str(ROOT / "runs" / "cross_lora_nfcorpus"),
                   help="the trained run folder of recipes/cross_lora_nfcorpus.yaml")
    p.add_argument("--datasets", default="nfcorpus,scifact,cranfield")
    p.add_argument("--out", default=str(ROOT / "runs" / "bench" / "multi_dataset_eval"))
    p.add_argument("--minilm-args", default="--first-stage full --depth 100 --precision fp32")
    p.add_argument("--cross-args", default="--first-stage bm25 --depth 20")
    p.add_argument("--parts", default="minilm,cross")
    p.add_argument("--reuse", default="", help="parts (comma-separated) whose earlier result under --out is reported "
                                               "as it is, without running them again")
    p.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    a = p.parse_args()
    out = Path(a.out)
    models = {"minilm": (MINILM, a.minilm_args), "cross": (a.cross_run, a.cross_args)}
    runs = []
    for part in [x for x in a.parts.split(",") if x]:
        if part not in models:
            p.error(f"--parts: unknown part '{part}' (minilm, cross)")
        model, extra = models[part]
        folder = out / part
        command = ["ssft-eval", model, "--datasets", a.datasets, "--output", str(folder), *shlex.split(extra), "--overwrite"]
        timing = out / f"{part}.timing.json"  # beside the ssft-eval folder: how long the command took, and the load
        if part not in a.reuse.split(","):
            load = os.getloadavg()[0]
            start = time.perf_counter()
            done = subprocess.run(command, cwd=ROOT)
            if done.returncode != 0:
                print(f"{' '.join(command)}: exit {done.returncode}", file=sys.stderr)
                return done.returncode
            timing.write_text(json.dumps({"command": command, "seconds": time.perf_counter() - start,
                                          "load": max(load, os.getloadavg()[0])}) + "\n")
        measured = json.loads(timing.read_text())
        result = json.loads((folder / "eval.json").read_text())
        runs.append({"part": part, **measured, "result": result, "table": (folder / "eval.md").read_text().strip()})
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from report import command, write_section  # the section's provenance line: command, commit, CPU, date

    text = report(runs, command())
    print(text)
    if a.write:
        write_section("multi_dataset_eval", text)
    return 0


def _reading(r: dict) -> str:
    """One sentence per metric: where the model is significantly above / below BM25 (p <= 0.05), and the means."""
    parts = []
    for m in r["metrics"]:
        up = [d["dataset"] for d in r["datasets"] if d["significance"][m]["mark"] and d["model"][m] > d["bm25"][m]]
        down = [d["dataset"] for d in r["datasets"] if d["significance"][m]["mark"] and d["model"][m] < d["bm25"][m]]
        same = [d["dataset"] for d in r["datasets"] if d["dataset"] not in up + down]
        said = [f"above BM25 on {', '.join(up)}" if up else "", f"below on {', '.join(down)}" if down else "",
                f"not significantly different on {', '.join(same)}" if same else ""]
        parts.append(f"{m}: mean {r['mean']['model'][m]:.3f} against BM25's {r['mean']['bm25'][m]:.3f}; "
                     f"{'; '.join(x for x in said if x)}.")
    return " ".join(parts)


def report(runs: list[dict], cmd: str) -> str:
    lines = ["## Several datasets in one call (ssft-eval)", "",
             f"`{cmd}` runs the `ssft-eval` commands below (each table is that command's `eval.md`; a part named in "
             "`--reuse` was run by an earlier invocation): nDCG@10 and R@100 on the test split of each dataset, BM25 "
             "(bm25s, English stopwords, its own top-100) beside the model, the mean over the datasets; `*` / `**`: the "
             "model differs from BM25 at p <= 0.05 / 0.01 (paired t-test over the judged queries, two-sided). Metrics "
             "average over every judged query (a query without candidates scores 0). The machine was shared with "
             "other jobs while they ran (load averages below).", ""]
    for run in runs:
        r = run["result"]
        took = f"{run['seconds'] / 60:.1f} min"
        lines += [f"### {r['model']}: {r['what']}", "", f"`{' '.join(run['command'])}` ({took}, 1-minute load average "
                  f"up to {run['load']:.1f}; precision {r['precision']})", "", run["table"], "", _reading(r), ""]
    lines += ["Datasets are the BEIR folders under `$SSFT_DATA_HOME` (NFCorpus and SciFact are byte-identical to BEIR's; "
              "Cranfield is the classic collection with graded qrels). The same command takes hub ids in the BeIR layout "
              "(`BeIR/nfcorpus` with `BeIR/nfcorpus-qrels`), the MTEB layout (`mteb/nfcorpus`) and ir_datasets ids "
              "(`beir/nfcorpus/test`); `tests/data/test_dataset_layouts.py` checks each reads as the BEIR folder it was "
              "built from (the hub is not reachable from this machine, so the hub readers were checked on local "
              "copies laid out as the dataset cards of BeIR/nfcorpus, BeIR/nfcorpus-qrels and mteb/nfcorpus describe).",
              ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
