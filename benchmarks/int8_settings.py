"""Which NNCF settings keep a model's int8 ranking near fp32: ``ssft-eval``'s reranking of BM25's top-k at int8 with
OpenVINO, calibrated as ssft calibrates (the pairs reranked, a seeded sample of ``CALIBRATION_SIZE``), under each
setting and calibration seed; nDCG@10 per dataset. The readings of § int8_collections quote it.

    SSFT_DATA_HOME=../shared/data python benchmarks/int8_settings.py runs/cross \
        [--datasets scifact,cranfield] [--settings base,ffn_out,last,no_smooth_quant,performance,calibration_1000] \
        [--seeds 0] [--depth 100] [--out runs/bench/int8_settings.jsonl]

``--fidelity N`` measures, instead of nDCG@10, how closely int8 keeps fp32's ranking, without relevance labels: the
first N judged queries of each ``--datasets`` entry (``name:split``, e.g. ``nfcorpus:dev``: choose settings on dev
splits) with their BM25 top ``--depth``, scored by OpenVINO fp32 and by int8 under each setting (calibrated on a
seeded sample of those pairs); per query Kendall's tau between the two orderings and the mean |score error| over the
standard deviation of the query's fp32 scores, averaged over the queries.

Settings (each a change to ``ssft.models.interop.openvino.quantize``'s call of ``nncf.quantize``, or to the
calibration sample): ``base`` as ssft serves (a cross-encoder's attention query and key projections in float in the
layers ``Ranker.int8_float_attention_layers`` names); ``scores_int8`` those quantised too; ``qkv`` the value projections
in float as well; ``ffn_out`` the feed-forward output projections kept in float (an ignored scope); ``last`` the last
transformer layer kept in float; ``no_smooth_quant`` SmoothQuant off; ``performance`` NNCF's symmetric preset;
``calibration_N`` N calibration items instead of ``CALIBRATION_SIZE``; ``by_length`` the calibration sample spread over
the items' lengths (one drawn from each of ``CALIBRATION_SIZE`` strata) instead of drawn at random; ``qk_float_L_M…``
the query and key projections in float in transformer layers L, M, … only (0 is the first; ``qk_float_`` alone: in
none, as ``scores_int8``); ``sq_A`` SmoothQuant's alpha for matmuls A instead of NNCF's 0.95 for transformers, and
``scores_int8_sq_A`` the same with the query and key projections quantised too; ``ranges_NAME`` the activations' ranges
estimated by NNCF's ``RangeEstimatorParametersSet.NAME`` (e.g. ``ranges_mean_quantile``) and ``full_bias`` NNCF's
full bias correction instead of the fast one, each also as ``scores_int8_…``. Each (setting, seed) appends one JSON
line to ``--out``; one already there is not measured again.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import random
import re
import sys
from pathlib import Path
from typing import Any

import nncf
import numpy as np
from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters
from nncf.quantization.range_estimator import RangeEstimatorParametersSet
from scipy.stats import kendalltau

import ssft
from ssft.data.beir import load_dataset
from ssft.firststage.bm25 import BM25
from ssft.models.interop import openvino
from ssft.pipeline.evaluate import evaluate_datasets

FFN_OUT = r"^(?!.*attention).*output\.dense.*"  # BERT's FFN output projection, not attention's
VALUES = r".*attention\.self\.value/.*"  # BERT's attention value projection
SETTINGS = ("base", "scores_int8", "qkv", "ffn_out", "last", "no_smooth_quant", "performance")
ALL_INT8 = "scores_int8_"  # the prefix of a setting that also quantises the query and key projections


def nncf_arguments(setting: str, layers: int) -> dict[str, Any]:
    """The keyword arguments ``setting`` adds to ``nncf.quantize`` for a model of ``layers`` transformer layers."""
    if setting in ("base", "scores_int8", "by_length") or setting.startswith("calibration_"):
        return {}
    if (alpha := smooth_quant_alpha(setting)) is not None:
        return {"advanced_parameters": AdvancedQuantizationParameters(
            smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha))}
    modifier = setting.removeprefix(ALL_INT8)
    if modifier.startswith("ranges_"):
        name = modifier.removeprefix("ranges_").upper()
        if not hasattr(RangeEstimatorParametersSet, name):
            known = ", ".join(n.lower() for n in dir(RangeEstimatorParametersSet) if n.isupper())
            raise SystemExit(f"--settings: '{setting}': NNCF has no range estimator '{name.lower()}' (known: {known})")
        return {"advanced_parameters": AdvancedQuantizationParameters(
            activations_range_estimator_params=getattr(RangeEstimatorParametersSet, name))}
    if modifier == "full_bias":
        return {"fast_bias_correction": False}
    if setting.startswith("qk_float_"):
        qk_float_layers(setting, layers)
        return {}
    if setting == "qkv":
        return {"ignored_scope": nncf.IgnoredScope(patterns=[VALUES], validate=False)}
    if setting == "ffn_out":
        return {"ignored_scope": nncf.IgnoredScope(patterns=[FFN_OUT], validate=False)}
    if setting == "last":
        return {"ignored_scope": nncf.IgnoredScope(patterns=[rf".*layer\.{layers - 1}\..*"], validate=False)}
    if setting == "no_smooth_quant":
        return {"advanced_parameters": AdvancedQuantizationParameters(
            smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1))}
    if setting == "performance":
        return {"preset": nncf.QuantizationPreset.PERFORMANCE}
    raise SystemExit(f"--settings: unknown setting '{setting}' (known: {', '.join(SETTINGS)}, calibration_N, by_length, "
                     f"qk_float_L_M…, sq_A, ranges_NAME, full_bias, and {ALL_INT8}sq_A, {ALL_INT8}ranges_NAME, "
                     f"{ALL_INT8}full_bias)")


def smooth_quant_alpha(setting: str) -> float | None:
    """SmoothQuant's matmul alpha that ``sq_A`` / ``scores_int8_sq_A`` sets (None: the setting sets none)."""
    match = re.fullmatch(r"sq_(\d*\.?\d+)", setting.removeprefix(ALL_INT8))
    if match is None:
        return None
    alpha = float(match.group(1))
    if not 0 <= alpha <= 1:
        raise SystemExit(f"--settings: '{setting}': SmoothQuant's alpha is between 0 and 1")
    return alpha


