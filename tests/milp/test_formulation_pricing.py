"""What one shape's MILP charges for a fixed plan, term by term, on tiny hand-computable cases."""

from __future__ import annotations

import pyomo.environ as pyo
import pytest

from scaleacross_milp.costmodel.network import fastest_nic_byte_s, link_efficiency
from scaleacross_milp.milp.context import ShapeContext, shape_context
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import HighsModel, polish, solve_milp
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Layout, Shape
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.workload import build_workload

GB = 1e9
HALLS = [{"name": "A", "gpus": 24, "gpu_type": "h100"}, {"name": "B", "gpus": 24, "gpu_type": "h100"}]
LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 20}]


def priced(ctx: ShapeContext, cells: dict[tuple[int, str], int], layers: list[int]) -> pyo.ConcreteModel:
    """The shape's MILP with stage cells and layers fixed (one schedule, DP variant and transport each), solved."""
    m = build_model(ctx)
    for j in m.J:
        m.n[j].fix(layers[j])
        for k in m.K:
            m.x[j, k].fix(cells.get((j, k), 0))
            m.y[j, k].fix(1 if cells.get((j, k), 0) else 0)
    highs = HighsModel(m)
    assert solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).status == "optimal"
    polish(highs, m.T, threads=1)
    return m


@pytest.fixture
def halls(tiny):
    """Llama 3 8B (32 layers) with TP8 PP2 DP2 under DDP and 1F1B over two 24-GPU halls (3 cells each)."""
    instance = tiny(buildings=HALLS, links=LINK, global_batch_sequences=8,
                    search={"dp_modes": ["ddp"], "schedules": ["1f1b"]})
    return shape_context(instance, Shape(tp=8, pp=2, dp=2, micro_batch=1, microbatches=4),
                         route_table(instance.topology))


@pytest.mark.parametrize("first_layers", [1, 4, 20])
def test_cross_building_dp_volume_uses_the_stage_s_own_layers(halls, first_layers):
    # Stage 0 split one cell per hall, stage 1 whole in A: only stage 0's DDP all-reduce crosses. Each hall owns
    # half of stage 0's state (D = 2): it sends its half to the other (gather) and the other's half of its own
    # gradients (reduce), i.e. one full copy of stage 0's gradients per direction: n0 g + embedding.
    m = priced(halls, {(0, "A"): 1, (0, "B"): 1, (1, "A"): 2}, [first_layers, 32 - first_layers])
    costs = halls.costs
    expected = (first_layers * costs.grad_bytes_per_layer_per_cell + costs.grad_bytes_fixed_first) / GB
    assert pyo.value(m.dp[0, 1]) == pytest.approx(expected, rel=1e-6)
    assert pyo.value(m.dp[0, -1]) == pytest.approx(expected, rel=1e-6)


def test_single_microbatch_dp_out_exposes_the_whole_cross_building_reduction(tiny):
    # One stage (PP1), one microbatch, one cell per hall over a thin 1,500 km link: the backward that could hide
    # the reduction is over before it starts, so the whole cross-building all-reduce (one copy of the model's
    # gradients per direction, embedding and LM head included) is exposed at the link's speed.
    link = [{"a": "A", "b": "B", "capacity_gbit_s": 100, "distance_km": 1500}]
    halls = [{"name": "A", "gpus": 8, "gpu_type": "h100"}, {"name": "B", "gpus": 8, "gpu_type": "h100"}]
    instance = tiny(buildings=halls, links=link, global_batch_sequences=2,
                    search={"dp_modes": ["ddp"], "schedules": ["1f1b"]})
    ctx = shape_context(instance, Shape(tp=8, pp=1, dp=2, micro_batch=1, microbatches=1),
                        route_table(instance.topology))
    m = priced(ctx, {(0, "A"): 1, (0, "B"): 1}, [32])
    costs = ctx.costs
    copy = (32 * costs.grad_bytes_per_layer_per_cell + costs.grad_bytes_fixed_first + costs.grad_bytes_fixed_last)
    transport = next(t for t in ctx.routes.links[0].transports if pyo.value(m.z[0, t]) > 0.5)
    link = ctx.routes.links[0]  # one cell (8 GPUs x queue pairs connections) per hall: a lone unit's efficiency
    nic, qp = fastest_nic_byte_s([instance.gpu_types["h100"]]), link.queue_pairs_per_connection
    seconds = copy / (link.capacity_byte_s * link_efficiency(link, transport, 8 * qp, nic / qp))
    assert pyo.value(m.dp[0, 1]) == pytest.approx(copy / GB, rel=1e-6)
    assert pyo.value(m.dp_exposed) == pytest.approx(seconds, rel=1e-6)


