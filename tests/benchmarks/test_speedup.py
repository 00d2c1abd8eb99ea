"""The speedup suite (benchmarks/speedup.py) and the design points it is built from (generate.design_instance)."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter
from pathlib import Path

import pytest

from scaleacross_milp.generate import GPU_CHOICES, DesignPoint, design_instance
from scaleacross_milp.verify.verifier import verify

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("speedup", ROOT / "benchmarks" / "speedup.py")
speedup = sys.modules.setdefault("speedup", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(speedup)

TINY = DesignPoint("llama3-8b", 2, 1.0, 1.0, 0.0, False, 16, seed=2)
"""Llama 3 8B on two H100 buildings (16 GPUs) 1 km apart at 1:1: solves to optimal in about 2 s."""


def test_a_design_point_has_the_buildings_distance_oversubscription_and_loss_asked_for():
    """4 buildings of 512 GPUs in a chain, 50 km links at 1:8 with loss 1e-4, mixed GPU types: every link carries
    the smaller end's GPUs x NIC Gb/s / 8."""
    point = DesignPoint("llama3-70b", 4, 50.0, 8.0, 1e-4, True, 512, seed=3)
    instance = design_instance(point)
    buildings = instance.topology.buildings
    assert len(buildings) == 4 and sum(b.gpus for b in buildings) == 512
    assert len({b.gpu_type for b in buildings}) >= 2
    assert instance.model_spec.name == "llama3-70b"
    assert instance.training.batch_sequences == 2 * 512 // 8
    links = instance.topology.links
    assert [(link.a, link.b) for link in links] == [("b0", "b1"), ("b1", "b2"), ("b2", "b3")]
    for link in links:
        a, b = instance.topology.building(link.a), instance.topology.building(link.b)
        ends = min(a.gpus * GPU_CHOICES[a.gpu_type].nic_gbit_s, b.gpus * GPU_CHOICES[b.gpu_type].nic_gbit_s)
        assert link.capacity_gbit_s == pytest.approx(ends / 8)
        assert link.one_way_latency_s == pytest.approx(50 * 4.9e-6, rel=0.05)
        assert link.loss_rate == 1e-4
    uniform = design_instance(DesignPoint("llama3-70b", 2, 1.0, 1.0, 0.0, False, 256))
    assert {b.gpu_type for b in uniform.topology.buildings} == {"h100-80gb"}


def test_the_design_is_balanced_and_deterministic():
    """48 points: each of 4 models 12 times, each of 3 building counts 16 times, each of 5 oversubscriptions 9 or
    10 times; GPUs a power of two in the model's range; the same seed gives the same points."""
    points = speedup.design_points(48, seed=0)
    assert points == speedup.design_points(48, seed=0) != speedup.design_points(48, seed=1)
    assert Counter(p.model for p in points) == {m: 12 for m in speedup.MODELS}
    assert Counter(p.buildings for p in points) == {b: 16 for b in speedup.BUILDINGS}
    assert sorted(Counter(p.oversubscription for p in points).values()) == [9, 9, 10, 10, 10]
    for p in points:
        low, high = speedup.GPU_RANGE[p.model]
        assert low <= p.gpus <= high and p.gpus & (p.gpus - 1) == 0


def test_summary_takes_the_max_and_the_geometric_mean():
    """Speedups +50 % and +100 % over production: max +100 % at point 1, geometric mean sqrt(1.5 x 2) - 1."""
    outcomes = [speedup.Outcome(index=i, point=f"p{i}", gpus=8, speedups={"production": s},
                                dimensions={"production": "placement"}) for i, s in enumerate((0.5, 1.0))]
    assert speedup.geometric_mean([0.5, 1.0]) == pytest.approx(math.sqrt(3) - 1)
    line = speedup.summary(outcomes)[0]
    assert line.startswith("production: 2 points; max +100.0 % (#1 p1: placement), geometric mean +73.2 %, "
                           "least +50.0 % (#0 p0)")


def test_speedups_are_the_verified_baseline_time_over_the_plans_minus_one():
    """Every column recomputed from independent `verify` calls on the plan's and the baselines' layouts."""
    out = speedup.run_point(0, TINY, time_limit_s=5.0)
    instance = design_instance(TINY)
    plan_s = verify(instance, out.layouts["optimiser"])[0].iteration_s
    assert out.optimizer_s == pytest.approx(plan_s, rel=1e-9)
    assert set(out.times) == {k.value for k in speedup.BASELINES}
    for kind in speedup.BASELINES:
        seconds = verify(instance, out.layouts[kind.value])[0].iteration_s
        assert out.times[kind.value] == pytest.approx(seconds, rel=1e-9)
        assert out.speedups[kind.value] == pytest.approx(seconds / plan_s - 1, rel=1e-9)
    row = speedup.csv_row(out)
    assert row["production speedup"] == out.speedups["production"] and "layouts" not in row
