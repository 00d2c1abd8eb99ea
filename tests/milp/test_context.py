"""The shape context's DP-sync curves and the floor the bounds read from them."""

from __future__ import annotations

import numpy as np
import pytest

from scaleacross_milp.milp.context import shape_context
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
