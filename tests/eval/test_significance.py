import math

import pytest
from scipy import stats

from ssft.core.errors import SsftError
from ssft.eval.metrics import write_per_query
from ssft.eval.significance import paired_ttest, paired_ttest_files, read_per_query, seed_ttest, significance_mark
from ssft.eval.tables import MethodScores, build_table, collect_runs, format_parameters, render_csv, render_markdown


def test_seed_ttest_matches_hand_computation():
    # pooled variance s^2 = 1, t = 3 / sqrt(2/3) = 3*sqrt(1.5), df = 4; the t(4) tail has the closed form
    # P(T > t) = 1/2 - (3/4) x (1 - x^2/3) with x = t / sqrt(t^2 + 4); here x^2 = 27/35
    res = seed_ttest([4.0, 5.0, 6.0], [1.0, 2.0, 3.0])
    assert res.statistic == pytest.approx(3 * math.sqrt(1.5), rel=1e-12)
    assert res.df == 4
    x = math.sqrt(27 / 35)
    assert res.pvalue == pytest.approx(0.5 - 0.75 * x * (1 - x * x / 3), rel=1e-9)
    assert res.pvalue == pytest.approx(0.010656, abs=1e-6)
    assert res.mark == "*"


def test_seed_ttest_matches_scipy_one_tailed_equal_variance():
    method, base = [0.3107, 0.3090, 0.3125], [0.3059, 0.3040, 0.3071]
    expected = stats.ttest_ind(method, base, equal_var=True, alternative="greater")
    res = seed_ttest(method, base)
    assert res.statistic == pytest.approx(float(expected.statistic), rel=1e-12)
    assert res.pvalue == pytest.approx(float(expected.pvalue), rel=1e-12)
    # one-tailed: a worse method gets p > 0.5, and the two-sided p is twice the smaller tail
    assert seed_ttest(base, method).pvalue == pytest.approx(1 - res.pvalue)
    assert seed_ttest(method, base, "two-sided").pvalue == pytest.approx(2 * res.pvalue)
    # Welch's test (unequal variances) differs on unequal spreads: we really use the pooled one
    wide = [0.20, 0.30, 0.40, 0.35]
    welch = stats.ttest_ind(wide, base, equal_var=False, alternative="greater").pvalue
    assert seed_ttest(wide, base).pvalue != pytest.approx(float(welch))


def test_seed_ttest_rejects_single_seed_and_bad_alternative():
    with pytest.raises(SsftError, match="2 seeds"):
        seed_ttest([0.3], [0.2, 0.3])
    with pytest.raises(SsftError, match="alternative"):
        seed_ttest([0.3, 0.4], [0.2, 0.3], alternative="bigger")


def test_paired_ttest_hand_and_scipy():
    # differences 1, 2, 3: mean 2, sd 1, t = 2*sqrt(3), df 2; t(2) tail: 1/2 - t / (2 sqrt(t^2 + 2))
    a = {"q1": 2.0, "q2": 4.0, "q3": 6.0}
    b = {"q1": 1.0, "q2": 2.0, "q3": 3.0}
    res = paired_ttest(a, b)
    t = 2 * math.sqrt(3)
    assert res.statistic == pytest.approx(t)
    assert res.pvalue == pytest.approx(0.5 - t / (2 * math.sqrt(t * t + 2)), rel=1e-9)
    a2 = {"q1": 0.5, "q2": 0.7, "q3": 0.2, "q4": 0.9, "q5": 0.4}
    b2 = {"q3": 0.1, "q1": 0.45, "q2": 0.75, "q5": 0.2, "q4": 0.6}  # different order: aligned by query id
    expected = stats.ttest_rel([0.5, 0.7, 0.2, 0.9, 0.4], [0.45, 0.75, 0.1, 0.6, 0.2], alternative="greater")
    assert paired_ttest(a2, b2).pvalue == pytest.approx(float(expected.pvalue), rel=1e-12)


def test_paired_ttest_missing_queries_error_or_intersect():
    a = {"q1": 0.5, "q2": 0.7, "q3": 0.2, "q9": 1.0}
    b = {"q1": 0.4, "q2": 0.6, "q3": 0.3}
    with pytest.raises(SsftError, match="different queries.*q9"):
        paired_ttest(a, b)
    res = paired_ttest(a, b, missing="intersect")
    assert res.dropped == 1 and res.n == (3, 3)
    assert res.pvalue == pytest.approx(float(stats.ttest_rel([0.5, 0.7, 0.2], [0.4, 0.6, 0.3], alternative="greater").pvalue))


