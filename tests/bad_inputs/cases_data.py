"""The bad-input matrix: dataset, qrels and run files. Case format: see tests/bad_inputs/cases_base.py."""
from __future__ import annotations

import gzip
import json
import zlib

from tests.bad_inputs.world import World, _train

# ---- damaged gzip files, and the line where each breaks off (computed here, so the case names the exact line)


def _truncated_gzip(text: str, keep: int) -> tuple[bytes, int]:
    """``text`` gzipped and cut to ``keep`` bytes, and the line (1-based) the cut falls in."""
    data = gzip.compress(text.encode(), mtime=0)[:keep]
    complete = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data).count(b"\n")
    return data, complete + 1


# a few thousand judgments of the tiny dataset's ids, varied enough that 400 compressed bytes hold only part of them
_QRELS_GZ, _QRELS_GZ_LINE = _truncated_gzip(
    "query-id\tcorpus-id\tscore\n" + "".join(f"q{i % 6 + 1}\td{i * 7 % 6 + 1}\t{i * 13 % 5 % 3}\n" for i in range(20000)), 400)
_CORPUS_GZ, _CORPUS_GZ_LINE = _truncated_gzip(
    "".join(json.dumps({"_id": f"d{i}", "title": f"t{i * 7919 % 10007}", "text": f"doc {i * 104729 % 99991} {i}"}) + "\n"
            for i in range(1, 3000)), 3000)


def _qrels(w: World, split: str, content: bytes):
    path = w.data / "qrels" / f"{split}.tsv"
    path.write_bytes(content)
    return path


