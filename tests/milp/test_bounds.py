"""Shape bounds and pattern incumbents: the bounds never exceed a shape's optimum, the patterns are what they say."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from scaleacross_milp.costmodel.build import instance_tables
from scaleacross_milp.costmodel.schedule import schedule_options
from scaleacross_milp.milp.bounds import (
    RESOLUTION,
    attainable_options,
    crossing_alternatives_s,
    cuts,
    cycle_floor_s,
    drained_bubble_s,
    first_gather_floors_s,
    first_stage_lower_bound_s,
    holder_cut_gb_s,
    layer_caps,
    link_table,
    lower_bound_s,
    next_cap_change,
    stage_floors_s,
    type_floors_s,
)
from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import HighsModel, solve_milp
from scaleacross_milp.milp.patterns import Pattern, fixed_cells, pattern_cells
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.screen import shape_floor_s
from scaleacross_milp.milp.volumes import GB, cross_volumes, fixed_grad_gb, layer_grad_gb, stage_grad_gb
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import Schedule

TWO_HALLS = [{"name": "A", "gpus": 16, "gpu_type": "h100"}, {"name": "B", "gpus": 16, "gpu_type": "h100"}]
LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 20}]


@pytest.fixture
def two_halls(tiny):
    """Llama 3 8B with TP8 PP2 DP2 over two 16-GPU halls: 4 stage cells, 2 per hall."""
    instance, shape = _two_halls(tiny)
    return shape_context(instance, shape, route_table(instance.topology))


def test_zb_v_needs_2p_minus_1_microbatches():
    # Below m = 2p - 1 the V-shaped order idles well beyond the bubble formula (the verifier's replay shows it).
    allowed = [Schedule.zb_v, Schedule.zb_h1]
    assert {o.schedule for o in schedule_options(allowed, [2], pp=4, microbatches=6)} == {Schedule.zb_h1}
    assert {o.schedule for o in schedule_options(allowed, [2], pp=4, microbatches=7)} == set(allowed)


def test_chunked_schedules_need_enough_layers(tiny):
    # 32 layers on 16 ranks: interleaving with 4 chunks would need 64 layers; with 2 chunks it fits exactly.
    instance = tiny(buildings=[{"name": "A", "gpus": 128, "gpu_type": "h100"}], global_batch_sequences=16,
                    search={"schedules": ["interleaved"], "interleave_chunks": [2, 4]})
    shape = Shape(tp=8, pp=16, dp=1, micro_batch=1, microbatches=16)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    assert [o.chunks for o in ctx.options] == [2, 4]
    assert [o.chunks for o in attainable_options(ctx)] == [2]


FAST = {"peak_dense_tflops": {"bf16": 1979}, "hbm_gib": 79.6, "hbm_tbyte_s": 6.7, "nvlink_domain_gpus": 8,
        "nvlink_gbyte_s": 370, "nic_gbit_s": 400}
SMALL_HBM = {**FAST, "peak_dense_tflops": {"bf16": 989}, "hbm_gib": 24, "hbm_tbyte_s": 3.35}


def _mixed_halls(tiny):
    """TP4 PP4 DP2 over an H100 hall and a hall of twice-as-fast GPUs: layer counts differ by hall."""
    halls = [{"name": "A", "gpus": 16, "gpu_type": "h100"}, {"name": "B", "gpus": 16, "gpu_type": "fast"}]
    instance = tiny(buildings=halls, links=LINK, gpu_types={"fast": FAST}, global_batch_sequences=8)
    return instance, Shape(tp=4, pp=4, dp=2, micro_batch=1, microbatches=8)


def _tight_memory(tiny):
    """ZB-H1 on 24 GiB GPUs, TP2 PP4: stage 0 keeps 4 microbatches in flight, so memory caps its layers."""
    halls = [{"name": "A", "gpus": 8, "gpu_type": "small"}, {"name": "B", "gpus": 8, "gpu_type": "small"}]
    instance = tiny(buildings=halls, links=LINK, gpu_types={"small": SMALL_HBM}, global_batch_sequences=8,
                    search={"schedules": ["zb-h1"], "dp_modes": ["fsdp-no-reshard"]})
    return instance, Shape(tp=2, pp=4, dp=2, micro_batch=1, microbatches=8)


def _two_halls(tiny):
    instance = tiny(buildings=TWO_HALLS, links=LINK, global_batch_sequences=8)
    return instance, Shape(tp=8, pp=2, dp=2, micro_batch=1, microbatches=4)


def _deeper_gather(tiny):
    """FSDP-no-reshard, 1F1B, TP8 PP2 DP4 over two 32-GPU halls: 2 DP peers of a stage per hall (intra-hall
    gathers), and a first gather per layer slower than a layer's forward, so deep stages expose theirs."""
    halls = [{**hall, "gpus": 32} for hall in TWO_HALLS]
    instance = tiny(buildings=halls, links=LINK, global_batch_sequences=16,
                    search={"schedules": ["1f1b"], "dp_modes": ["fsdp-no-reshard"]})
    return instance, Shape(tp=8, pp=2, dp=4, micro_batch=1, microbatches=4)


