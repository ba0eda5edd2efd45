"""Query (and document) encoding latency of a bi-encoder on a dataset's queries: what ssft-latency runs
(``ssft.eval.latency`` times it)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ssft.core import precision as precisions
from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from ssft.eval.latency import measure_latency
from ssft.models.base import Ranker
from ssft.models.interop import openvino
from ssft.pipeline.sources import ModelInput


def batch_size_list(text: str) -> tuple[int, ...]:
    """``"1,32"`` → (1, 32); a one-line error naming --batch-sizes otherwise."""
    try:
        return tuple(int(b) for b in text.split(",") if b.strip())
    except ValueError:
        raise SsftError(f"--batch-sizes: expected integers like 1,32, got '{text}'") from None


def model_latency(model: str | Path | Ranker, data: str, *, split: str | None = None,
                  batch_sizes: Sequence[int] = (1, 32), repeats: int = 5, threads: int = 1, tower: str = "query",
                  max_queries: int = 256, precision: str = precisions.DEFAULT,
                  trust_remote_code: bool = False, backend: str = openvino.DEFAULT_BACKEND) -> list[dict[str, Any]]:
    """Latency rows (``ssft.eval.latency.measure_latency``) of ``model`` encoding ``data``'s queries (those of
    ``split``, or all), each with the precision it ran in (``openvino:<precision>`` on OpenVINO); ``tower``: query,
    document or both; ``backend``: torch, openvino or auto (``ssft.models.interop.openvino.serve``: the job is every
    encoding timed; int8 runs on openvino, calibrated on the queries timed)."""
    precision = precisions.check(precision, "--precision")
    openvino.check_serving(backend, precision)
    dataset = load_dataset(data)
    qids = sorted(dataset.qrels(split)) if split else sorted(dataset.queries)
    queries = [dataset.queries[q] for q in qids if q in dataset.queries]
    source = ModelInput(model)
    ranker = source.load(trust_remote_code)
    if not ranker.bi_encoder:
        raise SsftError(f"{source.name}: query latency is measured for bi-encoders, not '{ranker.architecture}'")
    towers = ["query", "document"] if tower == "both" else [tower]
    timed = queries[:max_queries]
    torch.set_num_threads(threads)  # before a conversion: OpenVINO takes torch's thread count
    calibration = [(q, q) for q in timed]  # both towers see the texts timed
    ranker, _, _ = openvino.serve(ranker, backend, precision, calibration,
                                  inputs=len(timed) * repeats * len(batch_sizes) * len(towers))
    results = measure_latency(ranker, queries, tuple(batch_sizes), repeats, threads, towers, max_queries)
    for row in results:
        row["precision"] = precisions.served_as(ranker)
    return results


__all__ = ["batch_size_list", "model_latency"]
