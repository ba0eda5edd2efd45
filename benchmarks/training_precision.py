"""Does bf16 mixed-precision training keep ranking quality? (issue 19, point 2)

Each recipe is trained twice with the same seed, data and steps: ``training.bf16=false`` (float32, the default) and
``training.bf16=true`` (accelerate autocasts the forward to bf16 on the CPU; master weights stay float32). Both arms
are evaluated alike, at the recipe's ``eval.precision`` (``auto`` unless overridden), so the difference is the
training's. The arms run one after the other, alternating per seed, each in its own ``ssft-train`` process.

    SSFT_DATA_HOME=../shared/data python benchmarks/training_precision.py \
        --recipes recipes/cross_lora_nfcorpus.yaml,recipes/dense_scifact.yaml --seeds 42 --out /tmp/training_precision
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import write_section  # noqa: E402
from ssft.core.precision import cpu_bf16_native  # noqa: E402

RAN: list[Path] = []  # the runs this invocation trained (the others were reused)
ARMS = {"fp32": "training.bf16=false", "bf16": "training.bf16=true"}


def train(recipe: Path, arm: str, seed: int, out_root: Path, overrides: list[str]) -> Path:
    """One ``ssft-train`` run (skipped when its metrics.json is already there)."""
    out = out_root / f"{recipe.stem}-{arm}-s{seed}"
    if not (out / "metrics.json").is_file():
        RAN.append(out)
        cmd = [sys.executable, "-m", "ssft.train", str(recipe), f"seed={seed}", f"training.output_dir={out}",
               ARMS[arm], *overrides]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return out


def summary(out: Path) -> dict:
    metrics = json.loads((out / "metrics.json").read_text())
    info = json.loads((out / "run_info.json").read_text())
    return {
        "test": metrics["test"]["nDCG@10"],
        "fused": metrics.get("test+bm25", {}).get("nDCG@10"),
        "start": metrics.get("start", {}).get("nDCG@10"),
        "history": [h["eval_nDCG@10"] for h in info.get("validation_history", []) if "eval_nDCG@10" in h],
        "train_seconds": info["train_seconds"],
        "train_loss": info.get("train_loss"),
        "precision": info.get("precision"),
        "best_epoch": (info.get("best_validation") or {}).get("epoch"),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", default="recipes/cross_lora_nfcorpus.yaml,recipes/dense_scifact.yaml")
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--out", type=Path, default=Path("/tmp/training_precision"))
    parser.add_argument("--note", action="append", default=[], help="a line for the section (machine load, commit)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    ns = parser.parse_args()
    recipes = [ROOT / r if not Path(r).is_absolute() else Path(r) for r in ns.recipes.split(",")]
    seeds = [int(s) for s in ns.seeds.split(",")]
    load = []
    results: dict[tuple[str, str], list[dict]] = {}
    for recipe in recipes:
        for seed in seeds:
            for arm in (ARMS if seed % 2 == 0 else reversed(list(ARMS))):
                before = len(RAN)
                results.setdefault((recipe.stem, arm), []).append(summary(train(recipe, arm, seed, ns.out, ns.overrides)))
                if len(RAN) > before:
                    load.append(os.getloadavg()[0])

    def mean(values: list[float | None]) -> str:
        values = [v for v in values if v is not None]
        return f"{statistics.mean(values):.4f}" if values else "–"

    cpu_flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").is_file() else set()
    flags = ", ".join(f for f in ("avx512_bf16", "amx_bf16") if f in cpu_flags) or "no bf16 flag"
    flags += "" if cpu_bf16_native() else " (no native bf16: the bf16 arm is emulated)"
    flags += "" if "amx_bf16" in cpu_flags else " (no AMX)"
    load_text = (f"1-minute load average {min(load):.1f}–{max(load):.1f} at the end of the runs trained here" if load
                 else "every run reused from an earlier invocation (load: see the notes)")
    lines = [
        "## bf16 mixed-precision training: ranking quality against float32",
        "",
        f"`python benchmarks/training_precision.py --recipes {ns.recipes} --seeds {ns.seeds}"
        + (" " + " ".join(ns.overrides) if ns.overrides else "") + "`: each recipe trained with `training.bf16=false` "
        "(float32) and `training.bf16=true` (accelerate's CPU autocast, float32 master weights), the same seed, data and "
        f"steps; both evaluated at the recipe's inference precision. CPU: {flags}; "
        f"{load_text} (other jobs beside it: the seconds are noisy, the nDCG is not).",
        "",
        "| recipe | training | test nDCG@10 | Δ vs fp32 | + BM25 interp. | start | dev nDCG@10 by epoch | best epoch | "
        "mean train loss | train seconds | inference |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for recipe in recipes:
        base = statistics.mean(r["test"] for r in results[recipe.stem, "fp32"])
        for arm in ARMS:
            rs = results[recipe.stem, arm]
            test = statistics.mean(r["test"] for r in rs)
            history = " / ".join(f"{v:.3f}" for v in rs[0]["history"]) or "– (no validation split)"
            lines.append(
                f"| {recipe.name} | {arm} | {test:.4f} | {test - base:+.4f} | {mean([r['fused'] for r in rs])} | "
                f"{mean([r['start'] for r in rs])} | {history} | "
                f"{', '.join('–' if r['best_epoch'] is None else format(r['best_epoch'], 'g') for r in rs)} | "
                f"{mean([r['train_loss'] for r in rs])} | {statistics.mean(r['train_seconds'] for r in rs):.0f} | "
                f"{rs[0]['precision'] or '?'} |")
    lines.append("")
    lines += [f"- {n}" for n in ns.note]
    lines.append(f"- Runs: `{ns.out}/<recipe>-<fp32|bf16>-s<seed>`; one process each, "
                 f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}.")
    body = "\n".join(lines)
    print(body)
    if not ns.no_write:
        write_section("training_precision", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
