"""Cheap necessary conditions and lower bounds per shape, valid for the shape's MILP.

Memory: a (schedule option o, DP variant v) pair is *admissible* if every stage can hold a layer and all
stages together can hold L layers on the largest HBM; a shape needs at least one admissible pair.
Capacity: the buildings must hold p x D stage cells.

Lower bound, per admissible (o, v), from the MILP's own rows (see formulation.pipeline and .iteration): with
SC = sum_j Cst[j] >= S = L tau_min + sum_j min_k e[j,k] (every layer on the fastest GPU type) and
cycle >= c0 = max(S / p, ceil(L/p) tau_min + min_{j,k} e[j,k]) (some stage holds ceil(L/p) layers), Cst[0] <= cycle,
    T >= m cycle + beta_o max(0, SC - cycle) + max(0, dpi - rho Cst[0]) + opt,
and dpi >= ceil(L/p) min_k d[k,v], opt >= ceil(L/p) min_k o[k,v] (some stage holds ceil(L/p) layers). The right
side grows with SC, so SC = S; in the cycle c it is convex piecewise linear, minimised at c0 or at S:
    T >= opt_v + max(min_c [m c + beta_o max(0, S - c)],  min_c [m c + beta_o max(0, S - c) - rho min(c, S)] + dpi_v).
The shape's bound is the minimum over admissible pairs.
"""

from __future__ import annotations

import math

from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.iteration import backward_share
from scaleacross_milp.milp.formulation.pipeline import stage_time_terms


def stage_floors_s(ctx: ShapeContext) -> tuple[float, float]:
    """(S, c0): the smallest sum of per-microbatch stage times, and the smallest cycle."""
    p, layers = ctx.shape.pp, ctx.instance.model_spec.layers
    tau = min(ctx.gpu(k).layer.total_s for k in ctx.buildings)
    fixed = [[stage_time_terms(ctx, j, k)[1] for k in ctx.buildings] for j in range(p)]
    total = layers * tau + sum(min(row) for row in fixed)
    return total, max(total / p, math.ceil(layers / p) * tau + min(min(row) for row in fixed))


def pipeline_floor_s(mb: int, beta: float, rho: float, total: float, cycle: float) -> float:
    """min over c >= cycle of m c + beta max(0, S - c) - rho min(c, S): slope m - beta - rho below S, m above."""
    best = cycle if mb - beta - rho >= 0 else max(cycle, total)
    return mb * best + beta * max(0.0, total - best) - rho * min(best, total)


def pair_lower_bound_s(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant) -> float:
    mb, most = ctx.shape.microbatches, math.ceil(ctx.instance.model_spec.layers / ctx.shape.pp)
    types = [ctx.gpu(k) for k in ctx.buildings]
    dpi = most * min(gpu.dp_intra_s_per_layer[variant] for gpu in types)
    opt = most * min(gpu.optimizer_s_per_layer[variant] for gpu in types)
    beta, rho = option.bubble_coefficient(ctx.gpu(ctx.buildings[0]).layer), backward_share(ctx)
    total, cycle = stage_floors_s(ctx)
    no_overlap = pipeline_floor_s(mb, beta, 0.0, total, cycle)
    return opt + max(no_overlap, pipeline_floor_s(mb, beta, rho, total, cycle) + dpi)


def lower_bound_s(ctx: ShapeContext) -> float:
    """The shape's analytical lower bound (infinite when no pair is admissible)."""
    return min((pair_lower_bound_s(ctx, o, v) for o, v in admissible_pairs(ctx)), default=math.inf)


def fits_capacity(ctx: ShapeContext) -> bool:
    cell = ctx.shape.cell_gpus
    room = sum(ctx.instance.topology.building(k).gpus // cell for k in ctx.buildings)
    return room >= ctx.shape.pp * ctx.shape.cells_per_stage


def _stage_memory(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant, j: int) -> tuple[float, float]:
    """(fixed bytes, bytes per layer) one GPU of stage j needs under a schedule option and DP variant."""
    costs, p = ctx.costs, ctx.shape.pp
    fixed = costs.stage_fixed_bytes.get(variant, 0.0)
    fixed += costs.first_stage_fixed_bytes[variant] if j == 0 else 0.0
    fixed += costs.last_stage_fixed_bytes[variant] if j == p - 1 else 0.0
    inflight = option.inflight_microbatches(p, j, ctx.shape.microbatches)
    return fixed, costs.activation_bytes_per_layer * inflight + costs.layer_state_bytes[variant]


def min_memory_gib(ctx: ShapeContext) -> float:
    """Smallest per-GPU memory the shape can need: best schedule and variant, balanced layers."""
    per_stage = math.ceil(ctx.instance.model_spec.layers / ctx.shape.pp)
    needs = (
        max(fixed + per_stage * per_layer
            for j in range(ctx.shape.pp) for fixed, per_layer in [_stage_memory(ctx, o, v, j)])
        for o in ctx.options for v in ctx.variants
    )
    return min(needs) / 2**30


def admissible_pairs(ctx: ShapeContext) -> list[tuple[ScheduleOption, DPVariant]]:
    """(option, variant) pairs that pass the memory condition: per stage, the layers that fit on the largest
    HBM must be at least one and sum to at least L."""
    layers, p = ctx.instance.model_spec.layers, ctx.shape.pp
    hbm = max(gpu.hbm_usable_bytes for gpu in ctx.costs.per_gpu_type.values())
    pairs = []
    for option in ctx.options:
        for variant in ctx.variants:
            room = [
                math.floor((hbm - fixed) / per_layer) if hbm > fixed else 0
                for j in range(p) for fixed, per_layer in [_stage_memory(ctx, option, variant, j)]
            ]
            if min(room) >= 1 and sum(min(r, layers - p + 1) for r in room) >= layers:
                pairs.append((option, variant))
    return pairs
