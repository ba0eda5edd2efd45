import gzip
import json
import logging

import pytest

from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset, TrainingGroups, build_examples, subsample_queries
from ssft.data.trec import read_run, top_k, write_run


def test_load_beir_folder_with_crlf_qrels(tiny_dataset):
    ds = load_dataset(str(tiny_dataset))
    assert len(ds.corpus) == 6 and len(ds.queries) == 6
    assert ds.qrels("test") == {"q6": {"d5": 2}, "q5": {"d6": 1}}
    assert ds.splits() == ["dev", "test", "train"]
    with pytest.raises(SsftError, match="no split 'valid'"):
        ds.qrels("valid")


def test_dataset_by_name_under_data_home(tiny_dataset, monkeypatch):
    monkeypatch.setenv("SSFT_DATA_HOME", str(tiny_dataset.parent))
    assert load_dataset("tiny").path == tiny_dataset
    with pytest.raises(SsftError, match="dataset 'nope' not found"):
        load_dataset("nope")


def test_gzip_files(tiny_dataset):
    for name in ("corpus.jsonl", "queries.jsonl"):
        src = tiny_dataset / name
        with gzip.open(src.with_name(name + ".gz"), "wb") as fh:
            fh.write(src.read_bytes())
        src.unlink()
    assert len(load_dataset(str(tiny_dataset)).corpus) == 6


def test_duplicate_document_id_names_the_line(tiny_dataset):
    with open(tiny_dataset / "corpus.jsonl", "a") as fh:
        fh.write(json.dumps({"_id": "d2", "title": "", "text": "again"}) + "\n")
    with pytest.raises(SsftError, match=r"corpus.jsonl:7: duplicate document id 'd2'"):
        load_dataset(str(tiny_dataset))


def test_invalid_json_line(tiny_dataset):
    with open(tiny_dataset / "queries.jsonl", "a") as fh:
        fh.write("{not json\n")
    with pytest.raises(SsftError, match=r"queries.jsonl:7: invalid JSON"):
        load_dataset(str(tiny_dataset))


def test_empty_query_text_in_qrels_is_an_error(tiny_dataset):
    lines = (tiny_dataset / "queries.jsonl").read_text().splitlines()
    lines[5] = json.dumps({"_id": "q6", "text": "  "})
    (tiny_dataset / "queries.jsonl").write_text("\n".join(lines) + "\n")
    ds = load_dataset(str(tiny_dataset))
    with pytest.raises(SsftError, match="query 'q6' has empty text"):
        ds.qrels("test")


def test_unknown_ids_in_qrels_are_counted_and_skipped(tiny_dataset, caplog):
    with open(tiny_dataset / "qrels" / "train.tsv", "ab") as fh:
        fh.write(b"q1\tmissing\t1\r\nqx\td1\t1\r\n")
    ds = load_dataset(str(tiny_dataset))
    with caplog.at_level(logging.WARNING):
        qrels = ds.qrels("train")
    assert "missing" not in qrels["q1"] and "qx" not in qrels
    assert any("1 rows with unknown document ids" in w for w in ds.warnings)
    assert any("1 rows with unknown query ids" in w for w in ds.warnings)


def test_malformed_qrels_line(tiny_dataset):
    with open(tiny_dataset / "qrels" / "train.tsv", "ab") as fh:
        fh.write(b"q1 only-two\r\n")
    with pytest.raises(SsftError, match=r"train.tsv:6: expected"):
        load_dataset(str(tiny_dataset)).qrels("train")


def test_trec_run_round_trip(tmp_path):
    run = {"q1": {"a": 2.5, "b": 1.0}, "q2": {"c": -1.0}}
    write_run(run, tmp_path / "r.trec", tag="t")
    assert read_run(tmp_path / "r.trec") == run
    lines = (tmp_path / "r.trec").read_text().splitlines()
    assert lines[0] == "q1 Q0 a 1 2.500000 t"
    assert top_k(run, 1) == {"q1": {"a": 2.5}, "q2": {"c": -1.0}}