def _append_bytes(path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def _with_qrels(split: str, content: bytes, rerank: bool = False):
    def build(w: World) -> list[str]:
        _qrels(w, split, content)
        return w.rerank() if rerank else _train(w)
    return build


def _with_gz_qrels(split: str, rerank: bool = False):
    def build(w: World) -> list[str]:
        (w.data / "qrels" / f"{split}.tsv").unlink()
        (w.data / "qrels" / f"{split}.tsv.gz").write_bytes(_QRELS_GZ)
        return w.rerank() if rerank else _train(w)
    return build


def _truncated_corpus_gz(w: World) -> list[str]:
    (w.data / "corpus.jsonl").unlink()
    (w.data / "corpus.jsonl.gz").write_bytes(_CORPUS_GZ)
    return _train(w)


def _queries_file(name: str, content: str):
    """ssft-rerank without --split ranking the queries of a file ``name`` (``--queries``)."""
    def build(w: World) -> list[str]:
        queries = w.file(name, content)
        return [str(w.ranker), "--data", str(w.data), "--first-stage", "bm25", "--output", str(w.out),
                "--queries", str(queries), "--depth", "6"]
    return build


def _appended(name: str, data: bytes, rerank: bool = False):
    def build(w: World) -> list[str]:
        _append_bytes(w.data / name, data)
        return w.rerank() if rerank else _train(w)
    return build


def _train_run(rows: list[str] | bytes):
    def build(w: World) -> list[str]:
        path = w.file("first.trec", rows) if isinstance(rows, bytes) else w.run_file(rows)
        return _train(w, f"eval.first_stage={path}")
    return build


def _rerank_run(rows: list[str] | bytes):
    def build(w: World) -> list[str]:
        path = w.file("first.trec", rows) if isinstance(rows, bytes) else w.run_file(rows)
        return w.rerank(first_stage=str(path))
    return build


def _dataset_is_a_file(w: World) -> list[str]:
    return _train(w, f"data.dataset={w.file('dataset.zip', b'PK')}")


def _rerank_dataset_is_corpus_file(w: World) -> list[str]:
    args = w.rerank()
    args[args.index("--data") + 1] = str(w.data / "corpus.jsonl")
    return args


def _scored_rows(rows: list[dict]):
    """A recipe distilling (loss margin_mse) from ``rows``: a ``data.train`` jsonl in the scored form."""
    def build(w: World) -> list[str]:
        path = w.file("scored.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        return _train(w, f"data.train={path}", "loss.name=margin_mse")
    return build


H = b"query-id\tcorpus-id\tscore\n"
DUPLICATE_ROWS = ["q6 Q0 d5 1 2.0 bm25", "q5 Q0 d6 1 1.5 bm25", "q6 Q0 d5 2 1.0 bm25"]
NOT_IN_CORPUS = ["q6 Q0 other-5 1 2.0 bm25", "q5 Q0 other-6 1 1.5 bm25"]

# (id, CLI module, argv builder, culprit the message must name[, flags])
CASES: list[tuple] = [
    # ---- qrels: columns (a header decides them; without one, a 4-column file must be consistently TREC)
    ("train-qrels-4-columns-ambiguous", "ssft.cli.train",
     _with_qrels("train", b"q1\td1\t1\t0\nq2\td2\t1\t0\n"), "train.tsv:2: 4 columns and no header, and not consistently TREC"),
    ("rerank-qrels-4-columns-ambiguous", "ssft.cli.rerank",
     _with_qrels("test", b"q6\td5\t2\t7\nq5\td6\t1\t7\n", rerank=True), "test.tsv:2: 4 columns and no header"),
    ("train-qrels-header-without-corpus-id", "ssft.cli.train",
     _with_qrels("train", b"query-id\tdocument\tscore\nq1\td1\t1\n"),
     "train.tsv:1: the header 'query-id<TAB>document<TAB>score' names no corpus-id column"),
    ("train-qrels-trec-rows-under-beir-header", "ssft.cli.train",
     _with_qrels("train", H + b"q1 0 d1 1\nq2 0 d2 1\n"),
     "train.tsv:2: expected 'query-id<TAB>corpus-id<TAB>score' (the header, line 1), got 4 columns"),
    # ---- qrels: encodings and damaged files
    ("train-qrels-not-utf8", "ssft.cli.train", _appended("qrels/train.tsv", b"q5\td\xe96\t1\r\n"),
     "train.tsv:6: not UTF-8 text (byte 0xe9"),
    ("rerank-qrels-not-utf8", "ssft.cli.rerank", _with_qrels("test", H + b"q6\td5\t2\nq5\td\xe96\t1\n", rerank=True),
     "test.tsv:3: not UTF-8 text"),
    ("train-qrels-utf16", "ssft.cli.train", _with_qrels("train", "query-id\tcorpus-id\tscore\nq1\td1\t1\n".encode("utf-16")),
     "train.tsv:1: UTF-16 text, not UTF-8"),
    ("train-qrels-gz-truncated", "ssft.cli.train", _with_gz_qrels("train"),
     f"train.tsv.gz:{_QRELS_GZ_LINE}: the gzip data ends early"),
    ("rerank-qrels-gz-truncated", "ssft.cli.rerank", _with_gz_qrels("test", rerank=True),
     f"test.tsv.gz:{_QRELS_GZ_LINE}: the gzip data ends early"),
    # ---- qrels: grades
    ("train-qrels-grade-inf", "ssft.cli.train", _appended("qrels/train.tsv", b"q5\td6\tinf\r\n"),
     "train.tsv:6: score 'inf' is not an integer relevance grade"),
    ("train-qrels-grade-nan", "ssft.cli.train", _appended("qrels/train.tsv", b"q5\td6\tnan\r\n"),
     "train.tsv:6: score 'nan' is not an integer relevance grade"),
    ("rerank-qrels-grade-fraction", "ssft.cli.rerank", _with_qrels("test", H + b"q6\td5\t1.5\n", rerank=True),
     "test.tsv:2: score '1.5' is not an integer relevance grade"),
    # ---- corpus and queries
    ("train-corpus-not-utf8", "ssft.cli.train", _appended("corpus.jsonl", b'{"_id": "d7", "text": "caf\xe9"}\n'),
     "corpus.jsonl:7: not UTF-8 text"),
    ("rerank-queries-not-utf8", "ssft.cli.rerank", _appended("queries.jsonl", b'{"_id": "q7", "text": "caf\xe9"}\n', rerank=True),
     "queries.jsonl:7: not UTF-8 text"),
    ("train-corpus-gz-truncated", "ssft.cli.train", _truncated_corpus_gz,
     f"corpus.jsonl.gz:{_CORPUS_GZ_LINE}: the gzip data ends early"),
    ("train-corpus-id-with-space", "ssft.cli.train", _appended("corpus.jsonl", b'{"_id": "doc 7", "text": "x"}\n'),
     "corpus.jsonl:7: document id 'doc 7' contains whitespace: TREC run files are whitespace-separated"),
    ("rerank-query-id-with-tab", "ssft.cli.rerank", _appended("queries.jsonl", b'{"_id": "q\\t7", "text": "x"}\n', rerank=True),
     "queries.jsonl:7: query id 'q\\t7' contains whitespace"),
    # a text field that is a list or an object would be ranked as its Python repr
    ("rerank-corpus-text-is-a-list", "ssft.cli.rerank",
     _appended("corpus.jsonl", b'{"_id": "d7", "title": "t", "text": ["a", "b"]}\n', rerank=True),
     "corpus.jsonl:7: the text is a JSON list, not a string"),
    ("rerank-query-text-is-an-object", "ssft.cli.rerank",
     _appended("queries.jsonl", b'{"_id": "q7", "text": {"en": "x"}}\n', rerank=True),
     "queries.jsonl:7: the text is a JSON dict, not a string"),
    ("rerank-queries-file-json-not-objects", "ssft.cli.rerank", _queries_file("queries.json", "vitamin d\ncoffee\n"),
     "a .json file is read as BEIR's queries.jsonl"),
    ("rerank-queries-file-text-is-a-list", "ssft.cli.rerank",
     _queries_file("mine.jsonl", '{"_id": "u1", "text": ["vitamin", "d"]}\n'), "mine.jsonl:1: the text is a JSON list"),
    ("rerank-queries-file-bm25-finds-nothing", "ssft.cli.rerank", _queries_file("mine.txt", "zyzzyva quokka\n"),
     "bm25: found no candidate document for any of the 1 queries"),
    ("train-dataset-is-a-file", "ssft.cli.train", _dataset_is_a_file, "dataset.zip is a file, not a BEIR folder"),
    ("rerank-dataset-is-corpus-file", "ssft.cli.rerank", _rerank_dataset_is_corpus_file,
     "corpus.jsonl is a file, not a BEIR folder"),
    # ---- run files
    ("train-run-duplicate-row", "ssft.cli.train", _train_run(DUPLICATE_ROWS),
     "first.trec:3: document 'd5' is listed twice for query 'q6' (lines 1 and 3)"),
    ("rerank-run-duplicate-row", "ssft.cli.rerank", _rerank_run(DUPLICATE_ROWS), "first.trec:3: document 'd5' is listed twice"),
    ("train-run-nan-score", "ssft.cli.train", _train_run(["q6 Q0 d5 1 nan bm25"]),
     "first.trec:1: score 'nan' is not a finite number"),
    ("rerank-run-inf-score", "ssft.cli.rerank", _rerank_run(["q6 Q0 d5 1 2.0 bm25", "q5 Q0 d6 2 -inf bm25"]),
     "first.trec:2: score '-inf' is not a finite number"),
    ("train-run-not-utf8", "ssft.cli.train", _train_run(b"q6 Q0 d5 1 2.0 bm25\nq5 Q0 d\xe96 2 1.5 bm25\n"),
     "first.trec:2: not UTF-8 text"),
    ("rerank-run-not-utf8", "ssft.cli.rerank", _rerank_run(b"q6 Q0 d\xe95 1 2.0 bm25\n"), "first.trec:1: not UTF-8 text"),
    ("train-run-no-corpus-documents", "ssft.cli.train", _train_run(NOT_IN_CORPUS),
     "first.trec: none of the run's 2 documents is in the dataset's corpus"),
    ("rerank-run-no-corpus-documents", "ssft.cli.rerank", _rerank_run(NOT_IN_CORPUS),
     "none of the run's 2 documents is in the dataset's corpus"),
    # ---- data.train rows: one document, two teacher scores (the tiny training qrels judge q2-d2 relevant)
    ("train-source-scored-positive-again-other-score", "ssft.cli.train",
     _scored_rows([{"query_id": "q1", "document_ids": ["d1", "d2", "d3", "d1"], "scores": [3.0, 2.0, 1.0, 0.5]}]),
     "scored.jsonl: column 'document_ids', row 1: document 'd1' is the row's positive (score 3) and listed again at "
     "position 4 with score 0.5"),
    ("train-source-scored-negative-twice-other-score", "ssft.cli.train",
     _scored_rows([{"query_id": "q1", "document_ids": ["d1", "d2", "d3", "d4"], "scores": [3.0, 2.0, 1.0, 0.5]},
                   {"query_id": "q2", "document_ids": ["d2", "d4", "d3", "d4"], "scores": [3.0, 2.0, 1.0, 1.5]}]),
     "scored.jsonl: column 'document_ids', row 2: document 'd4' is listed at positions 2 and 4 with scores 2 and 1.5"),
    ("train-source-scored-short-after-judged-dropped", "ssft.cli.train",
     _scored_rows([{"query_id": "q1", "document_ids": ["d1", "d2", "d3"], "scores": [3.0, 2.0, 1.0]},
                   {"query_id": "q2", "document_ids": ["d3", "d2", "d4"], "scores": [3.0, 2.0, 1.0]}]),
     "scored.jsonl: column 'document_ids', row 2: 2 documents (1 dropped: "),
]
