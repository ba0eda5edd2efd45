"""The bad-input matrix: dataset, qrels and run files (issue 16). Case format: see tests/bad_cases_base.py."""
from __future__ import annotations

from tests.bad_input_world import World, _train  # noqa: F401  (the argv builders)

CASES: list[tuple] = []
