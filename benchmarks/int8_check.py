"""Whether int8's check of its own scores catches what int8 moves (``ssft.models.interop.openvino.int8_check``): for
each model and dataset, nDCG@10 reranking BM25's top ``--depth`` at fp32, at bf16, and at int8 with the check's limit
lifted (what int8 alone would serve), for each calibration seed, beside the check's measure; then what ssft serves
under ``--limit``: int8 where the measure is within it, else bf16.

    SSFT_DATA_HOME=../shared/data python benchmarks/int8_check.py runs/cross[,runs/other] \
        [--datasets nfcorpus:dev,scifact:train] [--depth 20] [--seeds 0,1] [--limit 0.2] \
        [--out runs/bench/int8_check.jsonl] [--notes FILE] [--write]

Datasets are ``name:split`` (choose the limit on dev splits: ``nfcorpus:dev``, or ``scifact:train`` for a model that
never trained on SciFact); each is its own job, so each calibrates (and checks) on its own pairs, as ``ssft-eval`` of
that dataset alone would. Every (model, dataset, arm, seed) appends one JSON line to ``--out``; one already there is
not measured again. ``--write``: BENCHMARKS.md § int8_check.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_notes_option, with_notes, write_section  # noqa: E402

from ssft.models.interop import openvino  # noqa: E402
from ssft.pipeline.evaluate import evaluate_datasets  # noqa: E402

TITLE = "int8's check of its own scores: what it catches, on dev splits"
PROMISE = 0.005  # |ΔnDCG@10| against fp32 that the serving docs state for int8


@contextlib.contextmanager
def unchecked(seed: int, measured: list[float]):
    """ssft's int8 serving with calibration sample ``seed`` and the check's limit lifted; each measure it takes is
    appended to ``measured``."""
    serve, limit, check = openvino.serve_openvino, openvino.CHECK_LIMIT, openvino.int8_check

    def recording(*args, **kwargs) -> float:
        measured.append(check(*args, **kwargs))
        return measured[-1]

    openvino.serve_openvino = functools.partial(serve, seed=seed)
    openvino.CHECK_LIMIT, openvino.int8_check = math.inf, recording
    try:
        yield
    finally:
        openvino.serve_openvino, openvino.CHECK_LIMIT, openvino.int8_check = serve, limit, check


def measure(model: str, dataset: str, arm: str, seed: int, depth: int) -> dict[str, Any]:
    """One row: ``model``'s nDCG@10 reranking ``dataset``'s (name:split) BM25 top ``depth`` at ``arm`` (fp32, bf16,
    or int8 unchecked with calibration sample ``seed``, and the check's measure)."""
    name, _, split = dataset.partition(":")
    measured: list[float] = []
    with unchecked(seed, measured) if arm == "int8" else contextlib.nullcontext():
        result = evaluate_datasets(model, [name], split=split or "test", first_stage="bm25", depth=depth,
                                   precision=arm, backend="openvino")
    row = {"model": model, "dataset": dataset, "depth": depth, "arm": arm, "seed": seed,
           "nDCG@10": result["datasets"][0]["model"]["nDCG@10"]}
    if measured:
        row["check"] = measured[-1]
    return row


def table(rows: list[dict], models: list[str], datasets: list[str], seeds: list[int], depth: int, limit: float) -> str:
    lines = [f"nDCG@10 reranking BM25's top {depth}, OpenVINO, against fp32 (Δ); int8 with the check's limit lifted, "
             f"one row per calibration seed; check: int8's mean |score error| over the spread of each query's float "
             f"scores, on {openvino.CHECK_PAIRS} pairs of whole queries; served: what ssft serves at limit {limit:g} "
             f"(int8 within it, else bf16).", "",
             "| model | dataset | fp32 | bf16 | seed | check | int8 | served |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    worst_int8 = worst_served = 0.0
    fallbacks = total = 0
    for model in models:
        for dataset in datasets:
            def get(arm: str, seed: int = 0) -> dict:
                return next(r for r in rows if (r["model"], r["dataset"], r["depth"], r["arm"]) ==
                            (model, dataset, depth, arm) and (arm != "int8" or r["seed"] == seed))
            fp32, bf16 = get("fp32")["nDCG@10"], get("bf16")["nDCG@10"]
            for seed in seeds:
                int8 = get("int8", seed)
                falls_back = int8["check"] > limit
                served = bf16 if falls_back else int8["nDCG@10"]
                worst_int8 = max(worst_int8, abs(int8["nDCG@10"] - fp32))
                worst_served = max(worst_served, abs(served - fp32))
                fallbacks, total = fallbacks + falls_back, total + 1
                lines.append(f"| `{model}` | {dataset} | {fp32:.4f} | {bf16:.4f} ({bf16 - fp32:+.4f}) | {seed} "
                             f"| {int8['check']:.3f} | {int8['nDCG@10']:.4f} ({int8['nDCG@10'] - fp32:+.4f}) "
                             f"| {'bf16' if falls_back else 'int8'} ({served - fp32:+.4f}) |")
    lines += ["", f"- int8 unchecked: worst |ΔnDCG@10| {worst_int8:.4f}; served under the check: {worst_served:.4f} "
                  f"({fallbacks} of {total} jobs served at bf16); the documentation promises {PROMISE}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", help="comma-separated: what ssft-eval takes (run folders, saved models)")
    p.add_argument("--datasets", default="nfcorpus:dev,scifact:train", help="comma-separated name:split")
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--seeds", default="0", help="calibration sample seeds, comma-separated")
    p.add_argument("--limit", type=float, default=openvino.CHECK_LIMIT, help="the check's limit the table applies")
    p.add_argument("--out", type=Path, default=Path("runs/bench/int8_check.jsonl"))
    p.add_argument("--write", action="store_true", help="write BENCHMARKS.md § int8_check")
    add_notes_option(p)
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    datasets = [d for d in a.datasets.split(",") if d]
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = [json.loads(line) for line in a.out.read_text().splitlines()] if a.out.is_file() else []
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for model in models:
        for dataset in datasets:
            for arm, seed in [("fp32", 0), ("bf16", 0)] + [("int8", s) for s in seeds]:
                if any((r["model"], r["dataset"], r["depth"], r["arm"], r["seed"]) ==
                       (model, dataset, a.depth, arm, seed) for r in rows):
                    continue
                row = measure(model, dataset, arm, seed, a.depth)
                print("[int8_check]", json.dumps(row), flush=True)
                with a.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                rows.append(row)
    body = table(rows, models, datasets, seeds, a.depth, a.limit)
    print(body)
    if a.write:
        write_section("int8_check", with_notes(f"## {TITLE}\n\n{body}", a.notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
