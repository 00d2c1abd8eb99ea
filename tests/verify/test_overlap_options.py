"""Training.overlap_grad_reduce and tp_comm_overlap in the replay, and the MILP pricing them as the replay runs them."""

from __future__ import annotations

import pytest

from scaleacross_milp.milp.price import price_layout
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.replay import replay
from scaleacross_milp.verify.verifier import verify
from scaleacross_milp.verify.workload import build_workload
from tests.verify.test_agreement import check

ONE_STAGE = Layout(shape={"tp": 8, "pp": 1, "dp": 8, "micro_batch": 1, "microbatches": 4},
                   schedule=Schedule.one_f_one_b, dp_mode=DPMode.ddp)
TWO_STAGES = Layout(shape={"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "microbatches": 8},
                    schedule=Schedule.one_f_one_b, dp_mode=DPMode.ddp,
                    stages=[{"stage": j, "layers": 16, "cells_per_building": {"A": 4}} for j in range(2)],
                    pipelines=[{"buildings": ["A", "A"], "pipelines": 4}])


def test_dp_reduction_hides_behind_the_last_backward_only_under_overlap_grad_reduce(tiny):
    # One rank (PP 1) runs F, B of 4 microbatches back to back, then its DDP all-reduce (dp_s, spread over n layers
    # at d = dp_s / n each), then the optimizer. Off: the all-reduce starts after the last B. On: layer i's share
    # starts once the last B has produced it (every delta = B / n), so it ends at t0 + delta + n d when d > delta
    # (t0 = the last B's start), at the end of B plus d otherwise.
    times = {}
    for on in (False, True):
        instance = tiny(overlap_grad_reduce=on)
        workload = build_workload(instance, resolve(instance, ONE_STAGE))
        times[on] = replay(workload, instance.topology).makespan_s
    stage = workload.rank("A", 0).stages[0]
    f, b, n = stage.op_s("F"), stage.op_s("B"), stage.layers
    compute = 4 * (f + b)
    d, delta = stage.dp_s / n, b / n
    assert stage.dp_s > 0 and n == 32
    assert times[False] == pytest.approx(compute + stage.dp_s + stage.optimizer_s)
    done = compute + d if delta >= d else compute - b + delta + n * d
    assert times[True] == pytest.approx(done + stage.optimizer_s)
    assert times[True] < times[False]


def test_a_chunk_s_reduction_queues_behind_the_gather_issued_before_it(tiny):
    # FSDP, interleaved 2 x 2 chunks, 2 microbatches: rank 0 runs 0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1. 2B1 finalises
    # chunk 2, whose reduction is issued during 2B1; 0B0's gather was issued before, when 2B0 ended, so the one comm
    # stream runs it first and 0B0 follows 2B1 and its send without waiting for chunk 2's reduction.
    instance = tiny(buildings=[{"name": "A", "gpus": 16, "gpu_type": "h100"}], global_batch_sequences=8)
    layout = Layout(shape={"tp": 4, "pp": 2, "dp": 2, "micro_batch": 2, "microbatches": 2},
                    schedule=Schedule.interleaved, interleave=2, dp_mode=DPMode.fsdp)
    run = replay(build_workload(instance, resolve(instance, layout)), instance.topology)
    rank0 = [r for r in run.records if r.track == "p0 x2 rank 0 (A)"]
    comm = sorted((r for r in run.records if r.track == "p0 x2 rank 0 (A) comm"), key=lambda r: r.start)
    op = {r.name: r for r in rank0}
    sent = next(r for r in rank0 if r.name == "send bwd 2->1" and r.start == op["2B1"].finish)
    reduce_2 = next(k for k, r in enumerate(comm) if r.name == "reduce 2")
    assert comm[reduce_2 - 1].name == "all-gather 0"
    assert comm[reduce_2 - 1].start == pytest.approx(op["2B0"].finish)
    assert op["0B0"].start == pytest.approx(sent.finish)
    assert comm[reduce_2].start < op["0B0"].start < comm[reduce_2 + 1].start


@pytest.mark.parametrize("options", [{}, {"overlap_grad_reduce": True, "tp_comm_overlap": True}])
def test_the_milp_prices_a_fixed_layout_as_the_replay_runs_it_with_overlap_on_or_off(tiny, options):
    instance = tiny(**options)
    replayed = verify(instance, TWO_STAGES)[0].iteration_s
    assert price_layout(instance, TWO_STAGES) == pytest.approx(replayed, rel=0.01)


def test_overlap_shortens_the_priced_and_the_replayed_step(tiny):
    off, on = tiny(), tiny(overlap_grad_reduce=True, tp_comm_overlap=True)
    assert price_layout(on, TWO_STAGES) < price_layout(off, TWO_STAGES)
    assert verify(on, TWO_STAGES)[0].iteration_s < verify(off, TWO_STAGES)[0].iteration_s


def test_a_solved_plan_with_every_overlap_on_agrees_with_its_replay(tiny):
    instance = tiny(overlap_grad_reduce=True, tp_comm_overlap=True, search={"dp_modes": ["ddp", "fsdp"]})
    check(solve_instance(instance, time_limit_s=10, threads=1), instance)
