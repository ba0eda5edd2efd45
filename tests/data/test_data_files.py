"""Data files read right or refused: qrels columns, byte order marks, encodings,
damaged .gz files, grades, run files (duplicates, non-finite scores, documents missing from the corpus), ids a run
file cannot hold. The refusals as the CLIs print them are in tests/bad_inputs/cases_data.py."""
import gzip
import json
import logging
import os
import shutil
import zlib
from pathlib import Path

import pytest

from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset, read_qrels
from ssft.data.trec import read_run, restrict_to_corpus, write_run
from tests.conftest import SHARED_DATA


def _qrels(tmp_path, content: bytes, name: str = "q.tsv"):
    path = tmp_path / name
    path.write_bytes(gzip.compress(content) if name.endswith(".gz") else content)
    return read_qrels(path)


# ---- qrels columns


def test_header_with_a_fourth_column_reads_by_name(tmp_path):
    # numeric ids: read as TREC 'qid iter docid rel' this file gave {'1': {'3': 0, '2': 1}, '2': {'1': 1}}
    got = _qrels(tmp_path, b"query-id\tcorpus-id\tscore\tnote\n1\t184\t3\t0\n1\t29\t2\t1\n2\t12\t1\t1\n")
    assert got == {"1": {"184": 3, "29": 2}, "2": {"12": 1}}


def test_header_names_the_columns_in_any_order(tmp_path):
    got = _qrels(tmp_path, b"corpus-id\tscore\tquery-id\nd1\t2\tq1\nd2\t0\tq1\n")
    assert got == {"q1": {"d1": 2, "d2": 0}}


def test_header_without_a_needed_column_is_refused(tmp_path):
    with pytest.raises(SsftError, match=r"q.tsv:1: the header 'query-id<TAB>doc<TAB>score' names no corpus-id column"):
        _qrels(tmp_path, b"query-id\tdoc\tscore\nq1\td1\t1\n")


