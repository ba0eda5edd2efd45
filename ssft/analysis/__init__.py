"""Analyses of queries and runs: query ambiguity (001 §5.1), per-class metric splits, the papers' figures."""
