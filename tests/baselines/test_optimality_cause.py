"""The optimality benchmark's cause column (benchmarks/optimality.py `cause`): why a plan misses the optimum."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("optimality", ROOT / "benchmarks" / "optimality.py")
optimality = sys.modules.setdefault("optimality", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(optimality)


def test_a_miss_is_put_down_to_the_space_the_pricing_or_the_search():
    # Within 1 % nothing is owed; beyond it, an optimum the MILP cannot hold is outside its space, one it prices at
    # or above its own plan is mispriced (the MILP ranks it worse), one it prices below was not reached.
    assert optimality.cause(1.01, None, 1.5) == "-"
    assert optimality.cause(1.04, None, 1.5) == "optimum outside the MILP's space"
    assert optimality.cause(1.04, 1.56, 1.54) == "pricing: MILP ranks the optimum worse"
    assert optimality.cause(1.04, 1.52, 1.54) == "search: optimum not reached"