def _draining_reductions(tiny):
    """1F1B, TP8 PP4 DP4 over two halls of 32:1-oversubscribed pods of 8: every stage's reduction is slow, and a later
    stage's starts its drain lead before rank 0's end, so the optimum can hold fewer layers in stage 0."""
    halls = [{"name": name, "gpus": 64, "gpu_type": "h100", "pod_gpus": 8, "oversubscription": 32} for name in "AB"]
    instance = tiny(buildings=halls, links=LINK, global_batch_sequences=32,
                    search={"schedules": ["1f1b"], "dp_modes": ["fsdp-no-reshard"]})
    return instance, Shape(tp=8, pp=4, dp=4, micro_batch=1, microbatches=8)


def _draining_zero_bubble(tiny):
    """ZB-H1 and 1F1B, TP8 PP8 DP4 over two halls of 32:1-oversubscribed pods: slow reductions, every later stage's
    starting its drain lead before rank 0's end, the bubble less that lead still a part of the bound."""
    halls = [{"name": name, "gpus": 128, "gpu_type": "h100", "pod_gpus": 8, "oversubscription": 32} for name in "AB"]
    instance = tiny(buildings=halls, links=LINK, global_batch_sequences=32,
                    search={"schedules": ["1f1b", "zb-h1"], "dp_modes": ["fsdp-no-reshard"]})
    return instance, Shape(tp=8, pp=8, dp=4, micro_batch=1, microbatches=8)


def _chunked_gathers(tiny):
    """ZB-V and interleaving (2 chunks), FSDP without reshard, TP8 PP4 DP4 over two halls of 8:1-oversubscribed pods:
    each chunk's gather outlasts a chunk's forward (the fill waits on it), and ZB-V's later ranks end after rank 0
    (rank 0's reduction counts from its own end, its lag taken off T)."""
    halls = [{"name": name, "gpus": 64, "gpu_type": "h100", "pod_gpus": 16, "oversubscription": 8} for name in "AB"]
    instance = tiny(buildings=halls, links=LINK, global_batch_sequences=32,
                    search={"schedules": ["zb-v", "interleaved"], "interleave_chunks": [2],
                            "dp_modes": ["fsdp-no-reshard"]})
    return instance, Shape(tp=8, pp=4, dp=4, micro_batch=1, microbatches=8)


@pytest.mark.parametrize("case", [_two_halls, _mixed_halls, _tight_memory, _deeper_gather, _draining_reductions,
                                  _draining_zero_bubble, _chunked_gathers])
def test_bounds_never_exceed_the_shapes_optimum(tiny, case):
    # The MILP carries the first-stage bound as a row (`shape_floor`); without it, its optimum must still be at
    # or above both analytical bounds and the screening floor, or the row would cut off real layouts.
    instance, shape = case(tiny)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    ctx = replace(ctx, options=attainable_options(ctx))
    pairs = ctx.pairs
    model = build_model(ctx)
    model.shape_floor.deactivate()
    highs = HighsModel(model)
    optimum = solve_milp(highs, time_limit_s=60, rel_gap=0.0, threads=None)
    assert optimum.status == "optimal"
    assert 0 < lower_bound_s(ctx, pairs) <= first_stage_lower_bound_s(ctx, pairs) <= optimum.incumbent + 1e-9
    floor = shape_floor_s(instance, shape, link_table(ctx.routes), ctx.options, ctx.variants,
                          instance_tables(instance))
    assert 0 < floor <= optimum.incumbent + 1e-9


