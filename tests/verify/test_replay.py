"""The replays the verifier's effects are measured by: each switch removes what it names, and only that."""

from __future__ import annotations

from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.replay import FULL, Level, replay
from scaleacross_milp.verify.workload import build_workload

TWO = [{"name": "A", "gpus": 32, "gpu_type": "h100"}, {"name": "B", "gpus": 32, "gpu_type": "h100"}]


def makespans(tiny, stage_layers: tuple[int, int], gbit_s: float, levels: dict[str, Level]) -> dict[str, float]:
    """Replay a 2-stage 1F1B fsdp-no-reshard job, stage 0 in building A, stage 1 in B, at each level."""
    instance = tiny(buildings=TWO, links=[{"a": "A", "b": "B", "capacity_gbit_s": gbit_s, "distance_km": 10}])
    layout = Layout(shape={"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "microbatches": 8},
                    schedule=Schedule.one_f_one_b, dp_mode=DPMode.fsdp_no_reshard,
                    stages=[{"stage": j, "layers": n, "cells_per_building": {b: 4}}
                            for j, (n, b) in enumerate(zip(stage_layers, "AB", strict=True))])
    workload = build_workload(instance, resolve(instance, layout))
    return {name: replay(workload, instance.topology, level).makespan_s for name, level in levels.items()}


def test_steady_state_sends_cost_a_transfer_per_microbatch_on_a_thin_link(tiny):
    levels = {"full": FULL, "fill-drain": Level(steady_transfers=False), "no-sends": Level(sends=False)}
    thin = makespans(tiny, (16, 16), 100, levels)
    assert thin["no-sends"] < thin["fill-drain"] < thin["full"]
