"""Benchmark figure: 001 Fig. 3 on NFCorpus — metric of ambiguous / non-ambiguous one-word queries per fine-tuning
method, cross- vs bi-encoders, from finished run folders.

    SSFT_DATA_HOME=../shared/data python benchmarks/ambiguity_fig3.py \\
        --bi-runs '/work/bench-runs/bi/*-s42' --cross-runs 'runs/sweeps/hybrids_cross/runs/*' [--metric nDCG@10]

The queries are NFCorpus's ``test_short`` split, classified with ``ssft.analysis.ambiguity`` (001 §5.1's rule by
default: one-word queries, lemmatised, ambiguous when WordNet gives the lemma two or more senses; ``--rule
confidence`` for pywsd's sense confidence). Each run is split on its own per-query file (``per_query.<its test
split>.tsv``); a run tested on all 323 test queries is restricted to the labelled test_short one-word queries, so
every run is scored on the same queries. Runs without ``metrics.json`` (still running, failed) are skipped and
listed. Runs of one method (seeds) are pooled; TwinBERT and ColBERT get panels of their own (``--group encoder``
pools all bi-encoders into one panel, as 001 draws it). Each panel also shows the BM25 ranking its runs reranked.
Error bars: 95% percentile bootstrap over the queries of each class.

One metric for all panels: P@20 (001's) only means something when every run ranks at least 20 candidates — the
cross-encoder grid reranks BM25's top 10, so ``--metric nDCG@10`` is the default; the deviation is stated on the
figure itself (its title names 001's P@20 whenever another metric is drawn), and ``--extra-bi-metric P@20`` adds
001's metric for the bi-encoders.

Writes ``--figure`` (default benchmarks/figures/fig3_ambiguity_ratio.png), the labels TSV beside it, and the
'ambiguity_fig3' section of BENCHMARKS.md (unless ``--no-report``).
"""
from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import add_notes_option, with_notes, write_section  # noqa: E402

from ssft.core.errors import SsftError, cli_entry  # noqa: E402

SPLIT = "test_short"
NAMES = {"full": "Full FT", "lora": "LoRA", "lora++": "LoRA++", "prefix": "Prefix (PEFT k/v)", "hidden_prefix": "Prefix-tuning",
         "prompt": "Prompt-tuning", "ss_hidden_prefix": "SS Prefix-tuning", "ss_lora": "SS LoRA",
         "hidden_prefix -> lora": "Prefix → LoRA", "lora -> hidden_prefix": "LoRA → Prefix",
         "hidden_prefix -> lora (concurrent)": "Prefix + LoRA (concurrent)", "bm25": "BM25 (first stage)"}
BI = {"twin", "colbert", "bi", "dense"}


def expand(patterns: list[str]) -> list[Path]:
    """Run folders from paths or glob patterns, sorted, duplicates dropped."""
    out: dict[Path, None] = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        if not matches:
            raise SsftError(f"no run folder matches '{pattern}'")
        for m in matches:
            if Path(m).is_dir():
                out[Path(m)] = None
            elif not any(c in pattern for c in "*?["):
                raise SsftError(f"{m}: no such run folder")
    return list(out)


def architecture_of(run: Path) -> str:
    import yaml

    recipe = yaml.safe_load((run / "recipe.yaml").read_text(encoding="utf-8")) or {}
    return (recipe.get("model") or {}).get("architecture", "cross")