def all_projections_int8(setting: str) -> bool:
    """Whether ``setting`` quantises the query and key projections too (``scores_int8``, ``scores_int8_sq_A``)."""
    return setting == "scores_int8" or setting.startswith(ALL_INT8)


def qk_float_layers(setting: str, layers: int) -> set[int]:
    """The layers whose query and key projections ``qk_float_L_M…`` keeps in float."""
    kept = setting.removeprefix("qk_float_")
    if not re.fullmatch(r"(\d+(_\d+)*)?", kept) or any(int(n) >= layers for n in kept.split("_") if n):
        raise SystemExit(f"--settings: '{setting}' names layers 0 to {layers - 1} joined by _, e.g. qk_float_0_5")
    return {int(n) for n in kept.split("_") if n}


@contextlib.contextmanager
def applied(setting: str, seed: int):
    """ssft's OpenVINO int8 serving changed by ``setting`` (module docstring), calibration sample ``seed``."""
    quantize, serve, size, sample, limit = (openvino.quantize, openvino.serve_openvino, openvino.CALIBRATION_SIZE,
                                            openvino.calibration_sample, openvino.CHECK_LIMIT)

    def quantize_with(model_ir, inputs, float_attention_layers=()):
        names = [op.get_friendly_name() for op in model_ir.get_ops()]
        layers = 1 + max(int(m.group(1)) for n in names if (m := re.search(r"layer\.(\d+)\.", n)))
        arguments = nncf_arguments(setting, layers)
        if float_attention_layers and not all_projections_int8(setting):  # as ssft serves, plus the setting's own scope
            chosen = (sorted(qk_float_layers(setting, layers)) if setting.startswith("qk_float_")
                      else float_attention_layers)
            kept = openvino.attention_score_projections(model_ir, chosen)
            scope = arguments.get("ignored_scope", nncf.IgnoredScope())
            arguments["ignored_scope"] = nncf.IgnoredScope(names=kept, patterns=scope.patterns, validate=False)
        nncf.set_log_level(40)
        return nncf.quantize(model_ir, nncf.Dataset(inputs), model_type=nncf.ModelType.TRANSFORMER,
                             subset_size=len(inputs), **arguments)

    openvino.quantize = quantize_with
    openvino.serve_openvino = functools.partial(serve, seed=seed)
    openvino.CHECK_LIMIT = math.inf  # what the setting serves at int8, never the check's float fallback
    if setting == "by_length":
        openvino.calibration_sample = by_length
    elif setting.startswith("calibration_"):
        openvino.CALIBRATION_SIZE = int(setting.removeprefix("calibration_"))
    try:
        yield
    finally:
        openvino.quantize, openvino.serve_openvino, openvino.CALIBRATION_SIZE = quantize, serve, size
        openvino.calibration_sample, openvino.CHECK_LIMIT = sample, limit


