"""Re-gathers an op's predecessor cannot hide (milp.formulation.iteration): FSDP pays them, no-reshard does not."""

from __future__ import annotations

import pyomo.environ as pyo
import pytest

from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import HighsModel, polish, solve_milp
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Shape


def one_hall(tiny, schedule: str, dp_mode: str) -> tuple:
    """Llama 3 8B, TP8 PP2 DP8 (16 + 16 layers) in one 128-GPU hall, 4 microbatches, priced with layers fixed."""
    instance = tiny(buildings=[{"name": "A", "gpus": 128, "gpu_type": "h100"}], global_batch_sequences=32,
                    search={"dp_modes": [dp_mode], "schedules": [schedule]})
    ctx = shape_context(instance, Shape(tp=8, pp=2, dp=8, micro_batch=1, microbatches=4),
                        route_table(instance.topology))
    m = build_model(ctx)
    for j in m.J:
        m.n[j].fix(16)
    highs = HighsModel(m)
    assert solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).status == "optimal"
    polish(highs, m.T, threads=1)
    return ctx, m


def test_zb_v_ops_wait_for_the_gather_the_short_w_before_cannot_hide(tiny):
    # Each re-gather overlaps only the op just before the one that needs it: under ZB-V F follows a W and I follows
    # an F; with a the per-layer all-gather and f, w one layer's F and W, every microbatch of a 16-layer stage loses
    # 16 (max(0, a - f) + max(0, a - w)), and the cycle holds it on top of the slower stage.
    ctx, m = one_hall(tiny, "zb-v", "fsdp")
    gpu = ctx.gpu("A")
    a, layer = next(iter(gpu.gather_s_per_layer.values())), gpu.layer
    wait = 16 * (max(0.0, a - layer.forward_s) + max(0.0, a - layer.backward_weight_s))
    assert wait > 0  # H100 gathers a layer slower than it runs its W
    for j in m.J:
        assert pyo.value(m.gather_wait[j]) == pytest.approx(wait, rel=1e-6)
    assert pyo.value(m.cycle) == pytest.approx(max(pyo.value(m.Cst[j]) for j in m.J) + wait, rel=1e-6)


def test_1f1b_hides_every_gather_behind_the_op_before(tiny):
    # 1F1B alternates F and the fused backward, both longer than a layer's all-gather here: nothing to wait for,
    # so FSDP and FSDP without reshard cost the same pipeline.
    ctx, fsdp = one_hall(tiny, "1f1b", "fsdp")
    gpu = ctx.gpu("A")
    assert next(iter(gpu.gather_s_per_layer.values())) < gpu.layer.forward_s
    assert not hasattr(fsdp, "gather_wait")
    _, kept = one_hall(tiny, "1f1b", "fsdp-no-reshard")
    assert pyo.value(fsdp.Tpipe) == pytest.approx(pyo.value(kept.Tpipe), rel=1e-9)


def test_no_reshard_gathers_once_and_waits_on_none(tiny):
    _, m = one_hall(tiny, "zb-v", "fsdp-no-reshard")
    assert not hasattr(m, "gather_wait")
    _, fsdp = one_hall(tiny, "zb-v", "fsdp")
    assert pyo.value(fsdp.T) > pyo.value(m.T)
