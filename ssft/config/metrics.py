"""Metric names as ir_measures spells them (nDCG@10, P@20, RR@10, R@100): checked when a recipe or a command line
names them; ``ssft.eval.metrics`` computes them."""
from __future__ import annotations

import ir_measures

from ssft.core.errors import SsftError

DEFAULT_METRICS = ["P@20", "nDCG@5", "nDCG@10", "nDCG@20", "RR@10", "R@100"]


def parse_measures(names: list[str], where: str = "metrics") -> list:
    """The ir_measures measures of ``names``; an empty list or an unknown name is one SsftError naming ``where``."""
    if not names:
        raise SsftError(f"{where}: no metrics given")
    measures = []
    for name in names:
        try:
            measures.append(ir_measures.parse_measure(name))
        except (ValueError, NameError, SyntaxError, TypeError, AttributeError):
            raise SsftError(f"{where}: unknown metric '{name}' (ir_measures names, e.g. nDCG@10, P@20, RR@10, R@100)") from None
    return measures


__all__ = ["DEFAULT_METRICS", "parse_measures"]