@pytest.mark.parametrize(("classes", "tau", "cycle"), [
    ([(1.0, 8), (2.0, 8)], 1.0, 8.0),       # the fast type holds all 4 stages of 2 cells: L tau / p
    ([(1.0, 4), (2.0, 4)], 1.0, 32 / 3),    # 2 fast stages, 2 at half speed: 32 / (2 / 1 + 2 / 2)
    ([(1.0, 3), (2.0, 5)], 1.0, 32 / 2.5),  # 3 fast cells make one whole stage: 32 / (1 / 1 + 3 / 2)
    ([(1.0, 1), (2.0, 1), (4.0, 6)], 2.0, 25.6),  # no stage all fast; one of a fast and a medium cell, 3 slow
])
def test_the_type_floors_fill_the_fastest_types_stages_first(classes, tau, cycle):
    # L = 32 layers over p = 4 stages of D = 2 cells; (tau per layer, stage cells) per GPU type, fastest first.
    shape = Shape(tp=8, pp=4, dp=2, micro_batch=1, microbatches=8)
    assert type_floors_s(32, shape, classes) == pytest.approx((tau, cycle))


def test_the_screening_floor_counts_the_slower_gpus_a_shape_must_use(tiny):
    # TP4 PP4 DP2 needs 8 stage cells; the fast hall holds 4, so two stages run on H100s: the floor is above the
    # one of the same shape over two fast halls (before, both took every layer at the fast type's time), and the
    # shape's MILP optimum is above it (`test_bounds_never_exceed_the_shapes_optimum`, `_mixed_halls`).
    mixed, shape = _mixed_halls(tiny)
    fast = tiny(buildings=[{"name": name, "gpus": 16, "gpu_type": "fast"} for name in "AB"], links=LINK,
                gpu_types={"fast": FAST}, global_batch_sequences=8)
    floors = []
    for instance in (mixed, fast):
        ctx = shape_context(instance, shape, route_table(instance.topology))
        floors.append(shape_floor_s(instance, shape, None, ctx.options, ctx.variants, instance_tables(instance)))
    assert floors[0] > 1.1 * floors[1]


def test_a_later_stage_s_drain_lead_leaves_at_least_the_drained_bubble(tiny):
    # At any stage times the MILP allows, the bubble's floor less the drain lead's largest value is at least
    # `drained_bubble_s`: the floor a bound may add under the stage holding the most layers, beyond its lead.
    instance, shape = _draining_zero_bubble(tiny)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    p, rng = shape.pp, np.random.default_rng(0)
    tau = min(ctx.gpu(k).layer.total_s for k in ctx.buildings)
    for option in ctx.options:
        leads = ctx.drain_leads(option)
        total, cycle = stage_floors_s(ctx, ctx.head_stage(option))
        lines = ctx.bubble_lines(option)
        for c in cycle * np.array([1.0, 1.3, 2.0]):
            first_low, first_most, held = 2 * tau, 3 * tau, 4
            floor = float(drained_bubble_s(ctx, option, lines, total, np.array([c]), first_low, first_most, held)[0])
            if c == cycle:  # at the least cycle the lead leaves part of the bubble: the floor is worth its cost
                assert floor > 0
            tried = 0
            for _ in range(500):
                j = int(rng.integers(1, p))
                low = np.full(p, tau)
                low[0], low[j] = first_low, held * tau
                share = rng.uniform(0, 1, p)  # each stage's place between its low end and c, raised to reach `total`
                short = total - (low + (c - low) * share).sum()
                if short > 0:
                    share += (1 - share) * short / ((c - low) * (1 - share)).sum()
                stages = low + (c - low) * share
                if share.max() > 1:
                    continue
                tried += 1
                a, b, k = leads[j]
                first = min(stages[0], first_most)
                lead = max(0.0, a * (first + stages[1:j].sum()) + b * first - k * stages[j])
                bubble = max(0.0, *(sigma * stages.sum() - gamma * c for sigma, gamma in lines))
                assert max(0.0, bubble - lead) >= floor - 1e-12  # lead[j] <= bubble (lead_in_bubble)
            assert tried > 400


