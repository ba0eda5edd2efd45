"""A trained cross-encoder run scored at several ``model.max_length`` values, on dev data only: the run's own held-out
validation queries and, with ``--other``, another collection's dev split, under BM25's top-k. With ``model.head:
gated_segments`` the query keeps ``model.query_max_length`` tokens and a longer ``max_length`` gives the document the
rest, each segment with its own positions, so a model trained on short documents can read longer ones. Each length is
scored for the trained model and for its start (the same folder with the LoRA update and the gates zeroed: the
checkpoint used as a dense model), so the gain of training is read at each length.

    SSFT_DATA_HOME=../shared/data python benchmarks/serve_length_dev.py RUN [--lengths 128,192,288] \
        [--other nfcorpus [--other-split dev]] [--depth 20] [--work runs/delta_scale_dev]

RUN: a finished ``ssft-train`` folder of a cross-encoder recipe with ``data.holdout_queries`` (the held-out queries
are written as a BEIR folder under ``--work``, as ``benchmarks/delta_scale_dev.py`` writes them). Prints one line per
length and model: nDCG@10 on each.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from delta_scale_dev import dev_arguments, dev_parser, held_out_folder  # noqa: E402

import ssft  # noqa: E402
from ssft.adapters.lora import scale_lora_b  # noqa: E402
from ssft.models.base import Ranker  # noqa: E402


def length_list(text: str) -> list[int]:
    """``--lengths``: comma-separated token counts, each >= 8 (``model.max_length``'s own floor)."""
    try:
        lengths = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}") from None
    if any(n < 8 for n in lengths):
        raise argparse.ArgumentTypeError(f"each length must be >= 8, got {text!r}")
    return lengths


def started(model: Ranker) -> Ranker:
    """The run's start: every LoRA B matrix zeroed and the ranker's parameters that start at zero
    (``Ranker.zero_start_parameters``: the gates)."""
    scale_lora_b(model, 0.0)
    with torch.no_grad():
        for parameter in model.zero_start_parameters():
            parameter.zero_()
    return model


def main(argv: list[str] | None = None) -> None:
    p = dev_parser(__doc__.split("\n\n")[0], other=None, depth=20)
    p.add_argument("--lengths", type=length_list, default="128,192,288", help="model.max_length values scored")
    a = dev_arguments(p, argv)
    own = str(held_out_folder(a.run, a.work))
    for length in a.lengths:
        for name, prepare in (("start", started), ("trained", lambda m: m)):
            model = prepare(ssft.load(a.run))  # a fresh copy: its token cache not yet sized
            model.max_length = length
            held = ssft.evaluate(model, own, split="dev", first_stage="bm25", depth=a.depth)["dev"]["nDCG@10"]
            line = f"max_length {length} {name}: held-out queries {held:.4f}"
            if a.other:
                other = ssft.evaluate(model, a.other, split=a.other_split, first_stage="bm25", depth=a.depth)
                line += f", {a.other} {a.other_split} {other[a.other_split]['nDCG@10']:.4f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
