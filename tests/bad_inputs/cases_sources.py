"""The bad-input matrix: data.train sources, data.num_negatives: 0 and ssft-mine. Case format: see
tests/bad_inputs/cases_base.py."""
from __future__ import annotations

import json

from tests.bad_inputs.world import World, _train


def _rows(name: str, rows: list[dict] | str, *overrides: str):
    """A recipe training on ``rows`` written to ``name`` (jsonl; a string is written as it is)."""
    def build(w: World) -> list[str]:
        text = rows if isinstance(rows, str) else "".join(json.dumps(r, allow_nan=True) + "\n" for r in rows)
        return _train(w, f"data.train={w.file(name, text)}", *overrides)
    return build


def _mine(*extra: str):
    def build(w: World) -> list[str]:
        return ["--data", str(w.data), "--bm25", "--output", str(w.out / "mined.jsonl"), *extra]
    return build


def _mine_existing(w: World) -> list[str]:
    w.out.mkdir()
    (w.out / "mined.jsonl").write_text("{}\n")
    (w.out / "mined.mining.json").write_text('{"tool": "ssft-mine"}\n')  # an earlier ssft-mine output
    return _mine()(w)


MARGIN = "loss.name=margin_mse"
SCORED_OK = {"query_id": "q1", "document_ids": ["d1", "d2", "d3"], "scores": [3.0, 2.0, 1.0]}

