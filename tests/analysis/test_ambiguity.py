"""Query ambiguity (001 §5.1) with pywsd over Open English WordNet 2024, offline; the per-class split and Fig. 3/4 plots."""
import json
import math
import os
import struct

import pytest

from ssft.analysis import ambiguity, wordnet
from ssft.analysis.ambiguity import AMBIGUOUS, EXCLUDED, NON_AMBIGUOUS, AmbiguityRule, classify_queries
from ssft.analysis.figures import ValidationCurve, plot_ambiguity_ratios, plot_validation_curves, validation_curve
from ssft.analysis.split import (
    ClassSplit,
    bootstrap_ratio_interval,
    class_split,
    ratio_table,
    read_per_query,
    split_run,
    split_runs,
)
from ssft.cli import ambiguity as ambiguity_cli
from ssft.core.errors import SsftError
from tests.conftest import SHARED_DATA


@pytest.fixture
def lexicon(wordnet_dir, monkeypatch):
    home = os.environ.get("SSFT_DATA_HOME") or str(SHARED_DATA)
    monkeypatch.setenv("SSFT_DATA_HOME", home)
    monkeypatch.setenv("WN_DATA_DIR", wordnet_dir)
    return wordnet.setup()


# sense counts of Open English WordNet 2024 (all parts of speech / nouns / verbs), as wn reports them
KNOWN_SENSES = {"bank": (18, 10, 8), "apple": (2, 2, 0), "deafness": (1, 1, 0), "milk": (7, 4, 3), "coffee": (4, 4, 0),
                "dha": (0, 0, 0), "domoic acid": (1, 1, 0)}


@pytest.mark.integration
def test_sense_counts_of_a_fixed_word_list(lexicon):
    for word, (total, nouns, verbs) in KNOWN_SENSES.items():
        assert ambiguity.sense_count(lexicon, word) == total, word
        assert ambiguity.sense_count(lexicon, word, "n") == nouns, word
        assert ambiguity.sense_count(lexicon, word, "v") == verbs, word
    assert [ambiguity.lemma_of(w) for w in ("beans", "Grapes", "running")] == ["bean", "grape", "run"]


@pytest.mark.integration
def test_001_rule_one_word_queries_lemmatised(lexicon):
    queries = {"q1": "bank", "q2": "deafness", "q3": "Beans", "q4": "DHA", "q5": "domoic acid", "q6": "apple?", "q7": "milk"}
    got = classify_queries(queries)
    assert {q: r.label for q, r in got.items()} == {"q1": AMBIGUOUS, "q2": NON_AMBIGUOUS, "q3": AMBIGUOUS, "q4": NON_AMBIGUOUS,
                                                    "q5": EXCLUDED, "q6": AMBIGUOUS, "q7": AMBIGUOUS}
    assert (got["q3"].lemma, got["q3"].senses) == ("bean", 5)
    assert (got["q4"].senses, got["q5"].words) == (0, 2)
    assert ambiguity.label_counts(got) == {AMBIGUOUS: 4, NON_AMBIGUOUS: 2, EXCLUDED: 1}
    # configurable: phrases up to 3 words, unknown words excluded, a higher sense threshold, nouns only
    got = classify_queries(queries, AmbiguityRule(max_words=3, unknown=EXCLUDED, min_senses=5, pos="n"))
    assert {q: r.label for q, r in got.items()} == {"q1": AMBIGUOUS, "q2": NON_AMBIGUOUS, "q3": NON_AMBIGUOUS, "q4": EXCLUDED,
                                                    "q5": NON_AMBIGUOUS, "q6": NON_AMBIGUOUS, "q7": NON_AMBIGUOUS}
    assert got["q5"].lemma == "domoic acid" and got["q7"].senses == 4


@pytest.mark.integration
def test_confidence_rule(lexicon):
    assert ambiguity.sense_confidence("deafness", "anything") == 1.0  # one sense
    assert ambiguity.sense_confidence("cauliflower", "zzz") == pytest.approx(0.5)  # two senses, no evidence: 1/2
    money = ambiguity.sense_confidence("bank", "I deposited money and took out a loan at the bank")
    assert 1 / 18 < money < 1
    got = classify_queries({"a": "deafness", "b": "cauliflower", "c": "DHA"}, AmbiguityRule(method="confidence"),
                           contexts={"b": "zzz"})
    assert [got[q].label for q in "abc"] == [NON_AMBIGUOUS, AMBIGUOUS, NON_AMBIGUOUS]
    assert got["a"].confidence == 1.0 and got["c"].confidence is None