def finished(runs: list[Path], family: str) -> tuple[list[Path], list[Path]]:
    """(finished runs, unfinished ones); a finished run of the wrong family is an error."""
    done, pending = [], []
    for run in runs:
        if not (run / "recipe.yaml").is_file():
            raise SsftError(f"{run}: not a run folder (recipe.yaml missing)")
        if not (run / "metrics.json").is_file():
            pending.append(run)
            continue
        arch = architecture_of(run)
        if (arch in BI) != (family == "bi"):
            raise SsftError(f"{run}: model.architecture '{arch}' is not a {family}-encoder (given under --{family}-runs)")
        done.append(run)
    return done, pending


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bi-runs", nargs="*", default=[], help="bi-encoder run folders or glob patterns")
    parser.add_argument("--cross-runs", nargs="*", default=[], help="cross-encoder run folders or glob patterns")
    parser.add_argument("--metric", default="nDCG@10", help="one metric for every panel (P@20 needs >= 20 candidates per run)")
    parser.add_argument("--rule", choices=["senses", "confidence"], default="senses")
    parser.add_argument("--group", choices=["architecture", "encoder"], default="architecture")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples for the error bars")
    parser.add_argument("--figure", type=Path, default=ROOT / "benchmarks" / "figures" / "fig3_ambiguity_ratio.png")
    parser.add_argument("--extra-bi-metric", default="P@20",
                        help="also a bi-encoder-only table and figure on this metric (001's P@20; '' for none)")
    add_notes_option(parser)
    parser.add_argument("--no-report", action="store_true", help="do not write the BENCHMARKS.md section")
    ns = parser.parse_args(argv)

    from ssft.analysis.ambiguity import (
        AmbiguityRule,
        classify_queries,
        first_stage_contexts,
        format_counts,
        labels_of,
        write_labels,
    )
    from ssft.data.beir import load_dataset

    bi_done, bi_pending = finished(expand(ns.bi_runs), "bi")
    cross_done, cross_pending = finished(expand(ns.cross_runs), "cross")
    if not bi_done and not cross_done:
        raise SsftError("no finished run among the folders given (need metrics.json)")

    dataset = load_dataset("nfcorpus")
    queries = {q: dataset.queries[q] for q in dataset.qrels(SPLIT)}
    rule = AmbiguityRule(method=ns.rule)
    contexts = first_stage_contexts(dataset, queries, k=10) if ns.rule == "confidence" else None
    results = classify_queries(queries, rule, contexts)
    labels = labels_of(results)
    write_labels(results, ns.figure.with_name(f"ambiguity_labels.{ns.rule}.tsv"))
    counts = format_counts(results, rule)
    print(counts)

    markdown, figure = ratio_figure(cross_done + bi_done, labels, ns.metric, ns, ns.figure)
    extra = None
    if ns.extra_bi_metric and bi_done:  # 001's P@20, meaningful where the runs ranked >= 20 candidates
        extra = (ns.extra_bi_metric, *ratio_figure(bi_done, labels, ns.extra_bi_metric, ns,
                                                  ns.figure.with_name(f"{ns.figure.stem}.bi_"
                                                                      f"{ns.extra_bi_metric.replace('@', '')}.png")))
    if not ns.no_report:
        write_report(ns, counts, markdown, bi_done, bi_pending, cross_done, cross_pending, figure, extra)
    return 0


