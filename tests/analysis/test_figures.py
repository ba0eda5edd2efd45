"""Figures of ssft.analysis.figures that the collapse / DAFT and latency notebooks draw: inputs checked, PNGs written."""
import json
import struct

import pytest

from ssft.analysis.figures import LatencyPoint, collapse_record, plot_collapse_history, plot_latency_tradeoff
from ssft.core.errors import SsftError


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def tower(variance, rank):
    return {"total_variance": variance, "effective_rank": rank, "mean_dim_variance": variance / 10, "min_dim_variance": 0.0,
            "samples": 32}


HISTORY = [{"step": s, "query": tower(0.3 - 0.1 * s, 20 - s), "document": tower(0.8 / (1 + s), 30 - 5 * s),
            "mean_query_document_cosine": 0.1} for s in range(3)]
LOSSES = [{"step": s, "loss": 2.0 + 0.3 * s, "collapse_value": 2.77} for s in (1, 2)]


def test_collapse_record_merges_the_callbacks_files_and_refuses_an_empty_folder(tmp_path):
    (tmp_path / "collapse.json").write_text(json.dumps({"history": HISTORY, "losses": LOSSES, "warnings": []}))
    (tmp_path / "daft.json").write_text(json.dumps({"delta": 250.0, "kl_history": [{"step": 0, "epoch": 0, "kl": 400.0}],
                                                    "stage_changes": [{"stage": "fine-tuning", "step": 2}]}))
    record = collapse_record(tmp_path)
    assert record["history"] == HISTORY and record["delta"] == 250.0 and record["kl_history"][0]["kl"] == 400.0
    with pytest.raises(SsftError, match="neither collapse.json nor daft.json"):
        collapse_record(tmp_path / "missing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "daft.json").write_text("{\n  oops")
    with pytest.raises(SsftError, match=r"bad/daft.json:2: not valid JSON"):
        collapse_record(tmp_path / "bad")


def test_collapse_history_plot(tmp_path):
    runs = {"DAFT": {"history": HISTORY, "losses": LOSSES, "kl_history": [{"step": 0, "kl": 400.0}, {"step": 2, "kl": 300.0}],
                     "stage_changes": [{"stage": "alignment", "step": 0}, {"stage": "fine-tuning", "step": 2}]},
            "plain": {"history": HISTORY, "losses": LOSSES}}
    width, height = png_size(plot_collapse_history(runs, tmp_path / "h.png", delta=250, title="t"))
    assert width > 3 * height  # four panels side by side
    narrow, _ = png_size(plot_collapse_history({"plain": runs["plain"]}, tmp_path / "p.png"))
    assert narrow < width  # no KL panel without a KL history
    with pytest.raises(SsftError, match="no recorded history"):
        plot_collapse_history({"empty": {}}, tmp_path / "e.png")


def test_latency_tradeoff_plot(tmp_path):
    points = [LatencyPoint("2 layers", 0.60, {1: 4.2, 32: 3.0}), LatencyPoint("6 layers", 0.67, {1: 11.6, 32: 9.9}),
              LatencyPoint("student", 0.63, {1: 4.0, 32: 2.9}, extra=True)]
    width, height = png_size(plot_latency_tradeoff(points, tmp_path / "f6.png", reference=("MPNet", {1: 90.6, 32: 64.0}),
                                                   threads=1, title="t"))
    assert width > height  # two panels, batch 1 and 32
    one, _ = png_size(plot_latency_tradeoff([LatencyPoint("a", 0.5, {1: 3.0, 32: 2.0}), LatencyPoint("b", 0.6, {1: 5.0})],
                                            tmp_path / "one.png"))
    assert one < width  # only the batch size both points have
    with pytest.raises(SsftError, match="no points"):
        plot_latency_tradeoff([], tmp_path / "x.png")
    with pytest.raises(SsftError, match="share no batch size"):
        plot_latency_tradeoff([LatencyPoint("a", 0.5, {1: 3.0}), LatencyPoint("b", 0.6, {32: 5.0})], tmp_path / "x.png")