def test_patterns_are_feasible_layouts_of_their_kind(two_halls):
    dp_out, pp_out = pattern_cells(two_halls, Pattern.dp_out), pattern_cells(two_halls, Pattern.pp_out)
    # DP-out: each hall holds one whole pipeline (both stages); PP-out: each stage fills one hall.
    assert dp_out == {(0, "A"): 1, (1, "A"): 1, (0, "B"): 1, (1, "B"): 1}
    assert pp_out == {(0, "A"): 2, (1, "B"): 2}
    model = build_model(two_halls)
    highs = HighsModel(model)
    full = solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=None).incumbent
    for cells in (dp_out, pp_out):
        with fixed_cells(model, cells):
            restricted = solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=None)
        # A sub-problem: never below the full optimum beyond HiGHS's tolerances (rows hold to 1e-6 before their
        # big-M coefficients, so two DP variants a few microseconds apart can swap).
        assert restricted.incumbent is not None and restricted.incumbent >= full * (1 - 1e-5)
        assert {(j, k): round(model.x[j, k].value) for j in model.J for k in model.K if model.x[j, k].value} == cells


def test_a_deeper_stage_exposes_its_first_gather_beyond_its_head_start(tiny):
    # FSDP-no-reshard gathers each stage once, at the start; stage 1's gather (28 layers and, 1F1B running the LM
    # head on the last stage, the head) hides only behind stage 0's first forward (embedding, 4 layers, one send),
    # so with 28 layers stage 1's gather is what the iteration waits for.
    instance, shape = _deeper_gather(tiny)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    model = build_model(ctx)
    model.shape_floor.deactivate()
    model.n[0].fix(4)
    model.n[1].fix(28)
    highs = HighsModel(model)
    assert solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=None).status == "optimal"
    gpu = ctx.gpu("A")
    gather, head = gpu.gather_s_per_layer[ctx.variants[0]], gpu.head_dp.gather_s[ctx.variants[0]]
    head_start = 4 * gpu.layer.forward_s + gpu.p2p_intra_s + gpu.first_stage_extra.forward_s
    first = 4 * gather + gpu.embedding_dp.gather_s[ctx.variants[0]]
    assert head > 0 and 28 * gather + head - head_start > first
    assert model.gather0.value == pytest.approx(28 * gather + head - head_start, rel=1e-6)


def test_the_first_gather_floor_is_the_deepest_stages_exposure(tiny):
    # Two stages: with n0 layers first, stage 1 holds the other L - n0 and hides its gather only behind stage 0's
    # first forward, so the least first-gather exposure is max(n0 g, (L - n0) g - head start) (hand computed).
    instance, shape = _deeper_gather(tiny)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    gpu = ctx.gpu("A")
    gather = gpu.gather_s_per_layer[ctx.variants[0]]
    n0 = np.arange(1, 32, dtype=float)
    expected = np.maximum(n0 * gather, (32 - n0) * gather - (
        n0 * gpu.layer.forward_s + gpu.p2p_intra_s + gpu.first_stage_extra.forward_s))
    precision = 32 * gather / RESOLUTION  # the search's stated resolution; it returns the bracket's low end
    floors = first_gather_floors_s(ctx, n0, gather)
    assert np.all(floors <= expected * (1 + 1e-12)) and np.all(expected - floors <= precision)
    # A cycle at which stage 1 holds at most K layers: n0 >= L - K splits as before; smaller n0 cannot split at
    # all, so the floor exceeds anything a split could expose ((L - n0) g at most).
    caps = layer_caps(ctx, np.full(len(n0), 6 * gpu.layer.total_s))
    most = int(caps[0, 1])
    assert 0 < most < 6
    capped = first_gather_floors_s(ctx, n0, gather, caps=caps)
    fits = n0 >= 32 - most
    assert np.all(capped[fits] <= expected[fits] * (1 + 1e-12)) and np.all(expected[fits] - capped[fits] <= precision)
    assert np.all(capped[~fits] > (32 - n0[~fits]) * gather)


def test_layer_caps_stay_constant_until_the_next_cap_change(tiny):
    # The first-gather trade-off prices the cycle interval [c, next_cap_change(c)) with the caps of c: they must not
    # grow anywhere inside it, and must grow at its end (layer_caps floors (c - e) / tau per stage position).
    instance, shape = _deeper_gather(tiny)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    cycles = ctx.gpu("A").layer.total_s * np.array([3.0, 6.5, 10.0])
    change = next_cap_change(ctx, cycles)
    assert np.all(change > cycles)
    for inside in (cycles + (change - cycles) / 2, change - 1e-6 * (change - cycles)):
        assert np.array_equal(layer_caps(ctx, inside), layer_caps(ctx, cycles))
    assert np.all((layer_caps(ctx, change) > layer_caps(ctx, cycles)).any(axis=1))


