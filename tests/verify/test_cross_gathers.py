"""Cross-building parameter all-gathers when each building holds one cell of a stage: the building's own all-gather
is empty (one rank), the other building's shard still crosses before every op that needs it."""

from __future__ import annotations

import itertools

import pytest

from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.replay import replay
from scaleacross_milp.verify.workload import build_workload

HALLS = [{"name": "A", "gpus": 8, "gpu_type": "h100"}, {"name": "B", "gpus": 8, "gpu_type": "h100"}]
LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 10}]
MICROBATCHES = 4


def one_cell_each(tiny, mode: DPMode) -> tuple[float, float, float]:
    """(DP bytes A->B, the stage's gradient bytes per cell, iteration s) of a one-stage TP 8, DP 2 job, one cell in A
    and one in B."""
    instance = tiny(buildings=HALLS, links=LINK, global_batch_sequences=2 * MICROBATCHES)
    layout = Layout(shape={"tp": 8, "pp": 1, "dp": 2, "micro_batch": 1, "microbatches": MICROBATCHES},
                    schedule=Schedule.one_f_one_b, dp_mode=mode,
                    stages=[{"stage": 0, "layers": 32, "cells_per_building": {"A": 1, "B": 1}}])
    workload = build_workload(instance, resolve(instance, layout))
    assert workload.rank("A", 0).stages[0].all_gather_s == 0  # one rank per building: nothing to gather inside
    assert workload.gather_ratio == 0.5  # bf16 parameters, fp32 gradients
    run = replay(workload, instance.topology)
    a_to_b = next(model for (_, d), model in run.fabric.links.items() if d == 1)
    return a_to_b.dp_bytes, workload.rank("A", 0).stages[0].grad_bytes_per_cell, run.makespan_s


def test_fsdp_pulls_the_other_half_before_every_forward_and_backward(tiny):
    moved, grad, _ = one_cell_each(tiny, DPMode.fsdp)
    # reduce-scatter: grad x 1/2; per F and B, B pulls A's half of the bf16 parameters: 0.5 x 1/2
    assert moved == pytest.approx(grad * (1 / 2 + 2 * MICROBATCHES * 0.5 * 0.5), rel=1e-12)


def test_no_reshard_pulls_it_once_and_replays_faster(tiny):
    moved, grad, kept = one_cell_each(tiny, DPMode.fsdp_no_reshard)
    assert moved == pytest.approx(grad * (1 / 2 + 0.5 * 0.5), rel=1e-12)
    assert one_cell_each(tiny, DPMode.fsdp)[2] > kept


def test_a_backwards_pull_waits_for_the_forwards_before_it(tiny):
    """One microbatch: each rank runs F then B. B's parameters cross once F's have arrived (the prefetch keeps one
    gather in flight during the op before), not beside them from the start, which would halve the first pull's
    share of the link and delay the first forward."""
    instance = tiny(buildings=HALLS, links=LINK, global_batch_sequences=2)
    layout = Layout(shape={"tp": 8, "pp": 1, "dp": 2, "micro_batch": 1, "microbatches": 1},
                    schedule=Schedule.one_f_one_b, dp_mode=DPMode.fsdp,
                    stages=[{"stage": 0, "layers": 32, "cells_per_building": {"A": 1, "B": 1}}])
    run = replay(build_workload(instance, resolve(instance, layout)), instance.topology)
    pulls = sorted((r for r in run.records if r.track == "link A->B" and r.name.startswith("all-gather")),
                   key=lambda r: r.start)
    forward_in_b = next(r for r in run.records if r.track.endswith("(B)") and r.name == "0F0")
    assert len(pulls) == 2
    assert pulls[1].start == pytest.approx(pulls[0].finish)
    assert forward_in_b.start == pytest.approx(pulls[0].finish)


def test_a_rank_s_pulls_run_in_order_when_a_thin_link_backs_them_up(tiny):
    """Each pull is a collective of the rank's one DP communicator, so on a link too thin to keep up (each pull
    outlasts the op it hides behind) the next waits for the one before instead of crossing beside it: the link
    carries them one after another, none overlapping, and the iteration is at least every pull end to end."""
    instance = tiny(buildings=HALLS, links=[{**LINK[0], "capacity_gbit_s": 100}],
                    global_batch_sequences=2 * MICROBATCHES)
    layout = Layout(shape={"tp": 8, "pp": 1, "dp": 2, "micro_batch": 1, "microbatches": MICROBATCHES},
                    schedule=Schedule.one_f_one_b, dp_mode=DPMode.fsdp,
                    stages=[{"stage": 0, "layers": 32, "cells_per_building": {"A": 1, "B": 1}}])
    run = replay(build_workload(instance, resolve(instance, layout)), instance.topology)
    pulls = sorted((r for r in run.records if r.track == "link A->B" and r.name.startswith("all-gather")),
                   key=lambda r: r.start)
    assert len(pulls) == 2 * MICROBATCHES
    assert all(later.start >= earlier.finish - 1e-12 for earlier, later in itertools.pairwise(pulls))
    assert run.makespan_s > sum(r.finish - r.start for r in pulls)
