"""Model folders saved by an earlier ssft (``tests/models/legacy_models``: tiny random rankers of every architecture,
written before the per-architecture model configs) still load, score as they did when saved, and keep their
settings; a cross-encoder saved before ``model.head`` existed loads as ``cls_linear``."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from ssft.models import load_ranker

LEGACY = Path(__file__).resolve().parent / "legacy_models"
FOLDERS = sorted(p.name for p in LEGACY.iterdir() if (p / "ssft_model.json").is_file())


def _scores(ranker, pairs: list[list[str]]) -> torch.Tensor:
    with torch.no_grad():
        return ranker(**ranker.tokenize([q for q, _ in pairs], [d for _, d in pairs]))


def test_every_architecture_has_a_legacy_folder():
    spec = {name: json.loads((LEGACY / name / "ssft_model.json").read_text()) for name in FOLDERS}
    assert {s["architecture"] for s in spec.values()} == {"cross", "twin", "colbert", "dense"}


@pytest.mark.parametrize("name", FOLDERS)
def test_a_folder_saved_by_the_earlier_code_loads_and_scores_as_saved(name):
    expected = json.loads((LEGACY / name / "expected.json").read_text())
    ranker = load_ranker(LEGACY / name)
    torch.testing.assert_close(_scores(ranker, expected["pairs"]),
                               torch.tensor(expected["scores"]), rtol=1e-4, atol=1e-4)


def test_the_saved_settings_are_the_rankers(tmp_path):
    cross = load_ranker(LEGACY / "cross_dual_pooled")
    assert (cross.head_kind, cross.dual_pooling) == ("dual_pooled", "segment_mean")
    twin = load_ranker(LEGACY / "twin_combiner")
    assert (twin.pooling, twin.scorer) == ("cls", "combiner")
    assert load_ranker(LEGACY / "colbert").dim == 8
    dense = load_ranker(LEGACY / "dense")
    assert (dense.pooling, dense.normalize, dense.score_scale, dense.embedding_dim) == ("cls", False, 1.0, 8)
    assert len(dense.backbone.base_model.encoder.layer) == 1  # query_layers: 1
    two = load_ranker(LEGACY / "dense_two_towers")
    assert two.document_backbone is not None and two.embedding_dim == 12 and two.score_scale == 10.0
    # saved again by this code, the folder loads and scores the same
    expected = json.loads((LEGACY / "dense_two_towers" / "expected.json").read_text())
    two.save(tmp_path / "again")
    torch.testing.assert_close(_scores(load_ranker(tmp_path / "again"), expected["pairs"]),
                               torch.tensor(expected["scores"]), rtol=1e-4, atol=1e-4)


def test_a_cross_encoder_saved_before_model_head_existed_loads_as_cls_linear(tmp_path):
    folder = tmp_path / "old"
    shutil.copytree(LEGACY / "cross_cls_linear", folder)
    spec = json.loads((folder / "ssft_model.json").read_text())
    del spec["head"]  # what runs saved before model.head existed hold
    (folder / "ssft_model.json").write_text(json.dumps(spec))
    ranker = load_ranker(folder)
    assert ranker.head_kind == "cls_linear" and ranker.pooler is None
    expected = json.loads((LEGACY / "cross_cls_linear" / "expected.json").read_text())
    torch.testing.assert_close(_scores(ranker, expected["pairs"]), torch.tensor(expected["scores"]), rtol=1e-4, atol=1e-4)
