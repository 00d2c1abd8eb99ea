"""Cheap necessary conditions and lower bounds per shape, valid for the shape's MILP.

Lower bound: with SC = sum_j Cst[j] >= L tau_min + fixed terms (fastest GPU type) and cycle >= SC / p,
    T >= Tpipe >= (m - beta) cycle + beta SC >= SC ((m - beta) / p + beta),   beta = min_o beta_o,
plus the optimizer step of a stage holding at least L / p layers.
Memory: some (schedule, DP variant) must let every stage hold a layer and all stages together hold L layers on
the largest HBM. Capacity: the buildings must hold p x D stage cells.
"""

from __future__ import annotations

import math

from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.pipeline import stage_time_terms


def lower_bound_s(ctx: ShapeContext) -> float:
    p, mb, layers = ctx.shape.pp, ctx.shape.microbatches, ctx.instance.model_spec.layers
    total = sum(min(stage_time_terms(ctx, j, k)[1] for k in ctx.buildings) for j in range(p))
    total += layers * min(ctx.gpu(k).layer.total_s for k in ctx.buildings)
    beta = min(o.bubble_coefficient(ctx.gpu(ctx.buildings[0]).layer) for o in ctx.options)
    optimizer = layers / p * min(
        gpu.optimizer_s_per_layer[v] for gpu in ctx.costs.per_gpu_type.values() for v in ctx.variants
    )
    return total * ((mb - beta) / p + beta) + optimizer


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


def fits_memory(ctx: ShapeContext) -> bool:
    """Necessary condition: per stage, the layers that fit (best schedule and variant) must sum to L."""
    layers, p = ctx.instance.model_spec.layers, ctx.shape.pp
    hbm = max(gpu.hbm_usable_bytes for gpu in ctx.costs.per_gpu_type.values())
    for option in ctx.options:
        for variant in ctx.variants:
            room = [
                math.floor((hbm - fixed) / per_layer) if hbm > fixed else 0
                for j in range(p) for fixed, per_layer in [_stage_memory(ctx, option, variant, j)]
            ]
            if min(room) >= 1 and sum(min(r, layers - p + 1) for r in room) >= layers:
                return True
    return False
