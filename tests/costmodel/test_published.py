"""Predicted vs published (Korthikanti et al. 2022 Table 5, A100): GPT-3 175B, TP8 PP8 interleave 3,
64 microbatches of 1 x 2048 tokens. Iteration = (m + (p-1)/v) * layers/p * layer time + head (exposed)."""

import pytest

from scaleacross_milp.costmodel.build import build_shape_costs
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from tests.costs import sole

A100 = dict(peak_dense_tflops={"fp16": 312}, hbm_gib=80, hbm_tbyte_s=2.0, nvlink_gbyte_s=230, nic_gbit_s=200)


@pytest.mark.parametrize(("recompute", "published_s"), [("full", 18.13), ("selective", 13.75)])
def test_gpt175b_iteration_time(recompute, published_s, gpt175b):
    inst = Instance.model_validate(
        dict(
            name="k",
            model=gpt175b,
            training=dict(seq_len=2048, global_batch_sequences=64, precision="fp16", recompute=recompute,
                          attention="materialized"),
            gpu_types={"a100": A100},
            topology=dict(buildings=[dict(name="b", gpus=64, gpu_type="a100")]),
        )
    )
    shape = Shape(tp=8, pp=8, dp=1, micro_batch=1, microbatches=64)
    g = sole(build_shape_costs(inst, shape, [DPVariant(DPMode.ddp)]))
    per_mb = 96 / 8 * g.layer.total_s
    predicted = (64 + 7 / 3) * per_mb + 64 * g.last_stage_extra.total_s
    assert predicted == pytest.approx(published_s, rel=0.08)
