"""Benchmark: the reduced 001 Table 3-5 grid on NFCorpus — cross-encoder and ColBERT with full FT, LoRA, LoRA++,
001's prefix (hidden_prefix) and the two sequential hybrids (+ the concurrent hybrid on the cross-encoder), 3 seeds —
rendered as 001's tables (mean over seeds, trainable parameters, * / ** one-tailed equal-variance t-test over seeds
against full FT, improvement %), a paired per-query t-test against full FT, and 001 Fig. 4 (validation curves).

    SSFT_DATA_HOME=../shared/data python benchmarks/hybrid_grid.py [--run] [--archs cross,colbert]

``--run`` first runs (or resumes) ``ssft-sweep recipes/sweeps/hybrids_<arch>.yaml`` for each architecture; without
it the tables are built from whatever runs of those sweeps have finished (the table says how many seeds each row
has). Writes benchmarks/results/hybrids_<arch>.{md,csv}, benchmarks/results/fig4_hybrids_<arch>.png and the
'hybrid_grid' section of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RESULTS = ROOT / "benchmarks" / "results"
SPLIT = "test_short"
METRICS = ["nDCG@10", "nDCG@5", "P@5", "RR@10"]
LABELS = {
    "full": "Full FT", "lora": "LoRA", "lora++": "LoRA++", "hidden_prefix": "Prefix (001 hidden prefix)",
    "hidden_prefix -> lora": "Prefix → LoRA", "lora -> hidden_prefix": "LoRA → Prefix",
    "hidden_prefix -> lora (concurrent)": "Prefix + LoRA (concurrent)",
}
TITLES = {"cross": "monoBERT cross-encoder (001 Table 3 layout)", "colbert": "ColBERT (001 Table 4 layout)"}
FIG4 = [("hidden_prefix", "Prefix-tuning"), ("lora", "LoRA"), ("hidden_prefix -> lora (concurrent)", "Concurrent hybrid"),
        ("hidden_prefix -> lora", "Sequential hybrid (prefix → LoRA)")]


def grid_file(arch: str) -> Path:
    return ROOT / "recipes" / "sweeps" / f"hybrids_{arch}.yaml"


def finished_runs(arch: str) -> list[Path]:
    """Run folders of the sweep that hold metrics.json, in the sweep's order."""
    from ssft.pipeline.sweep import expand, load_grid

    cwd = os.getcwd()
    os.chdir(ROOT)  # the grid's output_root is relative to the repository root
    try:
        runs = expand(load_grid(grid_file(arch)))
    finally:
        os.chdir(cwd)
    return [ROOT / r.run_dir for r in runs if (ROOT / r.run_dir / "metrics.json").is_file()]


def method_of(run: Path) -> str:
    import yaml

    from ssft.eval.tables import run_method_name

    return run_method_name(yaml.safe_load((run / "recipe.yaml").read_text()).get("adapter", {}))


def paired_rows(runs: list[Path], metric: str = "nDCG@10") -> list[tuple[str, float, float, float, int]]:
    """Per method: mean per-query ``metric`` over its seeds, against full FT's, paired one-tailed t-test."""
    from ssft.eval.significance import paired_ttest, read_per_query

    per_method: dict[str, list[dict[str, float]]] = {}
    for run in runs:
        per_method.setdefault(method_of(run), []).append(read_per_query(run / f"per_query.{SPLIT}.tsv", metric))

    def averaged(tables: list[dict[str, float]]) -> dict[str, float]:
        return {q: statistics.mean(t[q] for t in tables) for q in tables[0]}

    if "full" not in per_method:
        return []
    base = averaged(per_method["full"])
    rows = []
    for method, tables in per_method.items():
        if method == "full":
            continue
        mine = averaged(tables)
        test = paired_ttest(mine, base)
        rows.append((LABELS.get(method, method), statistics.mean(mine.values()), statistics.mean(base.values()), test.pvalue,
                     len(tables)))
    return rows