def ratio_figure(runs: list[Path], labels: dict[str, str], metric: str, ns, path: Path) -> tuple[str, Path]:
    """Split every run (cross-encoders first, as 001 draws them) and each panel's BM25 ranking on ``metric``;
    the markdown table (with bootstrap intervals and run counts) and the figure."""
    from ssft.analysis.figures import plot_ambiguity_ratios
    from ssft.analysis.split import bootstrap_ratio_interval, format_ratio_table, ratio_table, split_run

    rows, first_stage_rows, seen_panels = [], [], set()
    for run in runs:
        row = split_run(run, labels, metric)
        rows.append(row)
        panel = row.panel(ns.group)
        if panel not in seen_panels:  # the first stage is one ranking per panel: take it once
            seen_panels.add(panel)
            first_stage_rows.append(split_run(run, labels, metric, first_stage="bm25"))
    order = {name: i for i, name in enumerate(["bm25", *NAMES])}  # BM25 first, then the methods in NAMES order
    rows.sort(key=lambda r: order.get(r.method, len(order)))
    table = ratio_table(first_stage_rows + rows, NAMES, by=ns.group)
    n_runs: dict[str, dict[str, int]] = {}
    for row in rows:
        name = NAMES.get(row.method, row.method)
        n_runs.setdefault(row.panel(ns.group), {}).setdefault(name, 0)
        n_runs[row.panel(ns.group)][name] += 1
    for row in first_stage_rows:
        n_runs.setdefault(row.panel(ns.group), {})[NAMES["bm25"]] = 1
    intervals = {panel: {m: bootstrap_ratio_interval(s, ns.resamples) for m, s in methods.items()}
                 for panel, methods in table.items()}
    excluding_one = sum(1 for spans in intervals.values() for low, high in spans.values() if not low <= 1.0 <= high)
    total = sum(len(spans) for spans in intervals.values())
    markdown = (format_ratio_table(table, intervals, n_runs)
                + f"{excluding_one} of {total} rows have a 95% interval that excludes 1.\n")
    print(markdown)
    figure = plot_ambiguity_ratios(table, path, metric, intervals=intervals, references=[NAMES["bm25"]],
                                   title=f"NFCorpus {SPLIT}, one-word queries ({ns.rule} rule): "
                                         f"{metric} ambiguous / non-ambiguous"
                                         + ("" if metric == "P@20" else " (001 Fig. 3: P@20)"))
    print("figure:", figure)
    return markdown, figure


def _depths(runs: list[Path]) -> str:
    import yaml

    seen = set()
    for run in runs:
        recipe = yaml.safe_load((run / "recipe.yaml").read_text(encoding="utf-8")) or {}
        ev, data = recipe.get("eval") or {}, recipe.get("data") or {}
        seen.add(f"BM25 top-{ev.get('depth', '?')} of split '{data.get('test_split', 'test')}'")
    return ", ".join(sorted(seen)) or "—"


def _shown(path: Path) -> Path:
    try:
        return path.resolve().relative_to(ROOT)
    except ValueError:
        return path


def write_report(ns, counts, markdown, bi_done, bi_pending, cross_done, cross_pending, figure: Path, extra) -> None:
    figure_name = _shown(figure)
    lines = ["## Query ambiguity: 001 Fig. 3 on NFCorpus short queries", "",
             f"`python benchmarks/ambiguity_fig3.py --bi-runs {' '.join(ns.bi_runs)} --cross-runs {' '.join(ns.cross_runs)} "
             f"--metric {ns.metric} --rule {ns.rule} --group {ns.group}` → `{figure_name}`", "",
             "Queries: NFCorpus `test_short` (192 test queries of 1–3 words), classified by `ssft.analysis.ambiguity` "
             "(Open English WordNet 2024, offline); only the one-word queries are labelled, as in 001 §5.1:", "",
             "```", counts, "```", "",
             f"Runs: {len(bi_done)} bi-encoder ({_depths(bi_done)}), {len(cross_done)} cross-encoder ({_depths(cross_done)}); "
             f"not finished and left out: {len(bi_pending)} bi-encoder, {len(cross_pending)} cross-encoder. Runs tested on all "
             "323 test queries are restricted to the labelled test_short queries, so every row averages over the same "
             f"queries. {ns.metric} for every panel: P@20 (001's metric) is not meaningful for runs that rerank only 10 "
             "candidates. Rows of one method pool its runs (seeds: the `runs` column); each panel's BM25 row is the "
             "ranking its runs reranked. Interval: 95% percentile bootstrap over the queries of each class "
             f"({ns.resamples} resamples).", "", markdown.rstrip()]
    if extra is not None:
        metric, extra_markdown, extra_figure = extra
        lines += ["", f"Bi-encoders alone on {metric} (001's metric; these runs rank {_depths(bi_done)}) "
                      f"→ `{_shown(extra_figure)}`:",
                  "", extra_markdown.rstrip()]
    write_section("ambiguity_fig3", with_notes("\n".join(lines), ns.notes))


if __name__ == "__main__":
    sys.exit(cli_entry("ambiguity_fig3")(main)())
