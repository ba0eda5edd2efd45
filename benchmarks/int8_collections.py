"""Whether int8 serving holds on every collection: one model's full-retrieval nDCG@10 at each serving precision
(fp32, bf16, OpenVINO int8 calibrated on the corpus served), on several datasets, against fp32.

    SSFT_DATA_HOME=../shared/data python benchmarks/int8_collections.py runs/quickstart \
        [--datasets scifact,nfcorpus,cranfield] [--arms fp32,bf16,int8] [--out runs/bench/int8] [--write]

Each arm is ``ssft-eval MODEL --datasets … --first-stage full --precision ARM --output OUT/ARM`` (what a user runs;
``--backend auto``, so int8 is OpenVINO's static int8 calibrated on the corpus being encoded); an arm whose eval.json
exists is reused. The table: nDCG@10 per dataset and arm, the difference to fp32, and the worst |difference| of each
arm over the datasets, against the 0.005 that the documentation promises. ``--write``: BENCHMARKS.md
§ int8_collections.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import command, write_section  # noqa: E402

PROMISE = 0.005  # |ΔnDCG@10| against fp32 that docs/export-and-serving.md states for int8


def run_arm(model: str, datasets: list[str], arm: str, out: Path) -> dict[str, float]:
    """``{dataset: nDCG@10}`` of the model served at precision ``arm`` (ssft-eval, full retrieval)."""
    result = out / arm / "eval.json"
    if not result.is_file():
        cmd = ["ssft-eval", model, "--datasets", ",".join(datasets), "--first-stage", "full", "--precision", arm,
               "--output", str(out / arm)]
        print("[int8_collections]", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    data = json.loads(result.read_text())
    return {d["dataset"]: d["model"]["nDCG@10"] for d in data["datasets"]}


def markdown(model: str, datasets: list[str], arms: list[str], scores: dict[str, dict[str, float]], cmd: str) -> str:
    lines = ["## Serving precision on several collections: full retrieval against fp32", "", f"`{cmd}`", "",
             f"`ssft-eval {model} --datasets {','.join(datasets)} --first-stage full --precision ARM` for each arm "
             "(`--backend auto`: int8 is OpenVINO's static int8, calibrated on the corpus being encoded); nDCG@10 of all "
             "the judged test queries, the difference to fp32 in brackets.", "",
             "| dataset | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    for d in datasets:
        ref = scores["fp32"][d] if "fp32" in scores else None
        cells = [f"{scores[a][d]:.4f}" + ("" if ref is None or a == "fp32" else f" ({scores[a][d] - ref:+.4f})")
                 for a in arms]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    if "fp32" in scores:
        lines.append("")
        for a in arms:
            if a == "fp32":
                continue
            worst = max(abs(scores[a][d] - scores["fp32"][d]) for d in datasets)
            lines.append(f"- {a}: worst |ΔnDCG@10| {worst:.4f} over {len(datasets)} collections "
                         f"({'within' if worst <= PROMISE else 'beyond'} {PROMISE})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="what ssft-eval takes: a run folder, a saved model, a checkpoint")
    p.add_argument("--datasets", default="scifact,nfcorpus,cranfield")
    p.add_argument("--arms", default="fp32,bf16,int8")
    p.add_argument("--out", default="runs/bench/int8_collections")
    p.add_argument("--write", action="store_true")
    a = p.parse_args(argv)
    datasets = [d for d in a.datasets.split(",") if d]
    arms = [x for x in a.arms.split(",") if x]
    scores = {arm: run_arm(a.model, datasets, arm, Path(a.out)) for arm in arms}
    body = markdown(a.model, datasets, arms, scores, command())
    print(body)
    if a.write:
        write_section("int8_collections", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
