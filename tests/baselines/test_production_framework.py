"""Production and framework layouts on hand-checkable two-building instances (8-GPU TP cells)."""

from __future__ import annotations

from scaleacross_milp.baselines import Kind, baseline
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.topology import Transport
from scaleacross_milp.verify.layout import resolve


def cells(result) -> list[tuple[int, dict[str, int]]]:
    return [(s.layers, s.cells_per_building) for s in result.layout.stages]


def routes(result) -> list[tuple[list[str], int]]:
    return sorted((r.buildings, r.pipelines) for r in result.layout.pipelines)


def test_production_fills_whole_pipelines_in_instance_order(two_buildings):
    """A 40 + B 24 GPUs, PP 2 (the only degree allowed): a pipeline is 2 cells of TP 8 = 16 GPUs, so A holds 2 and
    B 1 whole pipelines; the largest DP dividing the batch of 16 within 3 is 2, and A (first) takes both."""
    result = baseline(two_buildings(40, 24, search={"pp_degrees": [2]}), Kind.production)
    layout = result.layout
    assert (layout.shape.tp, layout.shape.pp, layout.shape.dp, layout.shape.microbatches) == (8, 2, 2, 8)
    assert (layout.schedule, layout.interleave, layout.dp_mode) == (Schedule.interleaved, 2, DPMode.fsdp_no_reshard)
    assert cells(result) == [(16, {"A": 2}), (16, {"A": 2})]
    assert routes(result) == [(["A", "A"], 2)]
    assert layout.transports == {"A-B": Transport.ecmp_go_back_n}
    assert result.iteration_s == result.verification.iteration_s > 0
    assert result.notes == []


def test_production_runs_megatron_s_distributed_optimizer_when_training_gathers_parameters_behind_the_forward(
        two_buildings):
    """The same instance as above with overlap_grad_reduce and overlap_param_gather on: zero1, whose replay then hides
    all but each chunk's first bucket of the parameter gather, where fsdp-no-reshard waits for the whole of it."""
    instance = two_buildings(40, 24, search={"pp_degrees": [2]}, overlap_grad_reduce=True, overlap_param_gather=True)
    result = baseline(instance, Kind.production)
    assert result.layout.dp_mode is DPMode.zero1 and cells(result) == [(16, {"A": 2}), (16, {"A": 2})]
    no_reshard = baseline(two_buildings(40, 24, search={"pp_degrees": [2]}, overlap_grad_reduce=True),
                          Kind.production)
    assert no_reshard.layout.dp_mode is DPMode.fsdp_no_reshard
    assert result.iteration_s < no_reshard.iteration_s


def test_production_splits_dp_over_buildings_and_sprays_only_without_ecmp(two_buildings):
    """A 40 + B 24, PP 1 fits: 5 + 3 cells, DP 8 (divides 16), 2 microbatches; the link lists spraying first but
    supports ECMP selective repeat, which production takes."""
    link = {"transports": ["spray_selective_repeat", "ecmp_selective_repeat"]}
    result = baseline(two_buildings(40, 24, link=link), Kind.production)
    assert (result.layout.shape.pp, result.layout.shape.dp) == (1, 8)
    assert result.layout.schedule is Schedule.one_f_one_b
    assert cells(result) == [(32, {"A": 5, "B": 3})]
    assert routes(result) == [(["A"], 5), (["B"], 3)]
    assert result.layout.transports == {"A-B": Transport.ecmp_selective_repeat}
    sprayed = baseline(two_buildings(40, 24, link={"transports": ["spray_selective_repeat"]}), Kind.production)
    assert sprayed.layout.transports == {"A-B": Transport.spray_selective_repeat}
    assert any("no ECMP transport" in note for note in sprayed.notes)


def test_production_falls_back_to_1f1b_when_microbatches_are_not_a_multiple_of_pp(two_buildings):
    """Batch 6 on A 48 + B 0-room: PP 4 (allowed alone) holds 1 whole pipeline of 32 GPUs in A, DP 1, 6
    microbatches, not a multiple of 4: 1F1B, layers 8 each, noted."""
    result = baseline(two_buildings(48, 16, search={"pp_degrees": [4]}, batch=6), Kind.production)
    assert (result.layout.shape.pp, result.layout.shape.dp, result.layout.shape.microbatches) == (4, 1, 6)
    assert result.layout.schedule is Schedule.one_f_one_b
    assert cells(result) == [(8, {"A": 1})] * 4
    assert any("interleaved 1F1B does not apply" in note for note in result.notes)


def test_the_smallest_pp_that_fits_memory_is_taken(two_buildings):
    """With 8 GiB of HBM, PP 1 (DP 8 over 5 + 3 cells) needs more than the usable HBM, so the framework rule takes
    PP 2: 8 slots -> 4 cells per stage, DP 4."""
    instance = two_buildings(40, 24, hbm_gib=8)
    result = baseline(instance, Kind.framework)
    assert (result.layout.shape.pp, result.layout.shape.dp) == (2, 4)
    pp1 = Layout(shape={"tp": 8, "pp": 1, "dp": 8, "micro_batch": 1, "microbatches": 2}, schedule=Schedule.one_f_one_b,
                 dp_mode=DPMode.fsdp, stages=[{"stage": 0, "layers": 32, "cells_per_building": {"A": 5, "B": 3}}])
    assert any("GiB needed" in problem for problem in resolve(instance, pp1).infeasible)
    assert not resolve(instance, result.layout).infeasible
    assert any("PP 1 (DP 8): does not fit memory" in note for note in result.notes)


def test_framework_cuts_contiguous_rank_blocks(two_buildings):
    """A 40 + B 24 = 8 cell slots [A A A A A B B B], PP 2 -> 4 cells per stage, DP 4: stage 0 owns slots 0-3 (all
    in A), stage 1 slots 4-7 (1 in A, 3 in B); pipeline i runs through slot i and 4 + i: A->A once, A->B 3 times."""
    result = baseline(two_buildings(40, 24, search={"pp_degrees": [2]}), Kind.framework)
    layout = result.layout
    assert (layout.shape.tp, layout.shape.pp, layout.shape.dp, layout.shape.microbatches) == (8, 2, 4, 4)
    assert (layout.schedule, layout.dp_mode) == (Schedule.one_f_one_b, DPMode.fsdp)
    assert cells(result) == [(16, {"A": 4}), (16, {"A": 1, "B": 3})]
    assert routes(result) == [(["A", "A"], 1), (["A", "B"], 3)]
    assert layout.transports == {"A-B": Transport.ecmp_go_back_n}
    assert result.iteration_s == result.verification.iteration_s > 0


def test_framework_leaves_out_gpus_short_of_a_cell(two_buildings):
    """A 44 (5 cells, 4 GPUs left out) + B 20 (2 cells): 7 slots, PP 2 -> 3 cells per stage, DP 2 (divides 16):
    stage 0 slots 0-1 and stage 1 slots 2-3, all in A."""
    result = baseline(two_buildings(44, 20, search={"pp_degrees": [2]}), Kind.framework)
    assert result.layout.shape.dp == 2
    assert cells(result) == [(16, {"A": 2}), (16, {"A": 2})]
    assert routes(result) == [(["A", "A"], 2)]