def test_per_query_files_round_trip(tmp_path):
    write_per_query({"q1": {"nDCG@10": 0.5, "P@20": 0.1}, "q2": {"nDCG@10": 0.7, "P@20": 0.2},
                     "q3": {"nDCG@10": 0.2, "P@20": 0.0}}, tmp_path / "a.tsv")
    write_per_query({"q1": {"nDCG@10": 0.4, "P@20": 0.1}, "q2": {"nDCG@10": 0.6, "P@20": 0.1},
                     "q3": {"nDCG@10": 0.3, "P@20": 0.0}}, tmp_path / "b.tsv")
    assert read_per_query(tmp_path / "a.tsv", "nDCG@10") == {"q1": 0.5, "q2": 0.7, "q3": 0.2}
    res = paired_ttest_files(tmp_path / "a.tsv", tmp_path / "b.tsv", "nDCG@10")
    assert res.pvalue == pytest.approx(float(stats.ttest_rel([0.5, 0.7, 0.2], [0.4, 0.6, 0.3], alternative="greater").pvalue))
    with pytest.raises(SsftError, match="no values for metric 'RR@10'.*P@20"):
        read_per_query(tmp_path / "a.tsv", "RR@10")


def test_marks():
    assert [significance_mark(p) for p in (0.001, 0.01, 0.0100001, 0.05, 0.051, float("nan"), None)] == \
        ["**", "**", "*", "*", "", "", ""]
    assert [format_parameters(n) for n in (109_482_240, 589_824, 92_160, 8_192, None)] == ["109M", "0.6M", "92K", "8K", "-"]


FIXTURE = [
    MethodScores("Full FT", {"nDCG@10": [0.30, 0.31, 0.32], "P@20": [0.20, 0.22, 0.24]}, 109_482_240),
    MethodScores("LoRA", {"nDCG@10": [0.40, 0.41, 0.42], "P@20": [0.19, 0.20, 0.21]}, 589_824),
    MethodScores("Prompt-tuning", {"nDCG@10": [0.33, 0.34, 0.35], "P@20": [0.20, 0.21, 0.22]}, 8_192),
]


def test_markdown_table_exact():
    table = build_table(FIXTURE, ["nDCG@10", "P@20"])
    # LoRA: t = 0.10 / (0.01 sqrt(2/3)) = 12.2, p << 0.01; Prompt: t = 3.67, p = 0.0107 (the hand-checked case);
    # improvement: (0.41 - 0.31) / 0.31 = 32.26 %; no method beats the baseline on P@20
    assert render_markdown(table) == (
        "| Fine-tuning method | # of trainable parameters | nDCG@10 | P@20 |\n"
        "|---|---:|---:|---:|\n"
        "| Full FT | 109M | 0.3100 | 0.2200 |\n"
        "| LoRA | 0.6M | 0.4100** | 0.2000 |\n"
        "| Prompt-tuning | 8K | 0.3400* | 0.2100 |\n"
        "| Improvement (%) | - | 32.26% | - |\n"
        "\n"
        "\\* p <= 0.05, \\*\\* p <= 0.01 (one-tailed t-test over seeds, equal variances, against Full FT); means over seeds.\n"
    )


def test_csv_table():
    import csv
    import io

    rows = list(csv.reader(io.StringIO(render_csv(build_table(FIXTURE, ["nDCG@10", "P@20"])))))
    assert rows[0] == ["method", "trainable_parameters", "nDCG@10", "nDCG@10_pvalue", "nDCG@10_mark", "P@20", "P@20_pvalue",
                       "P@20_mark"]
    assert rows[1] == ["Full FT", "109482240", "0.3100", "", "", "0.2200", "", ""]
    p = stats.ttest_ind([0.33, 0.34, 0.35], [0.30, 0.31, 0.32], equal_var=True, alternative="greater").pvalue
    assert rows[3][:5] == ["Prompt-tuning", "8192", "0.3400", f"{p:.4g}", "*"]
    assert rows[4] == ["Improvement (%)", "", "32.26", "", "", "", "", ""]


def test_table_errors():
    with pytest.raises(SsftError, match="baseline 'full'"):
        build_table(FIXTURE, ["nDCG@10"], baseline="full")
    with pytest.raises(SsftError, match="no values for RR@10"):
        build_table(FIXTURE, ["RR@10"])


