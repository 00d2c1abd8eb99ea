"""Cross-building DP traffic of FSDP and HSDP: parameter all-gathers cross a boundary only inside a shard group."""

from __future__ import annotations

import pytest

from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.replay import replay, shard_pull
from scaleacross_milp.verify.workload import build_workload

TWO = [{"name": "A", "gpus": 64, "gpu_type": "h100"}, {"name": "B", "gpus": 64, "gpu_type": "h100"}]
LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 10}]
MICROBATCHES = 4


def link_dp_bytes(tiny, cells: dict[str, int], mode: DPMode, replicas: int | None = None) -> tuple[float, float]:
    """(DP bytes A->B, the stage's gradient bytes per cell) of a one-stage TP 8, DP 8 job over A and B."""
    instance = tiny(buildings=TWO, links=LINK)
    layout = Layout(shape={"tp": 8, "pp": 1, "dp": 8, "micro_batch": 1, "microbatches": MICROBATCHES},
                    schedule=Schedule.one_f_one_b, dp_mode=mode, hsdp_replicas=replicas,
                    stages=[{"stage": 0, "layers": 32, "cells_per_building": cells}])
    workload = build_workload(instance, resolve(instance, layout))
    assert workload.gather_ratio == 0.5  # bf16 parameters, fp32 gradients
    run = replay(workload, instance.topology)
    a_to_b = next(model for (_, d), model in run.fabric.links.items() if d == 1)
    return a_to_b.dp_bytes, workload.rank("A", 0).stages[0].grad_bytes_per_cell


def test_shard_pull_by_hand():
    assert shard_pull({"A": 4, "B": 4}, 8) == {("A", "B"): 0.5, ("B", "A"): 0.5}
    assert shard_pull({"A": 4, "B": 4}, 4) == {}
    # groups of 4 over A A A A A A B B: [A A A A] and [A A B B]
    assert shard_pull({"A": 6, "B": 2}, 4) == {("A", "B"): 0.5, ("B", "A"): 0.5}
    assert shard_pull({"A": 5, "B": 3, "C": 4}, 6) == {("A", "B"): 5 / 6, ("B", "A"): 1 / 6, ("B", "C"): 2 / 6,
                                                       ("C", "B"): 4 / 6}


def test_hsdp_groups_inside_buildings_move_only_the_gradient_all_reduce(tiny):
    moved, grad = link_dp_bytes(tiny, {"A": 4, "B": 4}, DPMode.hsdp, replicas=2)
    assert moved == pytest.approx(grad * (4 + 4) / 8, rel=1e-12)


def test_fsdp_gathers_the_other_buildings_half_before_every_forward_and_backward(tiny):
    moved, grad = link_dp_bytes(tiny, {"A": 4, "B": 4}, DPMode.fsdp)
    # reduce-scatter: grad x 4 / 8; per op, B's 4 pipelines pull A's half of the bf16 parameters: 0.5 x 4/8 x 4/4
    assert moved == pytest.approx(grad * (4 / 8 + 2 * MICROBATCHES * 0.5 * 0.5), rel=1e-12)


def test_hsdp_group_spanning_buildings_gathers_its_share_only(tiny):
    moved, grad = link_dp_bytes(tiny, {"A": 6, "B": 2}, DPMode.hsdp, replicas=2)
    # all-reduce grad x (6 + 2) / 8; per op, B pulls A's 2 of the shared group's 4 shards of the bf16 parameters
    assert moved == pytest.approx(grad * (1 + 2 * MICROBATCHES * 0.5 * 0.5), rel=1e-12)