@pytest.mark.integration
def test_cli_counts_and_labels_file(lexicon, tiny_dataset, tmp_path, capsys):
    out = tmp_path / "labels.tsv"
    assert ambiguity_cli.main(["--data", str(tiny_dataset), "--split", "test", "--max-words", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "all 2 queries: ambiguous 2, non-ambiguous 0, excluded 0" in printed  # "sleep memory", "coffee liver"
    assert ambiguity.read_labels(out) == {"q6": AMBIGUOUS, "q5": AMBIGUOUS}
    assert ambiguity_cli.main(["--data", str(tiny_dataset), "--split", "nope"]) == 2
    assert "no split 'nope'" in capsys.readouterr().err


def test_missing_wordnet_and_nltk_data_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(wordnet, "_loaded", None)
    monkeypatch.setenv("SSFT_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("SSFT_WORDNET_XML", raising=False)
    with pytest.raises(SsftError, match="oewn:2024.*SSFT_WORDNET_XML"):
        wordnet.load_wordnet(tmp_path / "wn")
    assert not (tmp_path / "wn").exists()  # nothing half-built left behind
    monkeypatch.setenv("SSFT_WORDNET_XML", str(tmp_path / "nope.xml.gz"))
    with pytest.raises(SsftError, match="nope.xml.gz: no such file"):
        wordnet.load_wordnet(tmp_path / "wn")
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(SsftError, match="NLTK data missing: averaged_perceptron_tagger_eng, wordnet, punkt_tab.*NLTK_DATA"):
        wordnet.ensure_nltk_data()


def test_rule_checks():
    for bad in (AmbiguityRule(method="x"), AmbiguityRule(max_words=0), AmbiguityRule(min_senses=1), AmbiguityRule(pos="q"),
                AmbiguityRule(confidence_threshold=1.0), AmbiguityRule(unknown="maybe")):
        with pytest.raises(SsftError, match="ambiguity rule"):
            bad.check()
    assert ambiguity.query_words("  Alzheimer's?  (disease) ") == ["Alzheimer's", "disease"]


def test_labels_file_round_trip(tmp_path):
    results = {"q1": ambiguity.QueryAmbiguity("q1", "bank\tx", 1, "bank", 18, None, AMBIGUOUS),
               "q2": ambiguity.QueryAmbiguity("q2", "deafness", 1, "deafness", 1, 1.0, NON_AMBIGUOUS)}
    ambiguity.write_labels(results, tmp_path / "labels.tsv")
    assert ambiguity.read_labels(tmp_path / "labels.tsv") == {"q1": AMBIGUOUS, "q2": NON_AMBIGUOUS}
    (tmp_path / "bad.tsv").write_text("query_id\tlabel\nq1\tsure\n")
    with pytest.raises(SsftError, match="bad.tsv:2: unknown label 'sure'"):
        ambiguity.read_labels(tmp_path / "bad.tsv")


# ------------------------------------------------------------------ split / ratio arithmetic

def write_run(folder, architecture, adapter, per_query, split="test_short"):
    import yaml

    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(yaml.safe_dump({"model": {"architecture": architecture}, "adapter": adapter,
                                                        "data": {"test_split": split}}))
    lines = ["query_id\tmetric\tvalue"] + [f"{q}\t{m}\t{v:.6f}" for q, vals in per_query.items() for m, v in vals.items()]
    (folder / f"per_query.{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


LABELS = {"a1": AMBIGUOUS, "a2": AMBIGUOUS, "n1": NON_AMBIGUOUS, "n2": NON_AMBIGUOUS, "n3": NON_AMBIGUOUS, "x": EXCLUDED}


def test_class_split_by_hand():
    per_query = {"a1": {"P@20": 0.1}, "a2": {"P@20": 0.3}, "n1": {"P@20": 0.4}, "n2": {"P@20": 0.2}, "n3": {"P@20": 0.0},
                 "x": {"P@20": 1.0}, "unlabelled": {"P@20": 1.0}}
    s = class_split(per_query, LABELS)
    assert (s.ambiguous, s.non_ambiguous, s.n_ambiguous, s.n_non_ambiguous) == (pytest.approx(0.2), pytest.approx(0.2), 2, 3)
    assert s.ratio == pytest.approx(1.0)
    assert math.isnan(ClassSplit("P@20", 0.1, 0.0, 1, 1).ratio)
    with pytest.raises(SsftError, match="no ambiguous query"):
        class_split({"n1": {"P@20": 0.1}}, LABELS)
    with pytest.raises(SsftError, match="no P@20 for query a1"):
        class_split({"a1": {"nDCG@10": 0.1}, "n1": {"P@20": 0.1}}, LABELS)


def test_split_runs_and_ratio_table(tmp_path):
    def values(a, n):
        return {"a1": {"P@20": a}, "a2": {"P@20": a}, "n1": {"P@20": n}, "n2": {"P@20": n}, "n3": {"P@20": n}}

    runs = [write_run(tmp_path / "c1", "cross", {"method": "lora"}, values(0.2, 0.4)),
            write_run(tmp_path / "c2", "cross", {"method": "lora"}, values(0.4, 0.4)),  # second seed
            write_run(tmp_path / "t1", "twin", {"method": "hidden_prefix"}, values(0.3, 0.2)),
            write_run(tmp_path / "t2", "twin", {"method": "hybrid", "first": {"method": "hidden_prefix"},
                                                 "second": {"method": "lora"}, "mode": "concurrent"}, values(0.1, 0.2))]
    rows = split_runs(runs, LABELS)
    assert [r.encoder for r in rows] == ["cross-encoder", "cross-encoder", "bi-encoder", "bi-encoder"]
    table = ratio_table(rows, {"lora": "LoRA"})
    assert set(table) == {"cross-encoder", "bi-encoder"}
    assert table["cross-encoder"]["LoRA"].ratio == pytest.approx(0.3 / 0.4)  # class means averaged over seeds first
    assert table["bi-encoder"]["hidden_prefix"].ratio == pytest.approx(1.5)
    assert table["bi-encoder"]["hidden_prefix -> lora (concurrent)"].ratio == pytest.approx(0.5)
    with pytest.raises(SsftError, match="per_query.test.tsv: no such per-query file"):
        split_run(runs[0], LABELS, split="test")
    (tmp_path / "bad.tsv").write_text("query_id\tmetric\tvalue\na1\tP@20\tlots\n")
    with pytest.raises(SsftError, match="bad.tsv:2: value 'lots' is not a number"):
        read_per_query(tmp_path / "bad.tsv")


def test_ratio_table_by_architecture_keeps_twin_and_colbert_apart_and_first_stage(tmp_path):
    def values(a, n):
        return {"a1": {"nDCG@10": a}, "a2": {"nDCG@10": a}, "n1": {"nDCG@10": n}, "n2": {"nDCG@10": n},
                "n3": {"nDCG@10": n}}

    twin = write_run(tmp_path / "t", "twin", {"method": "lora"}, values(0.2, 0.4), split="test")
    colbert = write_run(tmp_path / "c", "colbert", {"method": "lora"}, values(0.4, 0.4), split="test")
    bm25 = values(0.3, 0.1)
    lines = ["query_id\tmetric\tvalue"] + [f"{q}\t{m}\t{v}" for q, vals in bm25.items() for m, v in vals.items()]
    (twin / "per_query.bm25.test.tsv").write_text("\n".join(lines) + "\n")
    rows = split_runs([twin, colbert], LABELS, "nDCG@10")
    pooled = ratio_table(rows)  # one bi-encoder panel: the two architectures pooled like seeds
    assert pooled["bi-encoder"]["lora"].ratio == pytest.approx(0.3 / 0.4)
    apart = ratio_table(rows, by="architecture")
    assert apart["bi-encoder (TwinBERT)"]["lora"].ratio == pytest.approx(0.5)
    assert apart["bi-encoder (ColBERT)"]["lora"].ratio == pytest.approx(1.0)
    first = split_run(twin, LABELS, "nDCG@10", first_stage="bm25")
    assert (first.method, first.split.ratio) == ("bm25", pytest.approx(3.0))
    with pytest.raises(SsftError, match="per_query.bm25.test.tsv: no such per-query file"):
        split_run(colbert, LABELS, "nDCG@10", first_stage="bm25")
    with pytest.raises(SsftError, match="group runs by one of encoder, architecture"):
        ratio_table(rows, by="seed")


def test_bootstrap_interval_of_the_ratio():
    per_query = {"a1": {"m": 0.2}, "a2": {"m": 0.6}, "a3": {"m": 0.4}, "n1": {"m": 0.4}, "n2": {"m": 0.4}, "n3": {"m": 0.4}}
    labels = {"a1": AMBIGUOUS, "a2": AMBIGUOUS, "a3": AMBIGUOUS, "n1": NON_AMBIGUOUS, "n2": NON_AMBIGUOUS, "n3": NON_AMBIGUOUS}
    s = class_split(per_query, labels, "m")
    low, high = bootstrap_ratio_interval(s, resamples=4000, seed=1)
    assert s.ratio == pytest.approx(1.0)
    # ambiguous resampled means lie in [0.2, 0.6] over a constant 0.4: ratios in [0.5, 1.5], interval around 1
    assert 0.5 <= low < 1.0 < high <= 1.5
    assert bootstrap_ratio_interval(s, resamples=4000, seed=1) == (low, high)  # seeded
    constant = class_split({q: {"m": 0.3} for q in labels}, labels, "m")
    assert bootstrap_ratio_interval(constant) == (pytest.approx(1.0), pytest.approx(1.0))
    with pytest.raises(SsftError, match="no per-query values"):
        bootstrap_ratio_interval(ClassSplit("m", 0.1, 0.2, 1, 1))


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_ratio_plot_writes_png(tmp_path):
    path = plot_ambiguity_ratios({"cross-encoder": {"Full FT": 0.9, "LoRA": ClassSplit("P@20", 0.1, 0.2, 1, 1)},
                                  "bi-encoder": {"Prefix": 1.2, "LoRA": math.nan}}, tmp_path / "fig3" / "ratio.png")
    width, height = png_size(path)
    assert width > height > 100
    with pytest.raises(SsftError, match="no ratios"):
        plot_ambiguity_ratios({"cross-encoder": {}}, tmp_path / "x.png")
    with_bars = plot_ambiguity_ratios({"bi-encoder": {"BM25": 1.1, "LoRA": 0.9}}, tmp_path / "bars.png",
                                      intervals={"bi-encoder": {"BM25": (0.8, 1.4), "LoRA": (0.6, 1.2)}}, references=["BM25"])
    assert png_size(with_bars)[0] > 100


def test_validation_curve_of_sequential_hybrid_and_plot(tmp_path):
    import yaml

    run = tmp_path / "seq"
    run.mkdir()
    (run / "recipe.yaml").write_text(yaml.safe_dump({"adapter": {"method": "hybrid", "first": {"method": "hidden_prefix"},
                                                                  "second": {"method": "lora"}, "mode": "sequential"}}))
    def hist(vals):
        return [{"epoch": float(i + 1), "step": i, "eval_nDCG@10": v} for i, v in enumerate(vals)]

    (run / "run_info.json").write_text(json.dumps({
        "best_validation": {"metric": "nDCG@10", "value": 0.5, "epoch": 1},
        "validation_history": hist([0.5]),
        "hybrid_phases": [{"phase": "first", "epochs": 3, "validation_history": hist([0.1, 0.3, 0.2])},
                          {"phase": "second", "epochs": 2, "validation_history": hist([0.4, 0.5])}]}))
    curve = validation_curve(run)
    assert curve.label == "hidden_prefix -> lora"
    assert curve.points == [(1.0, 0.1), (2.0, 0.3), (3.0, 0.2), (4.0, 0.4), (5.0, 0.5)]
    assert curve.boundaries == [3.0]
    plain = ValidationCurve("lora", "nDCG@10", [(1.0, 0.2), (2.0, 0.25)])
    width, _ = png_size(plot_validation_curves([curve, plain], tmp_path / "fig4.png"))
    assert width > 100
    with pytest.raises(SsftError, match="different metrics"):
        plot_validation_curves([curve, ValidationCurve("x", "P@20", [(1.0, 0.1)])], tmp_path / "bad.png")
    with pytest.raises(SsftError, match="run_info.json missing"):
        validation_curve(tmp_path)
