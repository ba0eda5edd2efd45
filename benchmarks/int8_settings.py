"""Which NNCF settings keep a model's int8 ranking near fp32: ``ssft-eval``'s reranking of BM25's top-k at int8 with
OpenVINO, calibrated as ssft calibrates (the pairs reranked, a seeded sample of ``CALIBRATION_SIZE``), under each
setting and calibration seed; nDCG@10 per dataset. The readings of § int8_collections quote it.

    SSFT_DATA_HOME=../shared/data python benchmarks/int8_settings.py runs/cross \
        [--datasets scifact,cranfield] [--settings base,ffn_out,last,no_smooth_quant,performance,calibration_1000] \
        [--seeds 0] [--depth 100] [--out runs/bench/int8_settings.jsonl]

Settings (each a change to ``ssft.models.interop.openvino.quantize``'s call of ``nncf.quantize``):
``base`` as ssft serves; ``ffn_out`` the feed-forward output projections kept in float (an ignored scope);
``last`` the last transformer layer kept in float; ``no_smooth_quant`` SmoothQuant off; ``performance`` NNCF's
symmetric preset; ``calibration_N`` N calibration items instead of 400. Each (setting, seed) appends one JSON line to
``--out``; one already there is not measured again.
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from pathlib import Path
from typing import Any

import nncf
from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters

from ssft.models.interop import openvino
from ssft.pipeline.evaluate import evaluate_datasets

FFN_OUT = r"^(?!.*attention).*output\.dense.*"  # BERT's FFN output projection, not attention's
SETTINGS = ("base", "ffn_out", "last", "no_smooth_quant", "performance")


def nncf_arguments(setting: str, layers: int) -> dict[str, Any]:
    """The keyword arguments ``setting`` adds to ``nncf.quantize`` for a model of ``layers`` transformer layers."""
    if setting in ("base",) or setting.startswith("calibration_"):
        return {}
    if setting == "ffn_out":
        return {"ignored_scope": nncf.IgnoredScope(patterns=[FFN_OUT], validate=False)}
    if setting == "last":
        return {"ignored_scope": nncf.IgnoredScope(patterns=[rf".*layer\.{layers - 1}\..*"], validate=False)}
    if setting == "no_smooth_quant":
        return {"advanced_parameters": AdvancedQuantizationParameters(
            smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1))}
    if setting == "performance":
        return {"preset": nncf.QuantizationPreset.PERFORMANCE}
    raise SystemExit(f"--settings: unknown setting '{setting}' (known: {', '.join(SETTINGS)}, calibration_N)")


def measure(model: str, datasets: list[str], setting: str, seed: int, depth: int) -> dict[str, Any]:
    """nDCG@10 per dataset of ``model`` reranking at int8 under ``setting``, calibration sample ``seed``."""
    quantize, serve, size = openvino.quantize, openvino.serve_openvino, openvino.CALIBRATION_SIZE

    def quantize_with(model_ir, inputs):
        names = [op.get_friendly_name() for op in model_ir.get_ops()]
        layers = 1 + max(int(m.group(1)) for n in names if (m := re.search(r"layer\.(\d+)\.", n)))
        nncf.set_log_level(40)
        return nncf.quantize(model_ir, nncf.Dataset(inputs), model_type=nncf.ModelType.TRANSFORMER,
                             subset_size=len(inputs), **nncf_arguments(setting, layers))

    openvino.quantize = quantize_with
    openvino.serve_openvino = functools.partial(serve, seed=seed)
    if setting.startswith("calibration_"):
        openvino.CALIBRATION_SIZE = int(setting.removeprefix("calibration_"))
    try:
        result = evaluate_datasets(model, datasets, first_stage="bm25", depth=depth, precision="int8")
    finally:
        openvino.quantize, openvino.serve_openvino, openvino.CALIBRATION_SIZE = quantize, serve, size
    return {"setting": setting, "seed": seed, **{d["dataset"]: d["model"]["nDCG@10"] for d in result["datasets"]}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="what ssft-eval takes: a run folder, a saved model, a checkpoint")
    p.add_argument("--datasets", default="scifact,cranfield")
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--seeds", default="0", help="calibration sample seeds, comma-separated")
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--out", type=Path, default=Path("runs/bench/int8_settings.jsonl"))
    a = p.parse_args(argv)
    datasets = [d for d in a.datasets.split(",") if d]
    for setting in filter(None, a.settings.split(",")):
        nncf_arguments(setting, 6)  # an unknown setting fails before anything runs
    done = [json.loads(line) for line in a.out.read_text().splitlines()] if a.out.is_file() else []
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for setting in filter(None, a.settings.split(",")):
        for seed in (int(s) for s in a.seeds.split(",")):
            if any(r["setting"] == setting and r["seed"] == seed and all(d in r for d in datasets) for r in done):
                continue
            row = measure(a.model, datasets, setting, seed, a.depth)
            with a.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            done.append(row)
    print("| setting | seed | " + " | ".join(datasets) + " |\n|---|---:|" + "---:|" * len(datasets))
    for r in done:
        print(f"| {r['setting']} | {r['seed']} | " + " | ".join(f"{r[d]:.4f}" if d in r else "–" for d in datasets) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
