"""The MILP's DP-overlap rows (iteration.add_dp_overlap): Training.overlap_grad_reduce for DDP, and the chunks of
interleaved 1F1B and ZB-V reducing one after another as the replay runs them."""

from __future__ import annotations

import pyomo.environ as pyo
import pytest

from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.generate import Size, generate_instance
from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import HighsModel
from scaleacross_milp.milp.path_cuts import solve_with_cuts
from scaleacross_milp.milp.price import fixed_layout_model, price_layout
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Layout, Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.verify.verifier import verify
from tests.milp import test_formulation_pricing as pricing
from tests.milp.test_formulation_pricing import priced

HALL = [{"name": "A", "gpus": 64, "gpu_type": "h100", "pod_gpus": 16, "oversubscription": 8}]


@pytest.mark.parametrize("overlap", [False, True])
def test_ddp_reduction_hides_behind_stage_0_s_last_backward_only_under_overlap_grad_reduce(tiny, overlap):
    # One hall, PP2, 2 microbatches, DDP on an 8x oversubscribed fabric (a slow all-reduce), 1F1B: with the option
    # on the fused backward I + W of stage 0 hides its share rho = (I + W) / layer of stage 0's time C0; off
    # (Megatron-core's default) the whole reduction follows the last backward.
    instance = tiny(buildings=HALL, global_batch_sequences=8, overlap_grad_reduce=overlap,
                    search={"dp_modes": ["ddp"], "schedules": ["1f1b"]})
    ctx = shape_context(instance, Shape(tp=8, pp=2, dp=4, micro_batch=1, microbatches=2),
                        route_table(instance.topology))
    m = priced(ctx, {(0, "A"): 4, (1, "A"): 4}, [16, 16])
    gpu, variant = ctx.gpu("A"), ctx.variants[0]
    layer = gpu.layer
    stage0 = 16 * layer.total_s + gpu.first_stage_extra.total_s + gpu.p2p_intra_s
    hidden = stage0 * (layer.backward_input_s + layer.backward_weight_s) / layer.total_s if overlap else 0.0
    fixed = max(gpu.embedding_dp.dp_sync_s[variant], gpu.head_dp.dp_sync_s[variant])
    sync = ctx.dp_sync_curve(ctx.buildings[0], variant, 1).value_at(16) + fixed
    assert sync > stage0
    assert pyo.value(m.dp_exposed) == pytest.approx(sync - hidden, rel=1e-6)


def test_with_ddp_and_fsdp_to_choose_only_fsdp_is_credited_the_overlap(tiny, monkeypatch):
    # Option off: FSDP reduce-scatters in its post-backward hooks (overlapped), DDP after the last backward. With
    # both modes in the model and DDP chosen, its row (dp_end >= dpi + dpx - M (1 - w[ddp])) charges the whole
    # reduction although the choice-free floor credits FSDP's overlap.
    instance = tiny(buildings=HALL, global_batch_sequences=8,
                    search={"dp_modes": ["ddp", "fsdp"], "schedules": ["1f1b"]})
    ctx = shape_context(instance, Shape(tp=8, pp=2, dp=4, micro_batch=1, microbatches=2),
                        route_table(instance.topology))
    ddp = next(v for v, variant in enumerate(ctx.variants) if variant.mode is DPMode.ddp)

    def ddp_chosen(context):
        m = build_model(context)
        for v in m.V:
            m.w[v].fix(1 if v == ddp else 0)
        return m

    monkeypatch.setattr(pricing, "build_model", ddp_chosen)
    m = priced(ctx, {(0, "A"): 4, (1, "A"): 4}, [16, 16])
    gpu, variant = ctx.gpu("A"), ctx.variants[ddp]
    fixed = max(gpu.embedding_dp.dp_sync_s[variant], gpu.head_dp.dp_sync_s[variant])
    sync = ctx.dp_sync_curve(ctx.buildings[0], variant, 1).value_at(16) + fixed
    assert pyo.value(m.dp_exposed) == pytest.approx(sync, rel=1e-6)