# (id, CLI module, argv builder, culprit the message must name[, flags])
CASES: list[tuple] = [
    # ---- data.train: columns
    ("train-source-missing-column", "ssft.cli.train", _rows("t.jsonl", [{"query": "a", "negative": "b"}]),
     "t.jsonl: the text form needs a column 'positive'"),
    ("train-source-misnamed-columns", "ssft.cli.train", _rows("t.jsonl", [{"question": "a", "answer": "b"}]),
     "t.jsonl: no column 'query', 'query_id' or 'document_ids'"),
    ("train-source-ids-misnamed-positive", "ssft.cli.train", _rows("t.jsonl", [{"query_id": "q1", "pos_id": "d1"}]),
     "t.jsonl: the ids form needs a column 'positive_id' or 'positive'"),
    # ---- data.train: ids and texts
    ("train-source-document-not-in-corpus", "ssft.cli.train",
     _rows("t.jsonl", [{"query_id": "q1", "positive_id": "d1"}, {"query_id": "q2", "positive_id": "d99"}]),
     "t.jsonl: column 'positive_id', row 2: document id 'd99' is not in the recipe's dataset"),
    ("train-source-query-not-in-queries", "ssft.cli.train", _rows("t.jsonl", [{"query_id": "q77", "positive_id": "d1"}]),
     "t.jsonl: column 'query_id', row 1: query id 'q77'"),
    ("train-source-negative-not-in-corpus", "ssft.cli.train",
     _rows("t.jsonl", [{"query_id": "q1", "positive_id": "d1", "negative_ids": ["d2", "nope"]}]),
     "column 'negative_ids', row 1: document id 'nope'"),
    ("train-source-empty-query-text", "ssft.cli.train", _rows("t.jsonl", [{"query": " ", "positive": "b", "negative": "c"}]),
     "t.jsonl: column 'query', row 1: expected a non-empty text"),
    ("train-source-empty-negative-text", "ssft.cli.train",
     _rows("t.jsonl", [{"query": "a", "positive": "b", "negative_1": "c"}, {"query": "a", "positive": "b", "negative_1": ""}]),
     "t.jsonl: column 'negative_1', row 2: expected a non-empty text"),
    # ---- data.train: the scored form
    ("train-source-scores-length", "ssft.cli.train",
     _rows("t.jsonl", [SCORED_OK, {"query_id": "q2", "document_ids": ["d2", "d3"], "scores": [1.0]}], MARGIN),
     "t.jsonl: column 'scores', row 2: 1 scores for 2 document ids"),
    ("train-source-scores-nan", "ssft.cli.train",
     _rows("t.jsonl", [{"query_id": "q1", "document_ids": ["d1", "d2"], "scores": [1.0, float("nan")]}], MARGIN),
     "t.jsonl: column 'scores', row 1: scores must be finite numbers, got nan"),
    ("train-source-scores-inf", "ssft.cli.train",
     _rows("t.jsonl", [{"query_id": "q1", "document_ids": ["d1", "d2"], "scores": [float("inf"), 1.0]}], MARGIN),
     "t.jsonl: column 'scores', row 1: scores must be finite numbers, got inf"),
    ("train-source-scored-list-too-short", "ssft.cli.train",
     _rows("t.jsonl", [SCORED_OK, {"query_id": "q2", "document_ids": ["d2", "d3"], "scores": [2.0, 1.0]}], MARGIN),
     "t.jsonl: column 'document_ids', row 2: 2 documents, fewer than 1 + data.num_negatives = 3 (lower "
     "data.num_negatives, or mine with ssft-mine --min-negatives 2, which drops shorter rows)"),
    ("train-source-scored-without-distillation-loss", "ssft.cli.train", _rows("t.jsonl", [SCORED_OK]),
     "is in the scored form; scored rows train with a distillation loss"),
    ("train-source-text-with-distillation-loss", "ssft.cli.train",
     _rows("t.jsonl", [{"query": "a", "positive": "b", "negative": "c"}], MARGIN),
     "is in the text form; the scored form (query_id, document_ids, scores) is what loss 'margin_mse' trains on"),
    ("train-source-no-rows", "ssft.cli.train", _rows("t.jsonl", ""), "t.jsonl: the dataset has no rows"),
    ("train-source-csv-no-rows", "ssft.cli.train", _rows("t.csv", "query,positive,negative\n"), "t.csv: the dataset has no rows"),
    ("train-source-not-a-table", "ssft.cli.train", _rows("t.jsonl", "this is not json\n"),
     "t.jsonl: cannot be read as a dataset"),
    ("train-source-unknown-suffix", "ssft.cli.train", _rows("t.txt", "query\n"), "t.txt: expected a .jsonl"),
    ("train-source-missing-file", "ssft.cli.train", lambda w: _train(w, f"data.train={w.root / 'absent.jsonl'}"),
     "absent.jsonl: cannot be read as a dataset"),
    ("train-source-max-train-queries-zero", "ssft.cli.train",
     _rows("t.jsonl", [{"query_id": "q1", "positive_id": "d1"}], "data.max_train_queries=0"),
     "data.max_train_queries: must be >= 1 or null"),
    ("train-source-max-positives-not-a-number", "ssft.cli.train",
     _rows("t.jsonl", [{"query_id": "q1", "positive_id": "d1"}], "data.max_positives_per_query=some"),
     "data.max_positives_per_query"),
    # ---- recipe checks
    ("train-source-format-without-train", "ssft.cli.train", lambda w: _train(w, "data.train_format=ids"),
     "data.train_format / data.train_subset: only with data.train"),
    ("train-distillation-loss-without-scores", "ssft.cli.train", lambda w: _train(w, MARGIN),
     "loss.name: 'margin_mse' distils teacher scores: set data.train"),
    ("train-in-batch-only-cross-encoder", "ssft.cli.train", lambda w: _train(w, "data.num_negatives=0"),
     "data.num_negatives: 0 trains on in-batch negatives alone, which only model.architecture 'dense' has"),
    ("train-negative-num-negatives", "ssft.cli.train", lambda w: _train(w, "data.num_negatives=-1"),
     "data.num_negatives: must be >= 0"),
    # ---- ssft-mine
    ("mine-output-exists", "ssft.cli.mine", _mine_existing, "mined.jsonl exists; pass --overwrite", "out-may-change"),
    ("mine-output-not-jsonl", "ssft.cli.mine",
     lambda w: ["--data", str(w.data), "--bm25", "--output", str(w.root / "mined.csv")], "expected a .jsonl file"),
    ("mine-relative-margin", "ssft.cli.mine", _mine("--relative-margin", "1.5"), "relative_margin must be in [0, 1)"),
    ("mine-range", "ssft.cli.mine", _mine("--range-min", "5", "--range-max", "2"), "expected 1 <= range_min <= range_max"),
    ("mine-filters-leave-nothing", "ssft.cli.mine", _mine("--max-score", "-1"), "the filters left no row"),
    ("mine-split-missing", "ssft.cli.mine", _mine("--split", "nosuch"), "nosuch"),
    ("mine-teacher-missing", "ssft.cli.mine", lambda w: [*_mine()(w), "--teacher", str(w.root / "none")],
     "teacher not found:"),
]
