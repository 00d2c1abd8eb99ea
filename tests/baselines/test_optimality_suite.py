"""The optimality benchmark (benchmarks/optimality.py) on its quickest generated instance."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("optimality", ROOT / "benchmarks" / "optimality.py")
optimality = sys.modules.setdefault("optimality", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(optimality)

QUICK_SEED = 24
"""Mixtral 8x7B on A100 + B200 buildings over a lossy continental link: 252 layouts, 127 replayed (about 1 s)."""


def test_the_milp_reaches_the_exhaustive_optimum_and_bounds_it():
    instance = optimality.restricted(QUICK_SEED)
    layouts = optimality.count_layouts(instance)[0]
    values = optimality.row(QUICK_SEED, instance, layouts, time_limit=10)
    assert values["layouts"] == layouts and 0 < values["replayed"] <= layouts
    assert values["ratio"] <= 1.01
    assert values["bound <= optimum"]
