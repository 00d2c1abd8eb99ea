"""The iteration objective's intra-building DP term: a calibrated curve of a stage's layers, end to end."""

from __future__ import annotations

import pyomo.environ as pyo
import pytest

from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.formulation.piecewise import formulation
from scaleacross_milp.milp.highs import HighsModel, polish, solve_milp
from scaleacross_milp.milp.price import fixed_layout_model
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Layout, Shape
from scaleacross_milp.spec.search import DPMode, Schedule

HALL = [{"name": "A", "gpus": 16, "gpu_type": "h100"}]


def test_ddp_sync_is_the_calibrated_curve_at_the_chosen_layers(tiny):
    # TP4 PP2 DP2 on 16 H100s under DDP: one all-reduce of each chunk's whole gradient buffer, priced by the
    # default profile's measured all-reduce table, whose curve over the layer count is not convex.
    instance = tiny(buildings=HALL, global_batch_sequences=8,
                    search={"dp_modes": ["ddp"], "schedules": ["1f1b", "interleaved"], "interleave_chunks": [2]})
    ctx = shape_context(instance, Shape(tp=4, pp=2, dp=2, micro_batch=1, microbatches=4),
                        route_table(instance.topology))
    sync = ctx.gpu(ctx.buildings[0]).dp_intra[ctx.variants[0]]
    curves = {c: ctx.dp_sync_curve(ctx.buildings[0], ctx.variants[0], c) for c in (1, 2)}
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
    gpu = ctx.gpu(ctx.buildings[0])
    lift = [gpu.embedding_dp.dp_sync_s[ctx.variants[0]], gpu.head_dp.dp_sync_s[ctx.variants[0]]]
    assert min(lift) > 0
    pairs = list(zip(layers, lift, strict=True))
    assert pyo.value(m.dpi) == pytest.approx(max(curves[chunks].value_at(n) + e for n, e in pairs), rel=1e-6)
    assert pyo.value(m.dpi) == pytest.approx(max(sync.stage_s(n, chunks) + e for n, e in pairs), rel=0.01)


def test_each_building_prices_dp_on_its_own_fabric(tiny):
    # Three 64-GPU H100 halls; "thin" has 16-GPU pods under 15:1 oversubscription. TP8 PP2 DP4 DDP: a stage's DP
    # group is 4 ranks of 16 GPUs. In a flat hall they all-reduce in one pod; in "thin" each rank is its own pod,
    # so the all-reduce runs over the 4 pods at 1/15 of the bandwidth. A plan held in "flat" pays flat's, not the
    # slowest hall's.
    halls = [{"name": "flat", "gpus": 64, "gpu_type": "h100"}, {"name": "twin", "gpus": 64, "gpu_type": "h100"},
             {"name": "thin", "gpus": 64, "gpu_type": "h100", "pod_gpus": 16, "oversubscription": 15}]
    links = [{"a": "flat", "b": "twin", "capacity_gbit_s": 3200, "distance_km": 1},
             {"a": "twin", "b": "thin", "capacity_gbit_s": 3200, "distance_km": 1}]
    instance = tiny(buildings=halls, links=links, global_batch_sequences=8, search={"dp_modes": ["ddp"]})
    shape = Shape(tp=8, pp=2, dp=4, micro_batch=1, microbatches=2)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    assert ctx.price_groups == {"flat": ["flat", "twin"], "thin": ["thin"]}
    ddp = ctx.variants[0]
    flat, thin = ctx.gpu("flat").dp_intra[ddp], ctx.gpu("thin").dp_intra[ddp]
    comm, nbytes = flat.comm, 1e9
    assert flat.collective_s(nbytes, 0.0) == pytest.approx(comm.time_s("all_reduce", "fabric", 4, nbytes, 1))
    assert thin.collective_s(nbytes, 0.0) == pytest.approx(15 * comm.time_s("all_reduce", "fabric", 4, nbytes, 1))

    stages = [{"stage": j, "layers": 16, "cells_per_building": {"flat": 4}} for j in range(2)]
    layout = Layout(shape=shape, schedule=Schedule.one_f_one_b, dp_mode=DPMode.ddp, stages=stages, pipelines=[
        {"buildings": ["flat", "flat"], "pipelines": 4}])
    _, m = fixed_layout_model(instance, layout, route_table(instance.topology))
    assert solve_milp(HighsModel(m), time_limit_s=30, rel_gap=0.0, threads=1).status == "optimal"
    gpu = ctx.gpu("flat")
    assert pyo.value(m.dpi) == pytest.approx(max(
        flat.stage_s(16) + gpu.embedding_dp.dp_sync_s[ddp], flat.stage_s(16) + gpu.head_dp.dp_sync_s[ddp]), rel=0.01)
    assert pyo.value(m.dpi) < thin.stage_s(16)