def hall_layout(instance, schedule: str, chunks: int, mode: str) -> Layout:
    """TP8 PP2 DP4 in one hall, 16 + 16 layers, 8 microbatches."""
    return Layout.model_validate({
        "instance": instance.name, "shape": {"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "microbatches": 8},
        "schedule": schedule, "interleave": chunks, "dp_mode": mode,
        "stages": [{"stage": j, "layers": 16, "cells_per_building": {"A": 4}} for j in range(2)],
        "pipelines": [{"buildings": ["A", "A"], "pipelines": 4}]})


@pytest.mark.parametrize(("schedule", "chunks", "mode"), [("interleaved", 4, "fsdp-no-reshard"),
                                                          ("interleaved", 2, "ddp"), ("zb-v", 1, "fsdp-no-reshard")])
def test_chunked_schedules_expose_the_reduction_the_replay_does(small_instance, schedule, chunks, mode):
    # A slow reduction (8x oversubscribed fabric, 40 % of the step) under schedules whose rank 0 holds several
    # chunks: each chunk reduces once its last backward ends, so the chunks finishing early hide theirs behind
    # the ops that follow (ScheduleOption.reduction_suffixes). The MILP's price is within 2 % of the replay.
    instance = small_instance(HALL, None, {"schedules": [schedule], "interleave_chunks": [max(chunks, 2)],
                                           "dp_modes": [mode]}, gpus=64, batch=32, search_defaults={},
                              overlap_grad_reduce=True)
    layout = hall_layout(instance, schedule, chunks, mode)
    replayed = verify(instance, layout)[0]
    assert replayed.breakdown.exposed_dp_s > 0.2 * replayed.iteration_s
    assert price_layout(instance, layout) == pytest.approx(replayed.iteration_s, rel=0.02)


def test_the_reduction_hides_behind_the_backward_of_the_gpus_that_run_it(small_instance):
    # One stage under FSDP in a hall of A100s beside a hall of B200s: the reduction hides behind the last backward
    # of the A100s that run it. Credited with that backward's time on the B200s (stage 0's time on the fastest type
    # in the cluster), the MILP exposed most of the reduction and priced the layout 6.4 % above its replay.
    halls = [{"name": "A", "gpus": 64, "gpu_type": "a100"}, {"name": "B", "gpus": 64, "gpu_type": "b200"}]
    instance = small_instance(halls, [{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 10}],
                              {"dp_modes": ["fsdp"]}, gpus=128, batch=32, search_defaults={})
    layout = Layout.model_validate({
        "instance": instance.name, "shape": {"tp": 8, "pp": 1, "dp": 8, "micro_batch": 1, "microbatches": 4},
        "schedule": "1f1b", "dp_mode": "fsdp", "stages": [{"stage": 0, "layers": 32, "cells_per_building": {"A": 8}}],
        "pipelines": [{"buildings": ["A"], "pipelines": 8}]})
    assert price_layout(instance, layout) == pytest.approx(verify(instance, layout)[0].iteration_s, rel=0.02)


def test_the_credit_caps_leave_the_pipeline_s_stage_floors_in_place(small_instance):
    # Over A100 and B200 halls the pipeline keeps a choice-free floor per stage (Cst[j] >= the least time over the
    # types) for the relaxation; the DP credit's caps on C[j] once took the same component name, and Pyomo replaced
    # the floors with the caps: every heterogeneous model lost them.
    halls = [{"name": "A", "gpus": 64, "gpu_type": "a100"}, {"name": "B", "gpus": 64, "gpu_type": "b200"}]
    instance = small_instance(halls, [{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 10}],
                              {"dp_modes": ["fsdp"]}, gpus=128, batch=32, search_defaults={})
    ctx = shape_context(instance, Shape(tp=8, pp=2, dp=8, micro_batch=1, microbatches=4),
                        route_table(instance.topology))
    m = build_model(ctx)
    assert list(m.stage_floor) == list(m.J)
    assert len(m.credit_cap) == 3 * len(m.C)  # C[j] <= Cst[j], and C[j] <= stage j's time on each hall holding it


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_a_later_stage_s_reduction_starts_when_its_own_rank_ends(small_instance, schedule):
    # Stages 0-2 in a flat hall, stage 3 in a hall whose pods of 8 sit under 32:1 oversubscription, so stage 3's
    # reduction is the slowest. Rank 3 ends its last backward while the last microbatch's backward still runs down
    # ranks 2, 1 and 0 (lead[3]), and its reduction starts then. Counted from rank 0's end, as every stage's was,
    # the MILP priced these layouts 5.6 % (1F1B) and 2.3 % (ZB-H1) above their replays.
    halls = [{"name": "A", "gpus": 96, "gpu_type": "h100"},
             {"name": "B", "gpus": 32, "gpu_type": "h100", "pod_gpus": 8, "oversubscription": 32}]
    instance = small_instance(halls, [{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 1}],
                              {"schedules": [schedule], "dp_modes": ["fsdp-no-reshard"]}, gpus=128, batch=32,
                              search_defaults={})
    layout = Layout.model_validate({
        "instance": instance.name, "shape": {"tp": 8, "pp": 4, "dp": 4, "micro_batch": 1, "microbatches": 8},
        "schedule": schedule, "dp_mode": "fsdp-no-reshard",
        "stages": [{"stage": j, "layers": 8, "cells_per_building": {hall: 4}} for j, hall in enumerate("AAAB")],
        "pipelines": [{"buildings": ["A", "A", "A", "B"], "pipelines": 4}]})
    replayed = verify(instance, layout)[0]
    assert replayed.breakdown.exposed_dp_s > 0.5 * replayed.iteration_s
    ctx, m = fixed_layout_model(instance, layout, route_table(instance.topology))
    priced_s = solve_with_cuts(HighsModel(m), ctx, time_limit_s=30, rel_gap=0.0, threads=1).incumbent
    assert pyo.value(m.lead[3]) > 0
    assert priced_s == pytest.approx(replayed.iteration_s, rel=0.01)


def test_zb_v_prices_the_reduction_its_second_rank_exposes(small_instance):
    # ZB-V over 4 ranks, DDP reducing behind the backward on a 4x oversubscribed hall, 16k-token sequences (an input
    # backward 2.8 x the weight backward): rank 0 hides its LM-head chunk's reduction behind the 4 I and W of its
    # last chunk, rank 1 its other chunk's behind one W (`reduction_suffixes` of rank 1) and ends a little before
    # rank 0 (`drain_lead`), so rank 1's reduction ends last. From rank 0's credits alone the MILP's exposed DP was
    # 188 ms against the replay's 229 ms (the last reduction's end past the last op's); now 217 ms.
    hall = [{**HALL[0], "oversubscription": 4}]
    instance = small_instance(hall, None, {"schedules": ["zb-v"], "dp_modes": ["ddp"]}, gpus=64, batch=32,
                              search_defaults={}, overlap_grad_reduce=True, seq_len=16384)
    layout = Layout.model_validate({
        "instance": instance.name, "shape": {"tp": 4, "pp": 4, "dp": 4, "micro_batch": 1, "microbatches": 8},
        "schedule": "zb-v", "dp_mode": "ddp",
        "stages": [{"stage": j, "layers": 8, "cells_per_building": {"A": 4}} for j in range(4)],
        "pipelines": [{"buildings": ["A"] * 4, "pipelines": 4}]})
    run = verify(instance, layout)[1]
    ops = [r for r in run.records if r.category.startswith(("forward", "backward"))]
    last = max((r for r in run.records if r.name.startswith("reduce")), key=lambda r: r.finish)
    assert last.track == "p0 x4 rank 1 (A) comm"
    ctx, m = fixed_layout_model(instance, layout, route_table(instance.topology))
    assert solve_with_cuts(HighsModel(m), ctx, time_limit_s=30, rel_gap=0.0, threads=1).status == "optimal"
    assert pyo.value(m.dp_exposed) == pytest.approx(last.finish - max(r.finish for r in ops), rel=0.08)


def test_one_suffix_would_overprice_interleaving(small_instance, monkeypatch):
    # The same hall under interleaved 1F1B with 4 chunks: crediting only the last chunk-backward's window to the
    # whole reduction, as one chunk would, prices it more than 3 % above the replay.
    instance = small_instance(HALL, None, {"schedules": ["interleaved"], "interleave_chunks": [4],
                                           "dp_modes": ["fsdp-no-reshard"]}, gpus=64, batch=32, search_defaults={})
    layout = hall_layout(instance, "interleaved", 4, "fsdp-no-reshard")
    replayed = verify(instance, layout)[0].iteration_s
    monkeypatch.setattr(ScheduleOption, "reduction_suffixes", lambda self, p, layer: (
        (1.0, (layer.backward_input_s + layer.backward_weight_s) / layer.total_s),))
    assert price_layout(instance, layout) > 1.03 * replayed


TWO_HALLS = [{"name": name, "gpus": 64, "gpu_type": "h100", "pod_gpus": 16, "oversubscription": 8} for name in "AB"]


@pytest.mark.parametrize("chunks", [2, 4])
def test_interleaved_chunks_cross_while_the_next_one_reduces(small_instance, chunks):
    # DP-out over two halls (4 pipelines each, TP8 PP2, 2 microbatches, FSDP without resharding, 400 Gb/s): each
    # chunk's cross-building part runs while the next chunk reduces inside its hall (a two-stage flow). Priced as
    # one block, every intra-building part and then every cross-building one, the MILP was 14 % (2 chunks) and 24 %
    # (4 chunks) above the replay.
    instance = small_instance(TWO_HALLS, [{"a": "A", "b": "B", "capacity_gbit_s": 400, "distance_km": 10,
                                           "transports": ["spray_selective_repeat"]}],
                              {"schedules": ["interleaved"], "interleave_chunks": [chunks],
                               "dp_modes": ["fsdp-no-reshard"]}, gpus=128, batch=16, search_defaults={})
    layout = Layout.model_validate({
        "instance": instance.name, "shape": {"tp": 8, "pp": 2, "dp": 8, "micro_batch": 1, "microbatches": 2},
        "schedule": "interleaved", "interleave": chunks, "dp_mode": "fsdp-no-reshard",
        "stages": [{"stage": j, "layers": 16, "cells_per_building": {"A": 4, "B": 4}} for j in range(2)],
        "pipelines": [{"buildings": ["A", "A"], "pipelines": 4}, {"buildings": ["B", "B"], "pipelines": 4}]})
    replayed = verify(instance, layout)[0]
    assert replayed.breakdown.exposed_dp_s > 0.5 * replayed.iteration_s
    assert price_layout(instance, layout) == pytest.approx(replayed.iteration_s, rel=0.03)


def test_the_embedding_s_reduction_is_exposed_with_rank_0_s_last_chunk_under_interleaving():
    # Generated medium seed 129: Llama 3 8B, TP 4 PP 4 DP 56, interleaved v = 4 (two layers per chunk), 4 microbatches,
    # FSDP without reshard, whole pipelines in two halls. Rank 0 reduces its last chunk, virtual stage 0, after the
    # step's last backward: 19.4 ms with the 128k-token embedding's collective, 7.9 ms for each other chunk. Priced as
    # a quarter of the stage's reduction, the plan was 9.4 % below its replay.
    instance = generate_instance(129, Size.medium)
    halls = {"s1-b6": 30, "s1-b7": 26}
    layout = Layout.model_validate({
        "instance": instance.name, "schedule": "interleaved", "interleave": 4, "dp_mode": "fsdp-no-reshard",
        "shape": {"tp": 4, "pp": 4, "dp": 56, "micro_batch": 2, "microbatches": 4},
        "stages": [{"stage": j, "layers": 8, "cells_per_building": halls} for j in range(4)],
        "pipelines": [{"buildings": [hall] * 4, "pipelines": cells} for hall, cells in halls.items()],
        "transports": {"s1-b6-s1-b7": "ecmp_go_back_n"},
    })
    replayed = verify(instance, layout)[0].iteration_s
    assert price_layout(instance, layout) == pytest.approx(replayed, rel=0.04)
