"""Hand-built workloads for the replay (equal op times, no communication) and small real instances."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleacross_milp.costmodel.costs import DPVariant, OpTimes
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Layout, StagePlacement
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.topology import Topology
from scaleacross_milp.verify.actions import ScheduleActions, build_actions
from scaleacross_milp.verify.layout import Pattern, ResolvedLayout
from scaleacross_milp.verify.replay import Level, replay
from scaleacross_milp.verify.workload import RankWork, StageWork, Workload

ROOT = Path(__file__).resolve().parents[2]
H100 = {"peak_dense_tflops": {"bf16": 989}, "hbm_gib": 79.6, "hbm_tbyte_s": 3.35,
        "nvlink_domain_gpus": 8, "nvlink_gbyte_s": 370, "nic_gbit_s": 400}
COMPUTE_ONLY = Level(sends=False, dp_sync=False, all_gathers=False, optimizer=False)
ONE_BUILDING = Topology(buildings=[{"name": "A", "gpus": 64, "gpu_type": "h100"}])


def synthetic_makespan(actions: ScheduleActions, f: float, i: float, w: float) -> float:
    """Makespan of `actions` when every chunk's F, I, W take f, i, w seconds and nothing else costs time."""
    p = actions.ranks
    layout = Layout(shape={"tp": 1, "pp": p, "dp": 1, "micro_batch": 1, "microbatches": actions.microbatches},
                    schedule=Schedule.gpipe, dp_mode=DPMode.ddp)
    stages = tuple(StagePlacement(stage=r, layers=actions.chunks, cells_per_building={"A": 1}) for r in range(p))
    resolved = ResolvedLayout(layout, Schedule.gpipe, actions, DPVariant(DPMode.ddp), stages,
                              (Pattern(("A",) * p, 1),), {}, ())
    zero = OpTimes(0.0, 0.0, 0.0)
    work = StageWork(1, OpTimes(f, i, w), zero, zero, 0.0, 0.0)
    ranks = {("A", r): RankWork("A", {s: work for s in actions.stages_of(r)}, 0.0, 0.0, 0.0, 1e9) for r in range(p)}
    return replay(Workload(resolved, None, ranks, 0.0, 0.0), ONE_BUILDING, COMPUTE_ONLY).makespan_s


@pytest.fixture
def makespan():
    return synthetic_makespan


@pytest.fixture
def named():
    return build_actions


def tiny_instance(buildings=None, links=None, search=None, **training) -> Instance:
    data = {
        "name": "tiny",
        "model": json.loads((ROOT / "models" / "llama3-8b.json").read_text()),
        "training": {"seq_len": 8192, "global_batch_sequences": 32, "recompute": "selective", **training},
        "gpu_types": {"h100": H100},
        "topology": {"buildings": buildings or [{"name": "A", "gpus": 64, "gpu_type": "h100"}],
                     "links": links or []},
        "search": {"time_limit_s": 20, "rel_gap": 0.01, **(search or {})},
    }
    return Instance.model_validate(data)


@pytest.fixture
def tiny():
    return tiny_instance