def test_crossing_alternatives_price_whole_and_split_layouts(two_halls):
    # Two halls with room for one whole stage each (2 cells of 8 GPUs), one link. Whole stages: every pipeline
    # crosses the link once (D = 2 chains, both directions, plus the boundary's latency both ways). With no whole
    # stage both stages are split and move (G + Q) x every layer's gradients with the embedding's and LM head's
    # over the link's two arcs; with one whole stage the other is split: (G + Q) S, S at the fewest layers a split
    # stage can hold (the MILP prices each stage's DP volume at its own layers).
    option = next(o for o in two_halls.options if o.schedule is Schedule.one_f_one_b)
    variant = two_halls.variants[0]
    link = two_halls.routes.links[0]
    speed = max(two_halls.efficiency[0, t] for t in link.transports) * link.capacity_byte_s / GB
    per_chain = 2 * two_halls.costs.p2p_bytes / GB / speed
    gather, reduce = cross_volumes(two_halls, 0)
    stage_gb = min(stage_grad_gb(two_halls, j, option.layer_granularity, option) for j in range(2))
    latency = 2 * link.one_way_latency_s

    every_gb = (layer_grad_gb(two_halls) * two_halls.instance.model_spec.layers
                + sum(fixed_grad_gb(two_halls, j, option) for j in range(2)))

    def split(split_gb: float) -> float:  # one link: its ends' cut is the link itself, so the volume binds
        return max(latency, (gather + reduce) * split_gb / (2 * speed))

    assert every_gb > 2 * stage_gb
    expected = [(2 * per_chain + latency, 0.0), (0.0, split(every_gb)), (0.0, split(stage_gb))]
    alternatives = crossing_alternatives_s(two_halls, option, variant)
    assert len(alternatives) == len(expected)
    for got, want in zip(alternatives, expected, strict=True):
        assert got == pytest.approx(want)
    # A drain credit d (traffic.add_drain: dpx + drain >= the volume rows) lowers the volume floors, never the
    # latency's: a split layout's DP part is max(latency, volume - d).
    drain = split(stage_gb) - latency / 2
    credited = crossing_alternatives_s(two_halls, option, variant, drain)
    assert credited[0] == pytest.approx(expected[0])
    assert [dp for _, dp in credited[1:]] == pytest.approx([max(latency, split(every_gb) - drain), latency])


def test_cycle_floor_counts_the_first_and_last_stages_against_the_fast_capacity(tiny):
    # One H100 node and one A100 node, TP8 PP2 DP1: each node holds exactly one stage, so one of the two stages runs
    # on the A100s. The smallest cycle is the best integer split with one stage on each type, not both on H100.
    instance = tiny(buildings=[{"name": "fast", "gpus": 8, "gpu_type": "h100"},
                               {"name": "slow", "gpus": 8, "gpu_type": "a100"}],
                    links=[{"a": "fast", "b": "slow", "capacity_gbit_s": 3200, "distance_km": 1}],
                    search={"schedules": ["1f1b"]})
    shape = Shape(tp=8, cp=1, ep=1, pp=2, dp=1, micro_batch=1, microbatches=16)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    layers = instance.model_spec.layers

    def stage_s(j: int, k: str, n: int) -> float:
        return n * ctx.gpu(k).layer.total_s + ctx.stage_fixed_s(j, k, ctx.options[0])

    best = min(max(stage_s(0, first, n), stage_s(1, last, layers - n))
               for first, last in (("fast", "slow"), ("slow", "fast")) for n in range(1, layers))
    both_fast = min(max(stage_s(0, "fast", n), stage_s(1, "fast", layers - n)) for n in range(1, layers))
    assert best > both_fast * 1.1
    assert cycle_floor_s(ctx) == pytest.approx(best, rel=1e-9)


THIN_GB_S = 100 / 8
"""The 100 Gb/s link of the thin-link cases, in GB/s."""