def by_length(items: list, size: int, seed: int = 0) -> list:
    """A calibration sample spread over lengths: the items ordered by characters, cut into ``size`` strata of equal
    count, one item drawn (seeded) from each."""
    if len(items) <= size:
        return items
    rng = random.Random(seed)
    order = sorted(range(len(items)), key=lambda i: sum(map(len, items[i])) if isinstance(items[i], tuple)
                   else len(items[i]))
    return [items[order[rng.randrange(k * len(items) // size, (k + 1) * len(items) // size)]] for k in range(size)]


def measure(model: str, datasets: list[str], setting: str, seed: int, depth: int) -> dict[str, Any]:
    """nDCG@10 per dataset of ``model`` reranking at int8 under ``setting``, calibration sample ``seed``."""
    with applied(setting, seed):
        result = evaluate_datasets(model, datasets, first_stage="bm25", depth=depth, precision="int8")
    return {"setting": setting, "seed": seed, **{d["dataset"]: d["model"]["nDCG@10"] for d in result["datasets"]}}


def fidelity_pairs(dataset: str, queries: int, depth: int) -> tuple[list[tuple[str, str]], list[slice]]:
    """``dataset`` (``name:split``): the first ``queries`` judged queries of the split with BM25's top ``depth``,
    as (query, document) pairs, and each query's slice of them (queries with fewer candidates skipped)."""
    name, _, split = dataset.partition(":")
    if not split:
        raise SystemExit(f"--datasets: with --fidelity give name:split (e.g. nfcorpus:dev), got '{dataset}'")
    ds = load_dataset(name)
    judged = [q for q in ds.qrels(split) if q in ds.queries]
    run = BM25(ds).search({q: ds.queries[q] for q in judged}, depth)
    pairs, groups = [], []
    for q in judged:
        if len(run.get(q, {})) < depth:
            continue
        groups.append(slice(len(pairs), len(pairs) + depth))
        pairs += [(ds.queries[q], ds.corpus[d].full_text) for d in run[q]]
        if len(groups) == queries:
            break
    return pairs, groups


def fidelity(model: str, dataset: str, settings: list[str], seed: int, queries: int, depth: int):
    """One row per setting: how closely int8 under it keeps OpenVINO fp32's ranking of ``dataset``'s pairs."""
    pairs, groups = fidelity_pairs(dataset, queries, depth)
    ranker = ssft.load(model, backend="torch", precision="fp32")
    reference = np.asarray(ssft.load(ranker, backend="openvino", precision="fp32").predict(pairs))
    for setting in settings:
        with applied(setting, seed):  # serve_openvino draws the seeded calibration sample from the pairs
            served = ssft.load(ranker, backend="openvino", precision="int8", calibration=pairs)
            scores = np.asarray(served.predict(pairs))
        taus = [kendalltau(reference[g], scores[g]).statistic for g in groups]
        errors = [np.abs(reference[g] - scores[g]).mean() / reference[g].std() for g in groups]
        yield {"setting": setting, "seed": seed, "dataset": dataset, "queries": len(groups), "depth": depth,
               "kendall_tau": float(np.mean(taus)), "relative_error": float(np.mean(errors))}


def report_fidelity(a: argparse.Namespace, datasets: list[str], settings: list[str], done: list[dict]) -> int:
    """``--fidelity``: measure what ``--out`` lacks, then print every fidelity row of ``--out``."""
    for dataset in datasets:
        for seed in (int(s) for s in a.seeds.split(",")):
            missing = [s for s in settings if not any(
                r.get("dataset") == dataset and r["setting"] == s and r["seed"] == seed
                and r.get("queries") == a.fidelity and r.get("depth") == a.depth for r in done)]
            for row in fidelity(a.model, dataset, missing, seed, a.fidelity, a.depth) if missing else ():
                with a.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                done.append(row)
    print("| dataset | setting | seed | queries × depth | Kendall tau | |error| / sd |\n|---|---|---:|---:|---:|---:|")
    for r in done:
        if "kendall_tau" in r:
            print(f"| {r['dataset']} | {r['setting']} | {r['seed']} | {r['queries']} × {r['depth']} "
                  f"| {r['kendall_tau']:.4f} | {r['relative_error']:.4f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="what ssft-eval takes: a run folder, a saved model, a checkpoint")
    p.add_argument("--datasets", default="scifact,cranfield")
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--seeds", default="0", help="calibration sample seeds, comma-separated")
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--out", type=Path, default=Path("runs/bench/int8_settings.jsonl"))
    p.add_argument("--fidelity", type=int, default=0, metavar="N",
                   help="agreement with fp32 on the first N judged queries of each name:split (no nDCG)")
    a = p.parse_args(argv)
    datasets = [d for d in a.datasets.split(",") if d]
    settings = [s for s in a.settings.split(",") if s]
    for setting in settings:
        nncf_arguments(setting, 6)  # an unknown setting fails before anything runs
    done = [json.loads(line) for line in a.out.read_text().splitlines()] if a.out.is_file() else []
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.fidelity:
        return report_fidelity(a, datasets, settings, done)
    for setting in settings:
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
