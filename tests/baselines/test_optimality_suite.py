"""The optimality benchmark (benchmarks/optimality.py): what its design points cover, and a tiny one end to end."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from scaleacross_milp.generate import DesignPoint
from scaleacross_milp.verify.verifier import TOLERANCE

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("optimality", ROOT / "benchmarks" / "optimality.py")
optimality = sys.modules.setdefault("optimality", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(optimality)

TINY = DesignPoint("llama3-8b", 2, 1.0, 1.0, 0.0, False, 16, seed=0, sequences_per_node=16)
"""Llama 3 8B on two 8-GPU H100 buildings 1 km apart at 1:1, batch 32: 96 layouts (about 2 s)."""


def test_the_points_cover_the_issue_design():
    """At least 10 points of 2-3 buildings and at most a few hundred GPUs, dense and MoE, a thin (1:16), a lossy
    (1e-3) and a far (1,000 km) link, mixed GPU types, each within exhaustive's limit."""
    points = optimality.POINTS
    assert len(points) >= 10
    assert all(2 <= p.buildings <= 3 and p.gpus <= 256 for p in points)
    instances = [optimality.restricted(p) for p in points]
    assert {i.model_spec.moe is not None for i in instances} == {False, True}
    assert any(p.oversubscription >= 16 for p in points)
    assert any(p.loss_rate >= 1e-3 for p in points)
    assert any(p.distance_km >= 1000 for p in points)
    assert any(len({b.gpu_type for b in i.topology.buildings}) > 1 for i in instances)
    assert all(optimality.count_layouts(i)[0] <= optimality.LIMIT for i in instances)


def test_the_milp_reaches_the_exhaustive_optimum_across_both_buildings():
    """Each building holds one TP-8 cell, so one building runs PP 1 x DP 1; the 1 km, 3.2 Tb/s link lets a PP 2
    pipeline over both buildings halve each GPU's layers at a bubble of 1/32 (32 microbatches): the optimum spans
    both, and the MILP finds it (its bound is 0.05 % above the replay there: it prices that layout 0.05 % higher)."""
    instance = optimality.restricted(TINY)
    layouts = optimality.count_layouts(instance)[0]
    values = optimality.row(0, instance, layouts, time_limit=10, gap=optimality.GAP)
    assert values["layouts"] == layouts and 0 < values["replayed"] <= layouts
    assert values["optimum buildings"] == 2
    assert values["ratio"] <= 1.01
    # The bound holds over MILP prices, which agree with replays within the verifier's tolerance (the property
    # suite's bound property); the strict `bound <= optimum` column is reported by the benchmark, not assumed.
    assert values["MILP bound s"] <= (1 + TOLERANCE) * values["exhaustive s"]
