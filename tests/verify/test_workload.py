"""Per-op costs come from the costmodel: the TP/CP/EP split adds up to the costmodel's layer communication."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleacross_milp.costmodel.costs import DPVariant, build_shape_costs
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.verify.layercomm import layer_comm_split

ROOT = Path(__file__).resolve().parents[2]
H100 = {"peak_dense_tflops": {"bf16": 989}, "hbm_gib": 79.6, "hbm_tbyte_s": 3.35, "nvlink_domain_gpus": 8,
        "nvlink_gbyte_s": 370, "nic_gbit_s": 400}


@pytest.mark.parametrize(("model", "shape"), [
    ("llama3-8b", Shape(tp=4, cp=2, pp=1, dp=4, micro_batch=1, microbatches=4)),
    ("mixtral-8x7b", Shape(tp=2, ep=4, pp=1, dp=4, micro_batch=1, microbatches=4)),
])
def test_comm_split_adds_up_to_costmodel(model, shape):
    instance = Instance.model_validate({
        "name": "t", "model": json.loads((ROOT / "models" / f"{model}.json").read_text()),
        "training": {"seq_len": 8192, "global_batch_sequences": 16}, "gpu_types": {"h100": H100},
        "topology": {"buildings": [{"name": "A", "gpus": 64, "gpu_type": "h100"}]},
    })
    gpu = build_shape_costs(instance, shape, [DPVariant(DPMode.ddp)]).per_gpu_type["h100"]
    split = layer_comm_split(instance, shape, instance.gpu_types["h100"])
    assert split.tp_cp.total_s + split.ep.total_s == pytest.approx(gpu.layer_comm_s, rel=1e-12)
    assert (split.ep.total_s > 0) == (model == "mixtral-8x7b")
