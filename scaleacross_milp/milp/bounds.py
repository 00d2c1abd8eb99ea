"""Cheap necessary conditions and lower bounds per shape, valid for the shape's MILP.

A (schedule option o, DP variant v) pair is *admissible* if o's layer granularity g is attainable (g | L,
L >= g p) and every stage can hold a layer and all stages together L layers on the largest HBM; a shape needs
at least one admissible pair.
Capacity: the buildings must hold p x D stage cells.

Lower bound, per admissible (o, v), from the MILP's own rows (see formulation.pipeline and .iteration): with
SC = sum_j Cst[j] >= S = L tau_min + sum_j min_k e[j,k] (every layer on the fastest GPU type) and
cycle >= c0 = max(S / p, `cycle_floor_s`) (capacity of the fast buildings, integer layers), C0 <= Cst[0] <= cycle,
    T >= m cycle + beta_o max(0, SC - cycle) + max(0, dpi - rho C0) + opt,
and dpi >= ceil(L/p) min_k d[k,v], opt >= ceil(L/p) min_k o[k,v] (some stage holds ceil(L/p) layers). The right
side grows with SC, so SC = S; in the cycle c it is convex piecewise linear, minimised at c0 or at S:
    T >= opt_v + gather0_v + max(min_c [m c + beta_o max(0, S - c)],  min_c [... - rho min(c, S)] + dpi_v),
with the gathers' own floors cycle >= passes_v ceil(L/p) min_k g[k,v] and gather0_v >= g_o min_k g[k,v] (stage 0
holds at least the option's granularity g_o of layers).
The shape's bound is the minimum over admissible pairs.
"""

from __future__ import annotations

import math

import numpy as np

from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.iteration import gather_passes
from scaleacross_milp.spec.search import DPMode


