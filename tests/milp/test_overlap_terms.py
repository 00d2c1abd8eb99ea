"""The MILP's DP-overlap rows (iteration.add_dp_overlap) read Training.overlap_grad_reduce for DDP."""

from __future__ import annotations

import pyomo.environ as pyo
import pytest

from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
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
