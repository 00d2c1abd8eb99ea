"""Hand-built workloads for the replay (equal op times, no communication) and small real instances."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.actions import ScheduleActions, build_actions
from scaleacross_milp.costmodel.costs import DPVariant, OpTimes
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Layout, StagePlacement
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.topology import Topology
from scaleacross_milp.verify.layout import Pattern, ResolvedLayout
from scaleacross_milp.verify.replay import Level, replay
from scaleacross_milp.verify.workload import RankWork, StageWork, Workload

COMPUTE_ONLY = Level(sends=False, dp_sync=False, all_gathers=False, optimizer=False)
ONE_BUILDING = Topology(buildings=[{"name": "A", "gpus": 64, "gpu_type": "h100"}])


NOTHING_HIDDEN = OpTimes(0.0, 0.0, 0.0)


def synthetic_makespan(actions: ScheduleActions, f: float, i: float, w: float,
                       hidden: OpTimes = NOTHING_HIDDEN) -> float:
    """Makespan of `actions` when every chunk's F, I, W take f, i, w seconds in a merged pair, an op outside one
    `hidden` more (StageWork.ep_hidden), and nothing else costs time."""
    p = actions.ranks
    layout = Layout(shape={"tp": 1, "pp": p, "dp": 1, "micro_batch": 1, "microbatches": actions.microbatches},
                    schedule=Schedule.gpipe, dp_mode=DPMode.ddp)
    stages = tuple(StagePlacement(stage=r, layers=actions.chunks, cells_per_building={"A": 1}) for r in range(p))
    resolved = ResolvedLayout(layout, Schedule.gpipe, actions, DPVariant(DPMode.ddp), stages,
                              (Pattern(("A",) * p, 1),), {}, ())
    zero = OpTimes(0.0, 0.0, 0.0)
    work = StageWork(1, OpTimes(f, i, w), zero, zero, hidden, 0.0, 0.0, 0.0, 0.0, 0.0)
    ranks = {("A", r): RankWork("A", {s: work for s in actions.stages_of(r)}, 0.0, 1e9) for r in range(p)}
    return replay(Workload(resolved, None, ranks, 0.0, 0.0), ONE_BUILDING, COMPUTE_ONLY).makespan_s


@pytest.fixture
def makespan():
    return synthetic_makespan


@pytest.fixture
def named():
    return build_actions


TINY = {"gpus": 64, "batch": 32, "search_defaults": {"time_limit_s": 20, "rel_gap": 0.01}}
"""The small-instance builder's settings for `tiny` (also read by benchmarks/verify_instances.py)."""


@pytest.fixture
def tiny(small_instance):
    """An instance from keyword overrides on a one-building (64 GPUs) Llama 3 8B job."""

    def make(buildings=None, links=None, search=None, **training) -> Instance:
        return small_instance(buildings, links, search, **TINY, **training)

    return make