def _assert_bounds_count_the_exchange_over_the_thin_link(instance, shape: Shape) -> None:
    """The screening floor with its crossing term and the sharpened bound of `shape` are at least the compute floor
    plus 0.8 x (G + Q) S / (2 c_thin) with G + Q >= 1 (S the whole model's gradient GB: one stage) and at most the
    shape's optimum (its MILP without the search's bound row)."""
    routes = route_table(instance.topology)
    ctx = shape_context(instance, shape, routes)
    options = attainable_options(ctx)
    tables = instance_tables(instance)
    floor = shape_floor_s(instance, shape, link_table(routes), options, ctx.variants, tables)
    exchange_s = (layer_grad_gb(ctx) * instance.model_spec.layers
                  + sum(fixed_grad_gb(ctx, 0, o) for o in options) / len(options)) / (2 * THIN_GB_S)
    least = shape_floor_s(instance, shape, None, options, ctx.variants, tables) + 0.8 * exchange_s
    model = build_model(replace(ctx, options=options))
    model.shape_floor.deactivate()
    optimum = solve_milp(HighsModel(model), time_limit_s=60, rel_gap=0.0, threads=None)
    assert optimum.status == "optimal"
    assert least < floor <= optimum.incumbent + 1e-9
    assert least < first_stage_lower_bound_s(ctx, ctx.pairs) <= optimum.incumbent + 1e-9


def test_a_shape_split_in_every_placement_pays_its_gradients_over_the_thinnest_holders_links(tiny):
    # TP8 PP1 DP4 over halls of 8, 8 and 16 GPUs: no hall holds the stage's 4 cells, and B and C (3 cells) cannot
    # hold it without A, whose only link is 100 Gb/s (B - C: 25.6 Tb/s). A receives and sends (G + Q) x its share
    # and the others' of the whole model's gradients, at least (G + Q) S / 2 each way over that link: the screening
    # floor and the sharpened bound count it (the compute floor alone does not) and stay at or below the optimum.
    halls = [{"name": "A", "gpus": 8, "gpu_type": "h100"}, {"name": "B", "gpus": 8, "gpu_type": "h100"},
             {"name": "C", "gpus": 16, "gpu_type": "h100"}]
    links = [{"a": "A", "b": "B", "capacity_gbit_s": 100, "distance_km": 1},
             {"a": "B", "b": "C", "capacity_gbit_s": 25600, "distance_km": 1}]
    instance = tiny(buildings=halls, links=links, global_batch_sequences=8, search={"schedules": ["1f1b"]})
    _assert_bounds_count_the_exchange_over_the_thin_link(instance, Shape(tp=8, pp=1, dp=4, micro_batch=1,
                                                                         microbatches=2))


def test_a_stage_no_group_of_fast_linked_halls_holds_pays_its_gradients_over_the_links_between_groups(tiny):
    # Halls A - B and C - D joined by 25.6 Tb/s, B - C by 100 Gb/s; TP8 PP1 DP3 needs 3 cells, each pair holds 2.
    # Every hall has a fast link, so no single hall's links bound the exchange; the two groups' do: the stage
    # spans both and moves (G + Q) x its gradients across the 100 Gb/s link, which the screening floor and the
    # sharpened bound count, at or below the optimum.
    halls = [{"name": name, "gpus": 8, "gpu_type": "h100"} for name in "ABCD"]
    links = [{"a": a, "b": b, "capacity_gbit_s": capacity, "distance_km": 1}
             for a, b, capacity in [("A", "B", 25600), ("B", "C", 100), ("C", "D", 25600)]]
    instance = tiny(buildings=halls, links=links, global_batch_sequences=6, search={"schedules": ["1f1b"]})
    _assert_bounds_count_the_exchange_over_the_thin_link(instance, Shape(tp=8, pp=1, dp=3, micro_batch=1,
                                                                         microbatches=2))


def test_a_restrictions_cuts_keep_the_buildings_its_routes_pass_through(tiny):
    # A restriction to A and C of a chain A - B - C routes A -> C through B: B holds nothing but joins C's group
    # over the fast link, so a stage split over A and C crosses A's 100 Gb/s link (theta = its 12.5 GB/s).
    halls = [{"name": name, "gpus": 16, "gpu_type": "h100"} for name in "ABC"]
    links = [{"a": "A", "b": "B", "capacity_gbit_s": 100, "distance_km": 1},
             {"a": "B", "b": "C", "capacity_gbit_s": 25600, "distance_km": 1}]
    routes = route_table(tiny(buildings=halls, links=links).topology).among(["A", "C"])
    used = [routes.links[i] for i in routes.used_links]
    grouped = cuts(routes.buildings, used, np.array([link.capacity_byte_s / GB for link in used]))
    assert holder_cut_gb_s(grouped, np.array([2, 2]), 3, 3) == pytest.approx(THIN_GB_S)
