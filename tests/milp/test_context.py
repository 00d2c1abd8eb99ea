"""The shape context's DP-sync curves and the floor the bounds read from them, and the memory screen on its
buildings' HBM."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scaleacross_milp.generate import Size, generate_instance
from scaleacross_milp.milp.context import (
    admissible,
    hbm_tiers,
    shape_context,
    stage_memory_table,
    stage_room_table,
)
from scaleacross_milp.milp.formulation.build import Floors, build_model
from scaleacross_milp.milp.highs import HighsModel, MILPStatus, solve_milp
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Shape


def test_dp_sync_floor_is_the_least_interpolant_at_or_above_a_layer_count(tiny):
    instance = tiny(buildings=[{"name": "A", "gpus": 16, "gpu_type": "h100"}], global_batch_sequences=8,
                    search={"dp_modes": ["ddp", "fsdp"], "schedules": ["1f1b", "interleaved"],
                            "interleave_chunks": [2]})
    ctx = shape_context(instance, Shape(tp=4, pp=2, dp=2, micro_batch=1, microbatches=4),
                        route_table(instance.topology))
    ddp, fsdp = ctx.variants
    hall = ctx.buildings[0]
    assert ctx.dp_sync_curve(hall, fsdp, 2) is ctx.dp_sync_curve(hall, fsdp, 1)  # per layer: chunks irrelevant
    assert ctx.dp_sync_curve(ctx.buildings[0], ddp, 2) != ctx.dp_sync_curve(ctx.buildings[0], ddp, 1)
    for variant in (ddp, fsdp):
        for chunks in (1, 2):
            curve = ctx.dp_sync_curve(ctx.buildings[0], variant, chunks)
            counts = np.arange(1, 32)
            brute = [min(curve.value_at(m) for m in range(n, 32)) for n in counts]
            assert ctx.dp_sync_floor_s(variant, chunks, counts) == pytest.approx(brute, rel=1e-12)


def test_a_stage_needing_the_larger_hbm_must_find_its_cells_on_those_gpus(tiny):
    # Llama 3 8B under DDP without recompute needs more than an H100's HBM on each GPU of a PP 1 stage: only B200
    # cells can hold it, and the stage's eight TP 2 cells need 16 B200 GPUs
    def instance(b200_gpus: int):
        return tiny(buildings=[{"name": "A", "gpus": b200_gpus, "gpu_type": "b200"},
                               {"name": "B", "gpus": 24, "gpu_type": "h100"}],
                    links=[{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 1}],
                    search={"dp_modes": ["ddp"], "schedules": ["1f1b"]}, recompute="none")

    shape = Shape(tp=2, pp=1, dp=8, micro_batch=1, microbatches=2)
    short = instance(8)
    ctx = shape_context(short, shape, route_table(short.topology))
    largest = admissible(ctx.costs, [(ctx.hbm_bytes, shape.pp)], shape, 32, ctx.options, ctx.variants)
    h100 = pytest.approx(79.6 * 0.92 * 2**30)  # usable HBM: 92 % of 79.6 GiB
    assert largest and hbm_tiers(short, ctx.buildings, shape) == [(ctx.hbm_bytes, 0), (h100, 2)]
    assert ctx.pairs == []
    # the MILP agrees: with every pair the largest HBM admits, no placement fits
    unscreened = shape_context(short, shape, route_table(short.topology), pairs=largest)
    assert solve_milp(HighsModel(build_model(unscreened, Floors(0.0, 0.0, 0.0))), time_limit_s=60, rel_gap=0.0,
                      threads=1).status is MILPStatus.infeasible
    enough = instance(16)
    assert shape_context(enough, shape, route_table(enough.topology)).pairs == largest


def test_a_stage_holds_the_layers_the_memory_rows_let_it_hold_counting_its_moe_layers():
    # Llama 4 Maverick alternates dense and MoE layers from layer 1: the memory rows count e(n) = c ceil(n / 2c) MoE
    # layers in a rank of n layers over c chunks, ceil((n - 1) / 2) on stage 0 under one chunk
    instance = generate_instance(19, Size.medium)
    shape = Shape(tp=2, ep=4, pp=12, dp=20, micro_batch=1, microbatches=47)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    moe = ctx.moe_memory
    assert moe is not None and (moe.pattern.interval, moe.pattern.first) == (2, 1)
    most = instance.model_spec.layers - shape.pp + 1
    counts = np.arange(1, most + 1)
    for hbm in (60 * 2**30, ctx.hbm_bytes):
        rooms = stage_room_table(ctx.costs, hbm, shape, ctx.options, ctx.variants, moe)
        fixed, per_layer = stage_memory_table(ctx.costs, shape, ctx.options, ctx.variants)
        for o, option in enumerate(ctx.options):
            c = option.layer_granularity
            for v, variant in enumerate(ctx.variants):
                for j in range(shape.pp):
                    extra = (moe.activation_bytes * option.inflight_microbatches(shape.pp, j, shape.microbatches)
                             + moe.state_bytes[variant])
                    held = np.array([max(0, math.ceil((n - 1) / 2)) if (j, c) == (0, 1) else c * math.ceil(n / (2 * c))
                                     for n in counts])
                    beyond = np.maximum(0, held - moe.pattern.share * counts)
                    need = fixed[o, v, j] + counts * per_layer[o, v, j] + beyond * extra
                    fitting = counts[need <= hbm]
                    assert min(rooms[o, v, j], most) == (fitting.max() if fitting.size else 0), (option, variant, j)