def test_rows_wider_than_the_header_are_refused(tmp_path):
    with pytest.raises(SsftError, match=r"q.tsv:3: expected 'query-id<TAB>corpus-id<TAB>score' \(the header, line 1\), got 4"):
        _qrels(tmp_path, b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\t0\td2\t1\n")


def test_consistent_trec_qrels_without_header(tmp_path):
    assert _qrels(tmp_path, b"1 0 184 2\n1 0 29 1\n2 0 12 0\n") == {"1": {"184": 2, "29": 1}, "2": {"12": 0}}
    assert _qrels(tmp_path, b"q1 Q0 d1 1\n") == {"q1": {"d1": 1}}
    assert _qrels(tmp_path, b"q1\t1\td1\t1\nq2\t1\td2\t3\n") == {"q1": {"d1": 1}, "q2": {"d2": 3}}  # iteration 1 throughout


def test_four_columns_without_header_that_are_not_trec_are_refused(tmp_path):
    # BEIR rows with an extra column: the second column is the document, so it changes from row to row
    with pytest.raises(SsftError,
                       match=r"q.tsv:3: 4 columns and no header, and not consistently TREC .*'29' here, '184' on line 2"):
        _qrels(tmp_path, b"\n1\t184\t3\t0\n1\t29\t2\t0\n")
    with pytest.raises(SsftError, match=r"q.tsv:1: 4 columns and no header: TREC 'qid iter docid rel' or"):
        _qrels(tmp_path, b"1\t184\t3\t0\n")  # one row, second column neither 0 nor Q0: no way to tell


def test_three_columns_without_header(tmp_path):
    assert _qrels(tmp_path, b"q1\td1\t1\r\nq1 d2 2\r\n") == {"q1": {"d1": 1, "d2": 2}}


# ---- byte order marks


def test_bom_before_the_first_row_keeps_that_judgement(tmp_path):
    # before: the first row read as query '\ufeffq1', unknown, dropped
    assert _qrels(tmp_path, b"\xef\xbb\xbfq1\td1\t1\nq2\td2\t2\n") == {"q1": {"d1": 1}, "q2": {"d2": 2}}


def test_bom_before_the_header(tmp_path):
    # before: "score 'score' is not a number"
    assert _qrels(tmp_path, b"\xef\xbb\xbfquery-id\tcorpus-id\tscore\r\nq1\td1\t1\r\n") == {"q1": {"d1": 1}}
    assert _qrels(tmp_path, b"\xef\xbb\xbfquery-id\tcorpus-id\tscore\nq1\td1\t1\n", "q.tsv.gz") == {"q1": {"d1": 1}}


def test_bom_in_corpus_queries_and_run(tiny_dataset, tmp_path):
    for name in ("corpus.jsonl", "queries.jsonl"):
        path = tiny_dataset / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    ds = load_dataset(str(tiny_dataset))
    assert "d1" in ds.corpus and ds.corpus["d1"].title == "Vitamin D" and ds.queries["q1"] == "vitamin d bones"
    (tmp_path / "r.trec").write_bytes(b"\xef\xbb\xbfq1 Q0 a 1 2.0 t\r\nq1 Q0 b 2 1.0 t\r\n")
    assert read_run(tmp_path / "r.trec") == {"q1": {"a": 2.0, "b": 1.0}}


# ---- grades


def test_integer_like_grades(tmp_path):
    assert _qrels(tmp_path, b"q1\td1\t1.0\nq1\td2\t-1\nq1\td3\t 2 \n") == {"q1": {"d1": 1, "d2": -1, "d3": 2}}


@pytest.mark.parametrize("grade", ["inf", "-inf", "nan", "1.5", "Infinity"])
def test_grades_that_are_not_integers_are_refused(tmp_path, grade):
    with pytest.raises(SsftError, match=rf"q.tsv:3: score '{grade}' is not an integer relevance grade"):
        _qrels(tmp_path, f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t{grade}\n".encode())


# ---- encodings and damaged .gz files name the line


def test_non_utf8_qrels_names_the_line(tmp_path):
    with pytest.raises(SsftError, match=r"q.tsv:3: not UTF-8 text \(byte 0xe9 at column 7\); save the file as UTF-8$"):
        _qrels(tmp_path, b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tcaf\xe9\t1\n")
    with pytest.raises(SsftError, match=r"q.tsv:1: UTF-16 text"):
        _qrels(tmp_path, "query-id\tcorpus-id\tscore\n".encode("utf-16"))


def test_non_utf8_line_deep_in_a_large_corpus(tiny_dataset):
    # the decoder reads blocks of 8 KiB: the line must still be the damaged one, not the block's first
    docs = "".join(json.dumps({"_id": f"x{i}", "text": "word " * 20}) + "\n" for i in range(2000))
    with open(tiny_dataset / "corpus.jsonl", "ab") as fh:
        fh.write(docs.encode() + b'{"_id": "bad", "text": "\xff"}\n')
    with pytest.raises(SsftError, match=r"corpus.jsonl:2007: not UTF-8 text"):
        load_dataset(str(tiny_dataset))


def test_non_utf8_queries_names_the_line(tiny_dataset):
    with open(tiny_dataset / "queries.jsonl", "ab") as fh:
        fh.write(b'{"_id": "q7", "text": "caf\xe9"}\n')
    with pytest.raises(SsftError, match=r"queries.jsonl:7: not UTF-8 text"):
        load_dataset(str(tiny_dataset))


def _cut(data: bytes, keep: int) -> tuple[bytes, int]:
    gz = gzip.compress(data)[:keep]
    return gz, zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(gz).count(b"\n") + 1


def test_truncated_qrels_gz_names_the_line(tmp_path):
    rows = b"".join(f"q{i % 97}\td{i * 7919 % 10007}\t{i % 3}\n".encode() for i in range(5000))
    data, line = _cut(b"query-id\tcorpus-id\tscore\n" + rows, 2000)
    assert 1 < line < 5000
    (tmp_path / "q.tsv.gz").write_bytes(data)
    with pytest.raises(SsftError, match=rf"q.tsv.gz:{line}: the gzip data ends early \(a truncated file\)"):
        read_qrels(tmp_path / "q.tsv.gz")
    (tmp_path / "r.tsv.gz").write_bytes(b"not gzip at all\n")
    with pytest.raises(SsftError, match=r"r.tsv.gz:1: damaged gzip data"):
        read_qrels(tmp_path / "r.tsv.gz")


def test_truncated_corpus_gz_names_the_line(tiny_dataset):
    docs = "".join(json.dumps({"_id": f"d{i}", "text": f"text {i * 7919 % 10007}"}) + "\n" for i in range(1, 3000))
    data, line = _cut(docs.encode(), 3000)
    (tiny_dataset / "corpus.jsonl").unlink()
    (tiny_dataset / "corpus.jsonl.gz").write_bytes(data)
    with pytest.raises(SsftError, match=rf"corpus.jsonl.gz:{line}: the gzip data ends early"):
        load_dataset(str(tiny_dataset))


# ---- dataset folders and ids


def test_dataset_path_that_is_a_file(tiny_dataset, tmp_path):
    with pytest.raises(SsftError, match=r"corpus.jsonl is a file, not a BEIR folder .*; pass its folder .*tiny$"):
        load_dataset(str(tiny_dataset / "corpus.jsonl"))
    (tmp_path / "scifact.zip").write_bytes(b"PK")
    with pytest.raises(SsftError, match=r"scifact.zip is a file, not a BEIR folder .*extract the archive"):
        load_dataset(str(tmp_path / "scifact.zip"))


@pytest.mark.parametrize(("name", "ident", "what"), [("corpus.jsonl", "doc 7", "document"),
                                                     ("queries.jsonl", "q\u00a07", "query"),
                                                     ("corpus.jsonl", "", "document")])
def test_ids_a_run_file_cannot_hold_are_refused_at_load(tiny_dataset, name, ident, what):
    with open(tiny_dataset / name, "a") as fh:
        fh.write(json.dumps({"_id": ident, "text": "x"}) + "\n")
    with pytest.raises(SsftError,
                       match=rf"{name}:7: {what} id .* (contains whitespace|is empty): TREC run files are whitespace-separated"):
        load_dataset(str(tiny_dataset))


def test_write_run_refuses_ids_with_whitespace(tmp_path):
    with pytest.raises(SsftError, match=r"r.trec: query 'q1': document id 'doc 1' is empty or contains whitespace"):
        write_run({"q1": {"doc 1": 1.0}}, tmp_path / "r.trec")
    with pytest.raises(SsftError, match=r"r.trec: query id 'q 1'"):
        write_run({"q 1": {"d": 1.0}}, tmp_path / "r.trec")
    assert not (tmp_path / "r.trec").exists()
    write_run({"q1": {"d1": 1.0}}, tmp_path / "s.trec", tag="my run")  # a tag from a file name with a space
    assert (tmp_path / "s.trec").read_text() == "q1 Q0 d1 1 1.000000 my_run\n"
    assert read_run(tmp_path / "s.trec") == {"q1": {"d1": 1.0}}


# ---- run files


def test_duplicate_run_rows_name_both_lines(tmp_path):
    # before: the last row silently won ({'a': 0.5}), moving 'a' below 'b'
    (tmp_path / "r.trec").write_text("q1 Q0 a 1 2.0 t\nq1 Q0 b 2 1.0 t\nq2 Q0 a 1 3.0 t\nq1 Q0 a 3 0.5 t\n")
    with pytest.raises(SsftError, match=r"r.trec:4: document 'a' is listed twice for query 'q1' \(lines 1 and 4\)"):
        read_run(tmp_path / "r.trec")


@pytest.mark.parametrize("score", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_run_scores_are_refused(tmp_path, score):
    (tmp_path / "r.trec").write_text(f"q1 Q0 a 1 2.0 t\nq1 Q0 b 2 {score} t\n")
    with pytest.raises(SsftError, match=rf"r.trec:2: score '{score}' is not a finite number"):
        read_run(tmp_path / "r.trec")


def test_non_utf8_run_file_names_the_line(tmp_path):
    (tmp_path / "r.trec").write_bytes(b"q1 Q0 a 1 2.0 t\nq1 Q0 caf\xe9 2 1.0 t\n")
    with pytest.raises(SsftError, match=r"r.trec:2: not UTF-8 text"):
        read_run(tmp_path / "r.trec")


def test_gzipped_run_file(tmp_path):
    (tmp_path / "r.trec.gz").write_bytes(gzip.compress(b"q1 Q0 a 1 2.0 t\n"))
    assert read_run(tmp_path / "r.trec.gz") == {"q1": {"a": 2.0}}


def test_restrict_to_corpus_counts_and_warns_once(caplog):
    run = {"q1": {"d1": 3.0, "x1": 2.0, "d2": 1.0}, "q2": {"x2": 1.0}, "q3": {"d3": 0.5}}
    warnings: list[str] = []
    with caplog.at_level(logging.WARNING):
        kept = restrict_to_corpus(run, {"d1": 0, "d2": 0, "d3": 0}, "first.trec", warnings)
        assert restrict_to_corpus(run, {"d1": 0, "d2": 0, "d3": 0}, "first.trec", warnings) == kept
    assert kept == {"q1": {"d1": 3.0, "d2": 1.0}, "q3": {"d3": 0.5}}  # q2 had only a missing document
    assert warnings == [("first.trec: 2 of 5 rows name documents not in the corpus (e.g. 'x1'); left out "
                         "(not reranked, not in the first stage's metrics)")]
    assert sum("2 of 5 rows name documents not in the corpus" in r.getMessage() for r in caplog.records) == 1
    assert restrict_to_corpus({"q1": {"d1": 1.0}}, {"d1": 0}, "r", warnings) == {"q1": {"d1": 1.0}}
    assert len(warnings) == 1


def test_restrict_to_corpus_refuses_a_run_of_another_dataset():
    with pytest.raises(SsftError, match=r"^other.trec: none of the run's 2 documents is in the dataset's corpus \(e.g. 'x1'\)"):
        restrict_to_corpus({"q1": {"x1": 1.0, "x2": 0.5}}, {"d1": 0}, "other.trec")


def test_first_stage_run_records_missing_documents(tiny_dataset, tmp_path):
    from ssft.firststage.runs import first_stage_run

    ds = load_dataset(str(tiny_dataset))
    (tmp_path / "first.trec").write_text("q6 Q0 d5 1 2.0 bm25\nq6 Q0 gone 2 1.0 bm25\nq5 Q0 d6 1 1.5 bm25\n")
    name, run = first_stage_run(str(tmp_path / "first.trec"), ds, {}, {"q5": "", "q6": ""}, 10)
    assert name == "first" and run == {"q6": {"d5": 2.0}, "q5": {"d6": 1.5}}
    assert any("1 of 3 rows name documents not in the corpus (e.g. 'gone')" in w for w in ds.warnings)
    (tmp_path / "other.trec").write_text("q6 Q0 gone 1 2.0 bm25\n")
    with pytest.raises(SsftError, match=r"other.trec: none of the run's 1 documents is in the dataset's corpus"):
        first_stage_run(str(tmp_path / "other.trec"), ds, {}, {"q6": ""}, 10)


# ---- real data


@pytest.mark.integration
def test_cranfield_qrels_with_header_and_fourth_column(tmp_path):
    """Cranfield (numeric ids) with its qrels rewritten as header + an extra numeric column reads exactly as the
    original; before, the rows were taken for TREC 'qid iter docid rel' and BM25's nDCG@10 fell from 0.52 to 0.007."""
    source = Path(os.environ.get("SSFT_DATA_HOME") or SHARED_DATA) / "cranfield"
    if not source.is_dir():
        pytest.skip(f"no Cranfield at {source}")
    data = tmp_path / "cranfield"
    shutil.copytree(source, data, ignore=shutil.ignore_patterns("raw"), copy_function=shutil.copyfile)
    for folder in (data, data / "qrels"):
        folder.chmod(0o755)
    original = load_dataset(str(data)).qrels("test")
    lines = (data / "qrels" / "test.tsv").read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    rewritten = [lines[0] + "\titeration"] + [f"{line}\t{i % 2}" for i, line in enumerate(lines[1:])]
    (data / "qrels" / "test.tsv").write_text("\n".join(rewritten) + "\n")
    ds = load_dataset(str(data))
    assert ds.qrels("test") == original
    assert sum(len(docs) for docs in original.values()) == len(lines) - 1 == 1837
    assert not [w for w in ds.warnings if "test.tsv" in w]  # no duplicate or unknown rows either
