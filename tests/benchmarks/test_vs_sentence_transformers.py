"""benchmarks/vs_sentence_transformers.py --real-data: the token accounting of each library's batches (hand-checked
cases) and the table's ratios, efficiencies and shares of the matmul peak."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import report  # noqa: E402
import vs_sentence_transformers as bench  # noqa: E402

CONFIG = {"hidden_size": 2, "intermediate_size": 4, "num_hidden_layers": 1}


def test_flops_of_a_row_count_projections_feed_forward_and_attention():
    # 3 tokens: 2·3·(4·2² + 2·2·4) projections and feed-forward, 4·3²·2 attention
    assert bench.flops_per_row(3, CONFIG) == 2 * 3 * (16 + 16) + 4 * 9 * 2 == 264
    assert bench.flops_per_row(3, {**CONFIG, "num_hidden_layers": 6}) == 6 * 264


def test_sentence_transformers_batches_by_characters_and_pads_to_the_longest_row():
    assert bench.character_batches([5, 10, 1, 7], 2) == [[1, 3], [0, 2]]
    book = bench.batch_accounting([4, 2, 3, 1], [[0, 1], [2, 3]], CONFIG)
    assert (book["tokens"], book["positions"]) == (10, 2 * 4 + 2 * 3)
    assert abs(book["efficiency"] - 10 / 14) < 1e-12
    flops = lambda n: bench.flops_per_row(n, CONFIG)  # noqa: E731
    assert book["useful_flops"] == flops(4) + flops(2) + flops(3) + flops(1)
    assert book["computed_flops"] == 2 * flops(4) + 2 * flops(3)


def test_the_real_data_table_sets_each_side_against_sentence_transformers_openvino(tmp_path):
    def run(side, value, outputs):
        return {"task": "rerank", "side": side, "cpu_throughput": value, "outputs": outputs, "repeat": 0}

    scores = [0.1, 0.5, 0.3, 0.9]
    results = [{"task": "peak", "side": "torch", "peak_gflops": {"bf16": 200.0, "fp32": 100.0}, "repeat": 0},
               run("ssft", 40.0, scores), run("ssft_ovbf16", 72.0, scores), run("ssft_ovint8", 110.0, scores[::-1]),
               run("st_bf16w", 45.0, scores), run("st_ov", 54.0, scores), run("st_ovint8", 80.0, scores)]
    flops = 4 * 1e9  # 1 GFLOP useful per pair
    accounting = {"items": {"rerank": 4},
                  "rerank": {"st": {"efficiency": 0.727, "useful_flops": flops, "positions": 11, "tokens": 8},
                             "ssft": {"efficiency": 0.981, "useful_flops": flops, "positions": 9, "tokens": 8}}}
    a = SimpleNamespace(dataset="scifact", repeats=1, threads=1, rerank_max_length=512, eval_batch_size=32, encode_docs=0,
                        rerank_depth=50, rerank_queries=10, load=(0.1, 0.2), tasks=["rerank"], title="Real text")
    text = bench.real_data_report(results, accounting, a)
    assert text.startswith("## Real text\n")
    rows = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| rerank |")}
    assert set(rows) == set(bench.REAL_SIDES)
    # 72 / 54 and 110 / 80; ssft batches by exact tokens, 1 GFLOP a pair at 72 pairs/s is 36% of 200 GFLOP/s
    assert "| 72.00 pairs/s | 1.33× | 0.90× | exact tokens | 98.1% | 72.0 | 36% |" in rows["ssft_ovbf16"]
    assert "| 110.00 pairs/s | 2.04× | 1.38× |" in rows["ssft_ovint8"]
    assert "Spearman -1.000 vs ssft" in rows["ssft_ovint8"]
    assert "| characters | 72.7% |" in rows["st_ov"] and "reference" in rows["st_bf16w"]
    assert "rerank: st computes 11 token positions for 8 real tokens" in text


def _real_run(tmp_path: Path) -> Path:
    """A finished --real-data run's files (results.json, data.json, load.json) for --report-from."""
    results = [{"task": "peak", "side": "torch", "peak_gflops": {"bf16": 200.0, "fp32": 100.0}, "repeat": 0}]
    results += [{"task": "rerank", "side": side, "cpu_throughput": 10.0 + i, "outputs": [0.1, 0.2], "repeat": 0,
                 "unit": "pairs/s"} for i, side in enumerate(bench.REAL_SIDES)]
    book = {"efficiency": 0.9, "useful_flops": 1e9, "positions": 10, "tokens": 9}
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "data.json").write_text(json.dumps({"accounting": {"items": {"rerank": 2},
                                                                   "rerank": {"st": book, "ssft": book}}}))
    (tmp_path / "load.json").write_text(json.dumps([0.1, 0.2]))
    return tmp_path / "results.json"


def test_a_run_on_another_cpu_writes_the_section_and_title_it_is_given(tmp_path, monkeypatch):
    results = _real_run(tmp_path)
    benchmarks = tmp_path / "BENCHMARKS.md"
    benchmarks.write_text("# Benchmarks\n\n<!-- begin vs_sentence_transformers_real -->\nkept\n"
                          "<!-- end vs_sentence_transformers_real -->\n")
    monkeypatch.setattr(report, "BENCHMARKS", benchmarks)
    notes = tmp_path / "notes.md"
    notes.write_text("- a reading")
    monkeypatch.setattr(sys, "argv", ["vs", "--real-data", "--tasks", "rerank", "--report-from", str(results),
                                      "--out", str(tmp_path / "out"), "--write", "--section", "real_other_cpu",
                                      "--title", "On another CPU", "--notes", str(notes)])
    assert bench.main() == 0
    text = benchmarks.read_text()
    assert "<!-- begin vs_sentence_transformers_real -->\nkept\n" in text  # the mode's own section untouched
    section = text.split("<!-- begin real_other_cpu -->", 1)[1].split("<!-- end real_other_cpu -->", 1)[0]
    assert "## On another CPU" in section and section.rstrip().endswith("- a reading")


def test_a_notes_file_that_is_not_there_fails_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["vs", "--real-data", "--notes", str(tmp_path / "missing.md")])
    with pytest.raises(SystemExit) as exit_info:
        bench.main()
    assert exit_info.value.code != 0 and "missing.md: no such file" in capsys.readouterr().err
