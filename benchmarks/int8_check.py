"""Whether int8's check of its own scores catches what int8 moves (``ssft.models.interop.openvino.int8_check``): for
each model and dataset, nDCG@10 reranking BM25's top ``--depth`` at fp32, at bf16, and at int8 with the check's limit
lifted (what int8 alone would serve), for each calibration seed, beside the check's measure; then what ssft serves
under ``--limit``: int8 where the measure is within it, else bf16.

    SSFT_DATA_HOME=../shared/data python benchmarks/int8_check.py runs/cross[,runs/other] \
        [--datasets nfcorpus:dev,scifact:train] [--depth 20] [--seeds 0,1] [--setting base] [--limit 0.2] \
        [--out runs/bench/int8_check.jsonl] [--notes FILE] [--write]

Datasets are ``name:split`` (choose the limit on dev splits: ``nfcorpus:dev``, or ``scifact:train`` for a model that
never trained on SciFact); each is its own job, so each calibrates (and checks) on its own pairs, as ``ssft-eval`` of
that dataset alone would. ``--setting``: int8 under one of ``benchmarks/int8_settings.py``'s settings instead of as ssft
quantises (``base``), e.g. ``no_smooth_quant``: does the check catch an int8 that distorts the scores? Every (model,
dataset, arm, setting, seed) appends one JSON line to ``--out``; one already there is not measured again.

``--cost N``: what the check adds to serving at int8, in CPU-seconds: the first model served
(``ssft.load``, int8) on the BM25 top ``--depth`` pairs of the first N judged queries of the first dataset, with and
without the check, interleaved, median of ``--repeats``. ``--write``: BENCHMARKS.md § int8_check.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import resource
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from int8_settings import applied, fidelity_pairs  # noqa: E402 -- its settings, and the pairs its fidelity mode scores
from report import add_notes_option, with_notes, write_section  # noqa: E402

import ssft  # noqa: E402
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


def measure(model: str, dataset: str, arm: str, seed: int, depth: int, setting: str = "base") -> dict[str, Any]:
    """One row: ``model``'s nDCG@10 reranking ``dataset``'s (name:split) BM25 top ``depth`` at ``arm`` (fp32, bf16,
    or int8 under ``setting``, unchecked, with calibration sample ``seed``, and the check's measure)."""
    name, _, split = dataset.partition(":")
    measured: list[float] = []
    with contextlib.ExitStack() as stack:
        if arm == "int8":
            if setting != "base":
                stack.enter_context(applied(setting, seed))
            stack.enter_context(unchecked(seed, measured))
        result = evaluate_datasets(model, [name], split=split or "test", first_stage="bm25", depth=depth,
                                   precision=arm, backend="openvino")
    row = {"model": model, "dataset": dataset, "depth": depth, "arm": arm, "seed": seed,
           "nDCG@10": result["datasets"][0]["model"]["nDCG@10"]}
    if arm == "int8":
        row["setting"] = setting
    if measured:
        row["check"] = measured[-1]
    return row


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cost(model: str, dataset: str, queries: int, depth: int, repeats: int) -> str:
    """The ``--cost`` line: CPU-seconds of serving ``model`` at int8 with and without the check (module docstring)."""
    pairs, _ = fidelity_pairs(dataset, queries, depth)
    ranker = ssft.load(model, backend="torch", precision="fp32")
    timings: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeats):
        for checked in (True, False):
            saved = type(ranker).int8_checks_scores
            type(ranker).int8_checks_scores = checked
            try:
                start = cpu_seconds()
                ssft.load(ranker, precision="int8", calibration=pairs)
                timings[checked].append(cpu_seconds() - start)
            finally:
                type(ranker).int8_checks_scores = saved
    with_check, without = statistics.median(timings[True]), statistics.median(timings[False])
    return (f"- Cost: serving `{model}` at int8 on {len(pairs)} pairs ({queries} queries of {dataset} × BM25's top "
            f"{depth}) took {with_check:.1f} CPU-s with the check and {without:.1f} without (median of {repeats}, "
            f"interleaved): the check adds {with_check - without:.1f} CPU-s, once per load.")


