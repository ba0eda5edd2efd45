"""benchmarks/ambiguity_fig3.py on run folders made here: NFCorpus test_short labels (real WordNet), a bi-encoder run
tested on all test queries and a cross-encoder run on test_short, an unfinished run skipped, wrong families refused."""
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import SHARED_DATA
from tests.helpers import load_script as load_script_file

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    return load_script_file(ROOT / "benchmarks" / "ambiguity_fig3.py")


def make_run(folder: Path, architecture: str, method: str, split: str, qids, value_of, finished=True) -> Path:
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(yaml.safe_dump({"model": {"architecture": architecture}, "adapter": {"method": method},
                                                        "data": {"test_split": split}, "eval": {"depth": 10}}))
    for name, fn in ((f"per_query.{split}.tsv", value_of), (f"per_query.bm25.{split}.tsv", lambda q: 0.5)):
        rows = ["query_id\tmetric\tvalue"] + [f"{q}\t{m}\t{fn(q):.6f}" for q in qids for m in ("nDCG@10", "P@20")]
        (folder / name).write_text("\n".join(rows) + "\n")
    if finished:
        (folder / "metrics.json").write_text("{}")
    return folder


@pytest.mark.integration
def test_fig3_script_on_run_folders(tmp_path, monkeypatch, wordnet_dir, capsys):
    monkeypatch.setenv("SSFT_DATA_HOME", os.environ.get("SSFT_DATA_HOME") or str(SHARED_DATA))
    monkeypatch.setenv("WN_DATA_DIR", wordnet_dir)
    from ssft.analysis.ambiguity import AMBIGUOUS, classify_queries, labels_of
    from ssft.data.beir import load_dataset

    dataset = load_dataset("nfcorpus")
    labels = labels_of(classify_queries({q: dataset.queries[q] for q in dataset.qrels("test_short")}))
    test_ids, short_ids = sorted(dataset.qrels("test")), sorted(dataset.qrels("test_short"))
    # bi: 0.2 on ambiguous, 0.4 elsewhere (queries outside test_short too, which must not count) → ratio 0.5
    make_run(tmp_path / "bi" / "twin_lora", "twin", "lora", "test", test_ids,
             lambda q: 0.2 if labels.get(q) == AMBIGUOUS else (0.4 if q in labels else 0.0))
    make_run(tmp_path / "cross" / "full-s1", "cross", "full", "test_short", short_ids, lambda q: 0.3)
    make_run(tmp_path / "cross" / "lora-s1", "cross", "lora", "test_short", short_ids, lambda q: 0.3, finished=False)
    figure = tmp_path / "fig" / "fig3.png"
    script = load_script()
    rc = script.main(["--bi-runs", str(tmp_path / "bi" / "*"), "--cross-runs", str(tmp_path / "cross" / "*"),
                      "--figure", str(figure), "--no-report", "--resamples", "200"])
    out = capsys.readouterr().out
    assert rc == 0 and figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| bi-encoder (TwinBERT) | LoRA | 0.2000 (41) | 0.4000 (62) | 0.500 |" in out
    assert "| cross-encoder (monoBERT) | Full FT | 0.3000 (41) | 0.3000 (62) | 1.000 |" in out
    assert "| cross-encoder (monoBERT) | BM25 (first stage) |" in out
    assert "| cross-encoder (monoBERT) | LoRA |" not in out  # the unfinished run is left out
    assert (figure.parent / "ambiguity_labels.senses.tsv").is_file()
    assert (figure.parent / "fig3.bi_P20.png").is_file()  # the bi-encoder-only P@20 figure
    # a cross-encoder run given as a bi-encoder run is refused, by name
    wrapped = script.cli_entry("ambiguity_fig3")(script.main)
    assert wrapped(["--bi-runs", str(tmp_path / "cross" / "full-s1"), "--no-report", "--figure", str(figure)]) == 2
    assert "is not a bi-encoder" in capsys.readouterr().err
    assert wrapped(["--bi-runs", str(tmp_path / "nothing-*"), "--no-report"]) == 2
    assert "no run folder matches" in capsys.readouterr().err