@pytest.mark.parametrize(("schedule", "final"), [("1f1b", "IW"), ("zb-h1", "W")])
def test_dp_overlap_is_stage_0_s_op_that_finalises_its_gradients(tiny, schedule, final):
    # One hall, PP2, 2 microbatches, DDP on an 8x oversubscribed fabric (a slow all-reduce): only the backward op
    # that finalises stage 0's gradients hides the reduction, I + W under 1F1B, W alone under ZB-H1.
    hall = [{"name": "A", "gpus": 64, "gpu_type": "h100", "pod_gpus": 16, "oversubscription": 8}]
    instance = tiny(buildings=hall, global_batch_sequences=8, overlap_grad_reduce=True,
                    search={"dp_modes": ["ddp"], "schedules": [schedule]})
    ctx = shape_context(instance, Shape(tp=8, pp=2, dp=4, micro_batch=1, microbatches=2),
                        route_table(instance.topology))
    m = priced(ctx, {(0, "A"): 4, (1, "A"): 4}, [16, 16])
    gpu = ctx.gpu("A")
    layer, first = gpu.layer, gpu.first_stage_extra
    stage0 = 16 * layer.total_s + first.total_s + gpu.p2p_intra_s  # rank 0 sends forwards only
    share = {"IW": layer.backward_input_s + layer.backward_weight_s, "W": layer.backward_weight_s}[final]
    # the MILP's curve of IntraDPSync.stage_s, plus the slower of the two stages' own collectives of the embedding
    # (stage 0) and LM head (stage 1)
    variant = ctx.variants[0]
    fixed = max(gpu.embedding_dp.dp_sync_s[variant], gpu.head_dp.dp_sync_s[variant])
    sync = ctx.dp_sync_curve(ctx.buildings[0], variant, 1).value_at(16) + fixed
    assert fixed > 0 and sync > stage0 * share / layer.total_s > 0
    assert pyo.value(m.dp_exposed) == pytest.approx(sync - stage0 * share / layer.total_s, rel=1e-6)


def test_zb_v_prices_the_lm_head_on_rank_0_as_the_replay_runs_it(tiny):
    # Issue 12's repro: Llama 3 8B, TP8 PP4 DP2, ZB-V, 2 layers on an A100 rank 0 and 10 on each B200 rank. ZB-V's
    # V map runs virtual stage 2p - 1 (LM head and loss) on rank 0 with the embedding, so stage 0's time per
    # microbatch is what the replay's rank 0 runs: its two chunks' ops and the sends that leave the rank (the
    # forward of virtual stage 0 to rank 1, the backward of virtual stage 7 to rank 1); its memory and gradients
    # hold the head too, and the last stage holds none of it.
    instance = tiny(buildings=[{"name": "slow", "gpus": 16, "gpu_type": "a100"},
                               {"name": "fast", "gpus": 48, "gpu_type": "b200"}],
                    links=[{"a": "slow", "b": "fast", "capacity_gbit_s": 3200, "distance_km": 5}],
                    global_batch_sequences=32,
                    search={"schedules": ["zb-v"], "dp_modes": ["ddp"]})
    shape = Shape(tp=8, pp=4, dp=2, micro_batch=1, microbatches=16)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    layers = [2, 10, 10, 10]
    m = priced(ctx, {(0, "slow"): 2, (1, "fast"): 2, (2, "fast"): 2, (3, "fast"): 2}, layers)

    stages = [{"stage": j, "layers": n, "cells_per_building": {"slow" if j == 0 else "fast": 2}}
              for j, n in enumerate(layers)]
    layout = Layout(shape=shape.model_dump(), schedule=Schedule.zb_v, dp_mode=DPMode.ddp, stages=stages)
    resolved = resolve(instance, layout)
    rank0, actions = build_workload(instance, resolved).rank("slow", 0), resolved.actions
    sends = sum((s < actions.stages - 1 and actions.rank_of[s + 1] != 0) + (s > 0 and actions.rank_of[s - 1] != 0)
                for s in rank0.stages)
    replayed = sum(stage.ops.total_s for stage in rank0.stages.values()) + sends * rank0.send_s
    a100 = ctx.gpu("slow")
    assert sends == 2 and sorted(rank0.stages) == [0, 7]
    assert pyo.value(m.Cst[0]) == pytest.approx(replayed, rel=1e-6)
    assert pyo.value(m.Cst[0]) == pytest.approx(2 * a100.layer.total_s + a100.first_stage_extra.total_s
                                                + a100.last_stage_extra.total_s + 2 * a100.p2p_intra_s, rel=1e-6)
    costs, variant = ctx.costs, ctx.variants[0]
    state = [pyo.value(m.state[j]) * GB for j in (0, 3)]
    assert state[0] == pytest.approx(2 * costs.layer_state_bytes[variant] + costs.first_stage_fixed_bytes[variant]
                                     + costs.last_stage_fixed_bytes[variant], rel=1e-6)
    assert state[1] == pytest.approx(10 * costs.layer_state_bytes[variant], rel=1e-6)