def table(rows: list[dict], models: list[str], datasets: list[str], depth: int, limit: float) -> str:
    lines = [f"nDCG@10 reranking BM25's top {depth}, OpenVINO, against fp32 (Δ); int8 with the check's limit lifted, "
             f"one row per calibration seed (setting: as ssft quantises, `base`, or as `benchmarks/int8_settings.py` "
             f"changes it); check: int8's mean |score error| over the spread of each query's float scores, on "
             f"{openvino.CHECK_PAIRS} pairs of whole queries; served: what ssft serves at limit {limit:g} (int8 within "
             f"it, else bf16).", "",
             "| model | dataset | fp32 | bf16 | int8 setting | seed | check | int8 | served |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|"]
    worst_int8 = worst_served = 0.0
    fallbacks = total = 0
    for model in models:
        for dataset in datasets:
            mine = [r for r in rows if (r["model"], r["dataset"], r["depth"]) == (model, dataset, depth)]
            fp32 = next(r for r in mine if r["arm"] == "fp32")["nDCG@10"]
            bf16 = next(r for r in mine if r["arm"] == "bf16")["nDCG@10"]
            for int8 in sorted((r for r in mine if r["arm"] == "int8"),
                               key=lambda r: (r.get("setting", "base") != "base", r.get("setting", "base"), r["seed"])):
                seed = int8["seed"]
                falls_back = int8["check"] > limit
                if int8.get("setting", "base") != "base":  # not what ssft serves: shown, kept out of the verdict
                    lines.append(f"| `{model}` | {dataset} | {fp32:.4f} | {bf16:.4f} ({bf16 - fp32:+.4f}) "
                                 f"| {int8['setting']} | {seed} | {int8['check']:.3f} | {int8['nDCG@10']:.4f} "
                                 f"({int8['nDCG@10'] - fp32:+.4f}) | {'bf16' if falls_back else 'int8'} "
                                 f"({(bf16 if falls_back else int8['nDCG@10']) - fp32:+.4f}) |")
                    continue
                served = bf16 if falls_back else int8["nDCG@10"]
                worst_int8 = max(worst_int8, abs(int8["nDCG@10"] - fp32))
                worst_served = max(worst_served, abs(served - fp32))
                fallbacks, total = fallbacks + falls_back, total + 1
                lines.append(f"| `{model}` | {dataset} | {fp32:.4f} | {bf16:.4f} ({bf16 - fp32:+.4f}) | base | {seed} "
                             f"| {int8['check']:.3f} | {int8['nDCG@10']:.4f} ({int8['nDCG@10'] - fp32:+.4f}) "
                             f"| {'bf16' if falls_back else 'int8'} ({served - fp32:+.4f}) |")
    lines += ["", f"- As ssft quantises (`base`), int8 unchecked: worst |ΔnDCG@10| {worst_int8:.4f}; served under the "
                  f"check: {worst_served:.4f} ({fallbacks} of {total} jobs served at bf16); the documentation promises "
                  f"{PROMISE}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", help="comma-separated: what ssft-eval takes (run folders, saved models)")
    p.add_argument("--datasets", default="nfcorpus:dev,scifact:train", help="comma-separated name:split")
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--seeds", default="0", help="calibration sample seeds, comma-separated")
    p.add_argument("--setting", default="base", help="int8 as benchmarks/int8_settings.py sets it (base: as ssft does)")
    p.add_argument("--limit", type=float, default=openvino.CHECK_LIMIT, help="the check's limit the table applies")
    p.add_argument("--out", type=Path, default=Path("runs/bench/int8_check.jsonl"))
    p.add_argument("--cost", type=int, default=0, metavar="N", help="time the check on N queries' pairs")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--write", action="store_true", help="write BENCHMARKS.md § int8_check")
    add_notes_option(p)
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    datasets = [d for d in a.datasets.split(",") if d]
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = [json.loads(line) for line in a.out.read_text().splitlines()] if a.out.is_file() else []
    for row in rows:  # rows written before --setting existed
        if row["arm"] == "int8":
            row.setdefault("setting", "base")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for model in models:
        for dataset in datasets:
            for arm, seed in [("fp32", 0), ("bf16", 0)] + [("int8", s) for s in seeds]:
                setting = a.setting if arm == "int8" else None
                if any((r["model"], r["dataset"], r["depth"], r["arm"], r["seed"], r.get("setting")) ==
                       (model, dataset, a.depth, arm, seed, setting) for r in rows):
                    continue
                row = measure(model, dataset, arm, seed, a.depth, setting or "base")
                print("[int8_check]", json.dumps(row), flush=True)
                with a.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                rows.append(row)
    body = table(rows, models, datasets, a.depth, a.limit)
    if a.cost:
        body += "\n" + cost(models[0], datasets[0], a.cost, a.depth, a.repeats)
    print(body)
    if a.write:
        write_section("int8_check", with_notes(f"## {TITLE}\n\n{body}", a.notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