def main() -> None:
    from report import add_notes_option, with_notes, write_section

    from ssft.analysis.figures import plot_validation_curves, validation_curve
    from ssft.eval.tables import build_table, collect_runs, render_csv, render_markdown
    from ssft.pipeline.sweep import load_grid, run_sweep

    parser = argparse.ArgumentParser()
    parser.add_argument("--archs", default="cross,colbert")
    parser.add_argument("--run", action="store_true", help="run / resume the sweeps first")
    add_notes_option(parser)
    ns = parser.parse_args()
    started = time.time()
    RESULTS.mkdir(parents=True, exist_ok=True)
    lines = [
        "## Reduced 001 Table 3-5 grid: hybrids, seeds and significance on NFCorpus short queries",
        "",
        "Commands: `ssft-sweep recipes/sweeps/hybrids_cross.yaml`, `ssft-sweep recipes/sweeps/hybrids_colbert.yaml`, then "
        "`SSFT_DATA_HOME=../shared/data python benchmarks/hybrid_grid.py --notes benchmarks/notes/hybrid_grid.md` "
        "(tables, figures, this section).",
        "Budget per run (`recipes/sweeps/hybrids_base.yaml`): all-MiniLM-L6-v2; 80 train queries × (1 positive + 3 random "
        "negatives), 4 epochs of 10 steps (hybrids: 2 + 2), listwise CE; best epoch on 30 dev queries (BM25 top-10); test = "
        "the 192 short test queries, BM25 top-10 reranked; seeds 1, 2, 3; 2 CPU cores.",
        "Marks: `*` p ≤ 0.05, `**` p ≤ 0.01, 001's one-tailed equal-variance t-test over seeds against Full FT; "
        "the paired test is one-tailed over the 192 queries, per-query values averaged over seeds.",
        "",
    ]
    for arch in ns.archs.split(","):
        if ns.run:
            cwd = os.getcwd()
            os.chdir(ROOT)
            try:
                run_sweep(load_grid(grid_file(arch)))
            finally:
                os.chdir(cwd)
        runs = finished_runs(arch)
        if not runs:
            lines += [f"### {TITLES[arch]}", "", "No finished runs yet.", ""]
            continue
        rows = collect_runs(runs, SPLIT, LABELS)
        table = build_table(rows, METRICS, baseline="Full FT")
        markdown, csv_text = render_markdown(table), render_csv(table)
        (RESULTS / f"hybrids_{arch}.md").write_text(markdown + "\n")
        (RESULTS / f"hybrids_{arch}.csv").write_text(csv_text)
        seeds = {r.method: len(next(iter(r.scores.values()))) for r in rows}
        bm25 = json.loads((runs[0] / "metrics.json").read_text())["bm25"]
        lines += [f"### {TITLES[arch]} ({len(runs)} runs; seeds per row: "
                  + ", ".join(f"{k} {v}" for k, v in seeds.items()) + ")", "", markdown, "",
                  "BM25 alone on the same queries: " + ", ".join(f"{m} {bm25[m]:.4f}" for m in METRICS) + ".", ""]
        infos = [json.loads((run / "run_info.json").read_text()) for run in runs]
        walls = [i["wall_seconds"] for i in infos]
        lines += [f"Cost: {len(runs)} runs, {sum(walls) / 60:.0f} min of run wall time in all "
                  f"(median {statistics.median(walls):.0f} s "
                  f"a run, of which training {sum(i['train_seconds'] for i in infos) / 60:.0f} min in all).", ""]
        paired = paired_rows(runs)
        if paired:
            lines += ["| method | mean nDCG@10 | Full FT | paired p (one-tailed) | seeds |", "|---|---:|---:|---:|---:|"]
            lines += [f"| {name} | {m:.4f} | {b:.4f} | {p:.3f} | {n} |" for name, m, b, p, n in paired]
            lines.append("")
        curves = []
        first_seed = {}
        for run in runs:
            first_seed.setdefault(method_of(run), run)
        for method, label in FIG4:
            if method in first_seed:
                curves.append(validation_curve(first_seed[method], label))
        if len(curves) >= 2:
            png = RESULTS / f"fig4_hybrids_{arch}.png"
            plot_validation_curves(curves, png, title=f"{TITLES[arch].split(' (')[0]}: validation nDCG@10 per epoch (seed 1)")
            lines += [f"001 Fig. 4 analogue: `{png.relative_to(ROOT)}` ({', '.join(c.label for c in curves)}; seed 1).", ""]
    lines.append(f"Tables written in {time.time() - started:.0f} s; training times are in each run's run_info.json.")
    text = with_notes("\n".join(lines), ns.notes)
    write_section("hybrid_grid", text)
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
