"""Assemble one shape's MILP from its concerns, with big-M constants derived from valid variable bounds.

A lower bound the caller holds on the shape's iteration time enters as a row, T >= floor (`shape_floor`; the search
passes the shape's sharpened bound, `bounds.first_stage_lower_bound_s`, or the bound an earlier solve proved): it
is valid for every point of the MILP, and HiGHS's relaxation does not reach it by itself (it misses the integer
layer split), so the row lets HiGHS stop as soon as its incumbent is within the gap of it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pyomo.environ as pyo

from scaleacross_milp.gcpause import paused_cycle_collection
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.choices import add_choices
from scaleacross_milp.milp.formulation.cost import add_objective
from scaleacross_milp.milp.formulation.iteration import add_iteration
from scaleacross_milp.milp.formulation.layer_kinds import add_layer_kinds, declare_layer_kinds
from scaleacross_milp.milp.formulation.memory import add_memory
from scaleacross_milp.milp.formulation.pipeline import add_pipeline, add_steady_contention
from scaleacross_milp.milp.formulation.placement import add_placement
from scaleacross_milp.milp.formulation.traffic import add_traffic
from scaleacross_milp.milp.volumes import (
    GB,
    cross_volumes,
    gather_passes,
    gathers_every_cycle,
    shard_group_cells,
    stage_grad_gb,
    straddle_volumes,
)


def big_m_bounds(ctx: ShapeContext) -> dict[str, float]:
    """Upper bounds on loads and times that no optimal solution exceeds; big-M constants are built from them.
    cycle: every stage's time, its crossings and one microbatch's sends and gathers on the slowest link, what the
    rows whose big-M it sets can read; cycle_most, the cycle's own bound (and the time ceiling's): the larger of that
    and a stage's time with a microbatch's parameter gathers on the comm stream (`gather`, `gather_wait`: every
    re-gather a stage can wait for; FSDP on an 8x oversubscribed hall made a TP 8 PP 2 interleaved layout
    infeasible without it; with it in the big-Ms too every FSDP / HSDP shape's relaxation weakened: medium seed 6's
    5 s search returned 16-24 s plans for 13.9 s).
    dp_time: a DP link time (dpx, dpx0) at its best price line, dp_arc GB at the slowest link's lone-unit price or
    NIC floor, plus two route latencies."""
    p, mb, cells = ctx.shape.pp, ctx.shape.microbatches, ctx.shape.cells_per_stage
    layers, ks = ctx.instance.model_spec.layers, ctx.buildings
    stage_ub = max(
        (layers - p + 1) * per_layer + fixed
        for j in range(p) for k in ks for per_layer, fixed in [ctx.stage_time_terms(j, k)]
    )
    latency = max(ctx.routes.latency_s.values(), default=0.0)
    chi = max(o.boundary_crossings for o in ctx.options)
    omega = max(o.wrap_crossings for o in ctx.options)
    pp_arc = ctx.costs.p2p_bytes * ctx.shape.ep / GB * (chi * (p - 1) + omega) * 2 * cells
    straddling = straddle_volumes(ctx)[0] if shard_group_cells(ctx) else 0.0
    volumes = [sum(cross_volumes(ctx, v)) + straddling for v in range(len(ctx.variants))]
    dp_arc = max(volumes) * sum(stage_grad_gb(ctx, j) for j in range(p)) * max(len(ks) - 1, 1)
    slowest = max(ctx.seconds_per_gb.values(), default=0.0)
    floored = max((floor * GB / ctx.routes.links[i].capacity_byte_s for (i, _, _), floor in ctx.nic_floors.items()),
                  default=0.0)
    busy = (mb * pp_arc + dp_arc) * slowest
    streamed = gathers_every_cycle(ctx)
    gathers = max(gather_passes(variant.mode) * ((layers - p + 1) * (gpu.gather_s_per_layer[variant] + ctx.kind_excess(
        lambda costs, k=k, variant=variant: costs.building(k).gather_s_per_layer[variant]).most)
        + gpu.embedding_dp.gather_s[variant] + gpu.head_dp.gather_s[variant])
        for k in ks for gpu in [ctx.gpu(k)] for variant in ctx.variants)
    cycle = p * stage_ub + 2 * chi * p * latency + (pp_arc + (dp_arc / mb if streamed else 0.0)) * slowest
    pipeline = mb * cycle + p * stage_ub + 2 * (chi * (p - 1) + omega) * latency
    dp_time = dp_arc * max(slowest, floored) + 2 * latency
    return {"pp_arc": pp_arc, "dp_arc": dp_arc, "busy": busy, "cycle": cycle, "pipeline": pipeline,
            "dp_time": dp_time, "cycle_most": max(cycle, stage_ub + gathers)}


@dataclass(frozen=True)
class Floors:
    """Lower bounds the caller has proven for the shape (`milp.bounds`; 0: none), entered as rows that only tighten
    the relaxation: T >= time_s (shape_floor), cycle >= cycle_s (cycle_floor) and, under the cost objective,
    sum_k held[k] >= held_rate_usd_s T (held_floor)."""

    time_s: float = 0.0
    cycle_s: float = 0.0
    held_rate_usd_s: float = 0.0


def build_model(ctx: ShapeContext, floors: Floors = Floors()) -> pyo.ConcreteModel:
    """The shape's MILP, minimising T or the iteration's cost (`cost.add_objective`, search.objective), with the
    caller's `floors` (module docstring). Built with the cyclic collector paused (`paused_cycle_collection`): the
    model's components all stay alive, and its collections were 70 % of the build."""
    bounds = big_m_bounds(ctx)
    with paused_cycle_collection():
        m = pyo.ConcreteModel(name=ctx.shape.label())
        add_placement(m, ctx)
        add_choices(m, ctx)
        declare_layer_kinds(m, ctx)
        add_pipeline(m, ctx, bounds, floors.cycle_s)
        m.cycle.setub(bounds["cycle_most"])
        add_traffic(m, ctx, bounds)
        add_steady_contention(m, ctx, bounds["cycle_most"])
        add_layer_kinds(m, ctx)
        add_memory(m, ctx)
        add_iteration(m, ctx, bounds)
        add_objective(m, ctx, bounds, floors.held_rate_usd_s)
        m.shape_floor = pyo.Constraint(expr=floors.time_s <= m.T)
    return m


LAYOUT_DECISIONS = ("u", "w", "z", "x", "y", "n", "f", "h")
"""The variables that make a layout: schedule option u, DP variant w, link transports z, stage cells x and holders
y, layers n, pipeline flows f and their crossings h (what `price.fixed_layout_model` fixes from a layout). Every
other variable (price-line picks, split and spanning indicators, loads, times) follows from them."""


@contextmanager
def held_layout(m: pyo.ConcreteModel, decisions: tuple[str, ...] = LAYOUT_DECISIONS) -> Iterator[None]:
    """Fix the `decisions` (the LAYOUT_DECISIONS unless told) at their current (rounded) values inside the block, so
    that a solve finds the other variables' best values for that layout; the variables fixed here are freed on
    exit."""
    held = [var for name in decisions for var in getattr(m, name).values() if not var.fixed]
    for var in held:
        var.fix(round(var.value))
    try:
        yield
    finally:
        for var in held:
            var.unfix()
