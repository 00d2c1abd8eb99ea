"""The equalities the verifier relies on to skip replays (verifier._effect_runs), checked by running both."""

from __future__ import annotations

from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.replay import FULL, replay
from scaleacross_milp.verify.verifier import STEADY_OFF
from scaleacross_milp.verify.workload import build_workload

TWO = [{"name": "A", "gpus": 64, "gpu_type": "h100"}, {"name": "B", "gpus": 64, "gpu_type": "h100"}]
LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 100, "distance_km": 50}]


def makespans(tiny, schedule: Schedule, buildings: str) -> dict[str, float]:
    """D and D2 of a 2-stage DDP job, stage j in building buildings[j] (4 cells of TP 8 each)."""
    instance = tiny(buildings=TWO, links=LINK, overlap_grad_reduce=True)
    layout = Layout(shape={"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "microbatches": 8}, schedule=schedule,
                    dp_mode=DPMode.ddp, stages=[{"stage": j, "layers": 16, "cells_per_building": {b: 4}}
                                                for j, b in enumerate(buildings)])
    workload = build_workload(instance, resolve(instance, layout))
    levels = {"D": FULL, "D2": STEADY_OFF}
    return {name: replay(workload, instance.topology, level).makespan_s for name, level in levels.items()}


def test_steady_transfers_matter_only_when_a_send_crosses_buildings(tiny):
    home = makespans(tiny, Schedule.one_f_one_b, "AA")
    assert home["D2"] == home["D"]
    across = makespans(tiny, Schedule.one_f_one_b, "AB")
    assert across["D2"] < across["D"]