def test_bad_run_file(tmp_path):
    (tmp_path / "r.trec").write_text("q1 Q0 a 1 2.0 t\nq1 Q0 b 2\n")
    with pytest.raises(SsftError, match=r"r.trec:2: expected 6 columns"):
        read_run(tmp_path / "r.trec")
    (tmp_path / "s.trec").write_text("q1 Q0 a 1 high t\n")
    with pytest.raises(SsftError, match=r"s.trec:1: score 'high'"):
        read_run(tmp_path / "s.trec")


def test_examples_with_bm25_negatives_exclude_positives(tiny_dataset):
    from ssft.firststage.bm25 import BM25

    ds = load_dataset(str(tiny_dataset))
    qrels = ds.qrels("train")
    run = BM25(ds).search({q: ds.queries[q] for q in qrels}, 6)
    examples = build_examples(qrels, list(ds.corpus), run)
    assert len(examples) == 4
    for ex in examples:
        assert ex.positive not in ex.negatives
    groups = TrainingGroups(examples, ds, num_negatives=3)
    item = groups[0]
    assert len(item["documents"]) == 4 and item["documents"][0] == ds.corpus[examples[0].positive].full_text


def test_subsample_is_deterministic():
    qrels = {f"q{i}": {"d": 1} for i in range(50)}
    a, b = subsample_queries(qrels, 10, 3), subsample_queries(qrels, 10, 3)
    assert list(a) == list(b) and len(a) == 10
    assert subsample_queries(qrels, None, 3) is qrels


def test_pair_dataset_maps_scores_back(tiny_dataset):
    ds = load_dataset(str(tiny_dataset))
    run = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"d6": 1.0}}
    pairs = PairDataset(run, depth=2, dataset=ds)
    assert len(pairs) == 3
    scores = [float(i) for i in range(len(pairs))]
    back = pairs.to_run(scores)
    assert {q: set(d) for q, d in back.items()} == {"q1": {"d1", "d2"}, "q2": {"d6"}}
    for (qid, did), s in zip(pairs.pairs, scores):
        assert back[qid][did] == s


def test_dataset_download_fallback(tiny_dataset, tmp_path, monkeypatch):
    """Online fallback: a BEIR zip is fetched into the cache once; offline it is a clear error."""
    import io
    import zipfile

    from ssft.data import beir

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for p in tiny_dataset.rglob("*"):
            if p.is_file():
                zf.write(p, "tiny/" + str(p.relative_to(tiny_dataset)))
    calls = []

    def fake_urlopen(url, timeout):
        calls.append(url)
        return io.BytesIO(buf.getvalue())

    monkeypatch.setattr("urllib.request.urlopen", fake_urlopen)
    monkeypatch.setenv("SSFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SSFT_DATA_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SsftError, match="dataset 'tinyset' not found.*BEIR download: offline"):
        load_dataset("tinyset")
    assert not calls
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    ds = load_dataset("tinyset")
    assert calls == [beir.BEIR_URL.format(name="tinyset")]
    assert len(ds.corpus) == 6 and ds.qrels("test")
    assert load_dataset("tinyset").path == ds.path and len(calls) == 1  # cached: no second download
    assert not [p for p in (tmp_path / "cache" / "datasets").iterdir() if p.name.startswith(".")]  # no temp left


def test_dataset_download_failure_is_one_line(tmp_path, monkeypatch):
    import urllib.error

    def no_network(url, timeout):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr("urllib.request.urlopen", no_network)
    monkeypatch.setenv("SSFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with pytest.raises(SsftError, match="download of .*nosuch.zip failed: Temporary failure") as info:
        load_dataset("nosuch")
    assert "\n" not in str(info.value)
    assert not list((tmp_path / "cache" / "datasets").iterdir())