def test_collect_runs(tmp_path):
    import json

    import yaml

    forward = {"method": "hybrid", "first": {"method": "hidden_prefix"}, "second": {"method": "lora"}}
    backward = {"method": "hybrid", "first": {"method": "lora"}, "second": {"method": "hidden_prefix"}}
    runs = [({"method": "full"}, 0.3), ({"method": "full"}, 0.32), ({"method": "lora"}, 0.4), ({"method": "lora"}, 0.42),
            (forward, 0.5), (backward, 0.6), ({**backward, "mode": "concurrent"}, 0.7)]
    for i, (adapter, value) in enumerate(runs):
        run = tmp_path / f"run{i}"
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps({"test": {"nDCG@10": value}, "bm25": {"nDCG@10": 0.1}}))
        (run / "run_info.json").write_text(json.dumps({"trainable_parameters": 100 if adapter["method"] == "lora" else 1000}))
        (run / "recipe.yaml").write_text(yaml.safe_dump({"adapter": adapter, "seed": i}))
    rows = collect_runs(sorted(tmp_path.iterdir()), "test", {"full": "Full FT"})
    assert [(r.method, r.scores["nDCG@10"], r.trainable_parameters) for r in rows] == [
        ("Full FT", [0.3, 0.32], 1000), ("lora", [0.4, 0.42], 100), ("hidden_prefix -> lora", [0.5], 1000),
        ("lora -> hidden_prefix", [0.6], 1000), ("lora -> hidden_prefix (concurrent)", [0.7], 1000)]
    with pytest.raises(SsftError, match="no results for split 'dev'"):
        collect_runs([tmp_path / "run0"], "dev")


def _fold_runs(root, design):
    """Run folders of a K-fold sweep: design = {(method, seed, fold): value}."""
    import json

    import yaml

    for i, ((method, seed, fold), value) in enumerate(sorted(design.items())):
        run = root / f"run{i}"
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps({"test": {"nDCG@10": value}, "bm25": {"nDCG@10": 0.1}}))
        (run / "run_info.json").write_text(json.dumps({"trainable_parameters": 10}))
        (run / "recipe.yaml").write_text(yaml.safe_dump({"adapter": {"method": method}, "seed": seed,
                                                         "data": {"dataset": f"folds/fold{fold}", "fold": str(fold)}}))
    return sorted(root.iterdir())


def test_a_five_fold_three_seed_sweep_is_a_three_versus_three_seed_test(tmp_path):
    """001 §4.1.3: scores are averaged over folds per seed, then 3 values per side are t-tested (not 15)."""
    import random

    from scipy import stats

    rng = random.Random(0)
    design = {(m, s, f): rng.uniform(0.2, 0.3) + (0.03 if m == "lora" else 0.0) + 0.01 * f
              for m in ("full", "lora") for s in (1, 2, 3) for f in range(5)}
    rows = collect_runs(_fold_runs(tmp_path, design), "test", {"full": "Full FT"})
    by = {r.method: r for r in rows}
    fold_means = {m: [sum(design[m, s, f] for f in range(5)) / 5 for s in (1, 2, 3)] for m in ("full", "lora")}
    assert by["Full FT"].scores["nDCG@10"] == pytest.approx(fold_means["full"])
    assert by["lora"].scores["nDCG@10"] == pytest.approx(fold_means["lora"]) and by["lora"].folds == ["0", "1", "2", "3", "4"]
    table = build_table(rows, ["nDCG@10"])
    cell = dict((r.method, c) for r, c in table.rows)["lora"]["nDCG@10"]
    expected = stats.ttest_ind(fold_means["lora"], fold_means["full"], equal_var=True, alternative="greater")
    assert cell.pvalue == pytest.approx(expected.pvalue)
    flat = stats.ttest_ind([design["lora", s, f] for s in (1, 2, 3) for f in range(5)],
                           [design["full", s, f] for s in (1, 2, 3) for f in range(5)], equal_var=True, alternative="greater")
    assert cell.pvalue != pytest.approx(flat.pvalue)  # the 15-vs-15 test the tables used to run
    assert "per seed the mean over 5 folds" in render_markdown(table)


def test_folds_must_match_across_seeds_and_methods(tmp_path):
    design = {(m, s, f): 0.3 for m in ("full", "lora") for s in (1, 2) for f in range(3)}
    del design["lora", 2, 1]
    with pytest.raises(SsftError, match="method 'lora', seed 2: folds 0, 2; other runs have 0, 1, 2"):
        collect_runs(_fold_runs(tmp_path / "a", design) if (tmp_path / "a").mkdir() is None else [], "test")
    design = {("full", 1, 0): 0.3, ("full", 1, 1): 0.3}
    runs = _fold_runs(tmp_path / "b", design) if (tmp_path / "b").mkdir() is None else []
    import shutil

    shutil.copytree(runs[0], tmp_path / "b" / "dup")
    with pytest.raises(SsftError, match="fold 0 appears twice"):
        collect_runs([*runs, tmp_path / "b" / "dup"], "test")


def test_prefix_tables_footnote_how_001_counts_prefix_parameters():
    rows = [MethodScores("Full FT", {"nDCG@10": [0.3, 0.31]}, 110_000_000),
            MethodScores("hidden_prefix", {"nDCG@10": [0.32, 0.33]}, 4_700_000)]
    assert "001's tables count the prefix without its MLPs (0.1M" in render_markdown(build_table(rows, ["nDCG@10"]))
    assert "MLPs" not in render_markdown(build_table(rows[:1] + [MethodScores("lora", {"nDCG@10": [0.3, 0.3]})], ["nDCG@10"]))
