"""The iteration objective's intra-building DP term: a calibrated curve of a stage's layers, end to end."""

from __future__ import annotations

import pyomo.environ as pyo
import pytest

from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.formulation.piecewise import formulation
from scaleacross_milp.milp.highs import HighsModel, polish, solve_milp
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Shape

HALL = [{"name": "A", "gpus": 16, "gpu_type": "h100"}]


def test_ddp_sync_is_the_calibrated_curve_at_the_chosen_layers(tiny):
    # TP4 PP2 DP2 on 16 H100s under DDP: one all-reduce of each chunk's whole gradient buffer, priced by the
    # default profile's measured all-reduce table, whose curve over the layer count is not convex.
    instance = tiny(buildings=HALL, global_batch_sequences=8,
                    search={"dp_modes": ["ddp"], "schedules": ["1f1b", "interleaved"], "interleave_chunks": [2]})
    ctx = shape_context(instance, Shape(tp=4, pp=2, dp=2, micro_batch=1, microbatches=4),
                        route_table(instance.topology))
    sync = ctx.costs.per_gpu_type["h100"].dp_intra[ctx.variants[0]]
    curves = {c: ctx.dp_sync_curve("h100", ctx.variants[0], c) for c in (1, 2)}
    assert all(formulation(points) == "incremental" for points in curves.values())
    assert sync.stage_s(16) > 16 * sync.stage_s(1)  # one collective over the buffer is not 16 per-layer ones

    m = build_model(ctx)
    assert len(m.dpi_0_z) == len(sorted({*curves[1].x, *curves[2].x})) - 2  # one shared system per stage
    highs = HighsModel(m)
    assert solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).status == "optimal"
    polish(highs, m.T, threads=1)
    chunks = ctx.options[next(o for o in m.O if pyo.value(m.u[o]) > 0.5)].chunks
    layers = [round(pyo.value(m.n[j])) for j in m.J]
    # stage 0 also reduces the embedding's gradients, stage 1 the LM head's, each in a collective of its own
    gpu = ctx.costs.per_gpu_type["h100"]
    lift = [gpu.embedding_dp.dp_sync_s[ctx.variants[0]], gpu.head_dp.dp_sync_s[ctx.variants[0]]]
    assert min(lift) > 0
    pairs = list(zip(layers, lift, strict=True))
    assert pyo.value(m.dpi) == pytest.approx(max(curves[chunks].value_at(n) + e for n, e in pairs), rel=1e-6)
    assert pyo.value(m.dpi) == pytest.approx(max(sync.stage_s(n, chunks) + e for n, e in pairs), rel=0.01)
