"""Inputs read as written: BEIR queries saved as ``queries.json`` are its objects, never one text a line; one dataset
named twice (``mini`` and ``mini/``, a folder and a link to it) is refused, never averaged with itself."""
from __future__ import annotations

import json

import pytest

from ssft.core.errors import SsftError
from ssft.data.query_file import read_query_file
from ssft.pipeline.evaluate import evaluate_datasets


def test_beir_queries_saved_as_json_are_read_as_queries_jsonl(tmp_path):
    path = tmp_path / "queries.json"
    path.write_text("".join(json.dumps({"_id": f"u{i}", "text": t}) + "\n" for i, t in enumerate(["vitamin d", "tea"])))
    assert read_query_file(path) == {"u0": "vitamin d", "u1": "tea"}
    plain = tmp_path / "queries.txt"  # the same lines in a text file: still the objects, not texts
    plain.write_text(path.read_text())
    assert read_query_file(plain) == {"u0": "vitamin d", "u1": "tea"}


@pytest.mark.parametrize("second", ["slash", "link"])
def test_one_dataset_named_twice_is_refused(tiny_dataset, tmp_path, second):
    other = str(tiny_dataset) + "/"
    if second == "link":
        (tmp_path / "alias").symlink_to(tiny_dataset)
        other = str(tmp_path / "alias")
    with pytest.raises(SsftError, match="named each once|again") as err:
        evaluate_datasets("no-model-needed", [str(tiny_dataset), other], depth=6)
    assert "--datasets" in str(err.value) and "\n" not in str(err.value)