def cycle_floor_s(ctx: ShapeContext) -> float:
    """c0: no cycle is shorter. Group buildings by layer time tau_1 < tau_2 < ...; at most
    a_t = floor(cells in groups <= t / D) stages can avoid every group slower than t, so in the best case a_1 stages
    run at tau_1, a_2 - a_1 at tau_2, and so on. At cycle c a stage of group t holds at most
    floor((c - e_min) / tau_t) layers (e_min the smallest fixed stage time) and at least one, so c0 is the smallest
    c = tau_t n + e_min at which those stages hold L layers."""
    p, cells, layers = ctx.shape.pp, ctx.shape.cells_per_stage, ctx.instance.model_spec.layers
    fixed = min(ctx.stage_time_terms(j, k)[1] for j in range(p) for k in ctx.buildings)
    room: dict[float, int] = {}
    for k in ctx.buildings:
        tau = ctx.gpu(k).layer.total_s
        room[tau] = room.get(tau, 0) + ctx.instance.topology.building(k).gpus // ctx.shape.cell_gpus
    groups, placed, held = [], 0, 0
    for tau in sorted(room):
        held += room[tau]
        count = min(p, held // cells) - placed
        if count > 0:
            groups.append((tau, count))
            placed += count
    taus = np.array([tau for tau, _ in groups])
    counts = np.array([count for _, count in groups])
    candidates = np.sort((taus[:, None] * np.arange(1, layers + 1)[None, :]).ravel())
    per_stage = np.minimum(np.floor(candidates[:, None] / taus[None, :] + 1e-9), layers - p + 1)
    holds = (per_stage >= 1).all(axis=1) & (per_stage @ counts >= layers)
    return float(candidates[np.argmax(holds)]) + fixed if holds.any() else math.inf


def stage_floors_s(ctx: ShapeContext) -> tuple[float, float]:
    """(S, c0): the smallest sum of per-microbatch stage times, and the smallest cycle."""
    p, layers = ctx.shape.pp, ctx.instance.model_spec.layers
    tau = min(ctx.gpu(k).layer.total_s for k in ctx.buildings)
    fixed = [min(ctx.stage_time_terms(j, k)[1] for k in ctx.buildings) for j in range(p)]
    total = layers * tau + sum(fixed)
    return total, max(total / p, cycle_floor_s(ctx))


def pipeline_floor_s(mb: int, beta: float, rho: float, total: float, cycle: float) -> float:
    """min over c >= cycle of m c + beta max(0, S - c) - rho min(c, S): slope m - beta - rho below S, m above."""
    best = cycle if mb - beta - rho >= 0 else max(cycle, total)
    return mb * best + beta * max(0.0, total - best) - rho * min(best, total)


def lower_bound_s(ctx: ShapeContext, pairs: list[tuple[ScheduleOption, DPVariant]]) -> float:
    """The shape's analytical lower bound over its admissible (option, variant) pairs (infinite if none)."""
    mb, most = ctx.shape.microbatches, math.ceil(ctx.instance.model_spec.layers / ctx.shape.pp)
    types = [ctx.gpu(k) for k in ctx.buildings]
    rho, layer = ctx.backward_share, ctx.gpu(ctx.buildings[0]).layer
    total, cycle = stage_floors_s(ctx)
    best = math.inf
    for option, variant in pairs:
        dpi = most * min(gpu.dp_intra_s_per_layer[variant] for gpu in types)
        opt = most * min(gpu.optimizer_s_per_layer[variant] for gpu in types)
        gather = min(gpu.gather_s_per_layer[variant] for gpu in types)
        gather0 = option.layer_granularity * gather if variant.mode is not DPMode.ddp else 0.0
        slowest = max(cycle, gather_passes(variant.mode) * most * gather)
        beta = option.bubble_coefficient(layer)
        no_overlap = pipeline_floor_s(mb, beta, 0.0, total, slowest)
        best = min(best, opt + gather0 + max(no_overlap, pipeline_floor_s(mb, beta, rho, total, slowest) + dpi))
    return best


def first_stage_lower_bound_s(ctx: ShapeContext, pairs: list[tuple[ScheduleOption, DPVariant]]) -> float:
    """A sharper bound for the shapes the search reaches, by enumerating n0 = layers of stage 0 (vectorised):
    the other p - 1 stages hold L - n0 layers, so cycle >= c(n0) = max(c0, tau_min n0 + e0,
    tau_min ceil((L - n0) / (p - 1)) + e_min, gathers); stage 0's first gather takes n0 g_v; DP overlap is
    rho C0 with C0 = tau_min n0 + e0 exactly as in the MILP's `first_stage_floor`. Since m c + beta max(0, S - c)
    grows with c (m >= beta),
        T >= min_n0 [ opt_v + n0 g_v + m c(n0) + beta_o max(0, S - c(n0)) + max(0, dpi_v - rho C0(n0)) ]."""
    p, mb, layers = ctx.shape.pp, ctx.shape.microbatches, ctx.instance.model_spec.layers
    most = math.ceil(layers / p)
    types = [ctx.gpu(k) for k in ctx.buildings]
    tau = min(gpu.layer.total_s for gpu in types)
    e_first = min(ctx.stage_time_terms(0, k)[1] for k in ctx.buildings)
    e_min = min(ctx.stage_time_terms(j, k)[1] for j in range(p) for k in ctx.buildings)
    total, cycle = stage_floors_s(ctx)
    layer, rho = ctx.gpu(ctx.buildings[0]).layer, ctx.backward_share
    best = math.inf
    for option, variant in pairs:
        grain = option.layer_granularity
        n0 = np.arange(grain, layers - (p - 1) * grain + 1, grain, dtype=float)
        rest = np.ceil((layers - n0) / (p - 1)) if p > 1 else np.zeros_like(n0)
        gather = min(gpu.gather_s_per_layer[variant] for gpu in types)
        c = np.maximum.reduce([np.full_like(n0, cycle), tau * n0 + e_first, tau * rest + e_min,
                               gather_passes(variant.mode) * np.maximum(n0, rest) * gather])
        beta = option.bubble_coefficient(layer)
        dpi = most * min(gpu.dp_intra_s_per_layer[variant] for gpu in types)
        opt = most * min(gpu.optimizer_s_per_layer[variant] for gpu in types)
        bound = (opt + (n0 * gather if variant.mode is not DPMode.ddp else 0.0) + mb * c
                 + beta * np.maximum(0.0, total - c) + np.maximum(0.0, dpi - rho * (tau * n0 + e_first)))
        best = min(best, float(bound.min()))
    return best


def fits_capacity(ctx: ShapeContext) -> bool:
    cell = ctx.shape.cell_gpus
    room = sum(ctx.instance.topology.building(k).gpus // cell for k in ctx.buildings)
    return room >= ctx.shape.pp * ctx.shape.cells_per_stage


def stage_memory(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant) -> tuple[np.ndarray, np.ndarray]:
    """(fixed bytes, bytes per layer) one GPU of each stage needs under a schedule option and DP variant."""
    costs, p = ctx.costs, ctx.shape.pp
    fixed = np.full(p, costs.stage_fixed_bytes.get(variant, 0.0))
    fixed[0] += costs.first_stage_fixed_bytes[variant]
    fixed[p - 1] += costs.last_stage_fixed_bytes[variant]
    inflight = np.array([option.inflight_microbatches(p, j, ctx.shape.microbatches) for j in range(p)])
    return fixed, costs.activation_bytes_per_layer * inflight + costs.layer_state_bytes[variant]


def min_memory_gib(ctx: ShapeContext) -> float:
    """Smallest per-GPU memory the shape can need: best schedule and variant, balanced layers."""
    per_stage = math.ceil(ctx.instance.model_spec.layers / ctx.shape.pp)
    needs = (
        float(np.max(fixed + per_stage * per_layer))
        for o in ctx.options for v in ctx.variants for fixed, per_layer in [stage_memory(ctx, o, v)]
    )
    return min(needs) / 2**30


def attainable_options(ctx: ShapeContext) -> list[ScheduleOption]:
    """Schedule options whose layer granularity g can be met: L a multiple of g and at least g layers per stage."""
    layers, p = ctx.instance.model_spec.layers, ctx.shape.pp
    return [o for o in ctx.options if layers % o.layer_granularity == 0 and layers >= o.layer_granularity * p]


def admissible_pairs(ctx: ShapeContext) -> list[tuple[ScheduleOption, DPVariant]]:
    """(option, variant) pairs that can hold the model: the option's layer granularity g must be attainable
    (L a multiple of g, at least g layers per stage), and per stage the layers that fit on the largest HBM must
    be at least one and sum to at least L."""
    layers, p = ctx.instance.model_spec.layers, ctx.shape.pp
    hbm = max(gpu.hbm_usable_bytes for gpu in ctx.costs.per_gpu_type.values())
    pairs = []
    for option in attainable_options(ctx):
        for variant in ctx.variants:
            fixed, per_layer = stage_memory(ctx, option, variant)
            room = np.floor(np.maximum(hbm - fixed, 0.0) / per_layer)
            if room.min() >= 1 and np.minimum(room, layers - p + 1).sum() >= layers:
                pairs.append((option, variant))
    return pairs
