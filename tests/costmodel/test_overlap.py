"""Communication overlap options (Training.tp_comm_overlap, overlap_grad_reduce) in the cost model."""

import pytest
from pydantic import ValidationError

from scaleacross_milp.costmodel import compute
from scaleacross_milp.costmodel.build import build_shape_costs, instance_tables
from scaleacross_milp.costmodel.comm import AlphaBetaModel, tp_comm
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.spec.hardware import GPUType, Precision
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.training import Training
from tests.costmodel.conftest import make_instance
from tests.costs import sole

H100 = GPUType(peak_dense_tflops={"bf16": 989}, hbm_gib=80, hbm_tbyte_s=3.35, nvlink_gbyte_s=370)


def test_tp_overlap_exposes_per_op_what_its_gemm_cannot_cover():
    m = AlphaBetaModel.from_gpu(H100)
    # S = 37 MB over 4 NVLink ranks: 3/4 x 37e6 / 370e9 = 75 us + 13 us floor + 3 x 1 us = 91 us each
    ag, rs = m.time_s("all_gather", "nvlink", 4, 37e6), m.time_s("reduce_scatter", "nvlink", 4, 37e6)
    assert ag == pytest.approx(91e-6) and rs == pytest.approx(91e-6)
    qkv, proj, fc1, fc2 = 100e-6, 40e-6, 200e-6, 90e-6
    off = tp_comm(m, "nvlink", 4, 37e6, False)
    on = tp_comm(m, "nvlink", 4, 37e6, False, gemm_s=(qkv, proj, fc1, fc2))
    assert off.forward_s == pytest.approx(4 * 91e-6) and off.backward_input_s == pytest.approx(4 * 91e-6)
    # forward: ag-QKV 0, rs-proj 51 us, ag-FC1 0, rs-FC2 1 us; backward: ag-proj 51, rs-QKV 0, ag-FC2 1, rs-FC1 0
    assert on.forward_s == pytest.approx(52e-6)
    assert on.backward_input_s == pytest.approx(52e-6)
    full = tp_comm(m, "nvlink", 4, 37e6, True, gemm_s=(qkv, proj, fc1, fc2))
    assert full.backward_input_s == pytest.approx(104e-6)  # the recomputed forward exposes its share again


def test_tp_gemm_flops_split_the_layers_projection_and_ffn_gemms(llama8b: ModelSpec):
    tokens = 8192
    qkv, proj, fc1, fc2 = compute.tp_gemm_flops(llama8b, tokens, False)
    h, d = 4096, 128
    assert qkv == 2 * tokens * h * (32 + 16) * d and proj == 2 * tokens * 32 * d * h
    assert fc1 == 2 * 2 * tokens * h * 14336 and fc2 == 2 * tokens * h * 14336  # SwiGLU: FC1 holds gate and up
    assert qkv + proj == compute.attention_matmul_flops(llama8b, tokens)
    assert fc1 + fc2 == compute.ffn_flops(llama8b, tokens, False)


def _tp_overlap(instance: Instance, on: bool) -> Instance:
    return instance.model_copy(update={"training": instance.training.model_copy(update={"tp_comm_overlap": on})})


def test_tp_overlap_lowers_the_layer_by_exactly_the_hidden_tp_comm():
    instance = make_instance()
    shape = Shape(tp=8, pp=1, dp=128, micro_batch=1, microbatches=2)
    variants = [DPVariant(DPMode.ddp)]
    off = sole(build_shape_costs(instance, shape, variants))
    on = sole(build_shape_costs(_tp_overlap(instance, True), shape, variants))
    hidden_f = off.tp_cp_comm.forward_s - on.tp_cp_comm.forward_s
    hidden_b = off.tp_cp_comm.backward_input_s - on.tp_cp_comm.backward_input_s
    assert hidden_f > 0 and hidden_b > 0
    assert on.layer.forward_s == pytest.approx(off.layer.forward_s - hidden_f)
    assert on.layer.backward_input_s == pytest.approx(off.layer.backward_input_s - hidden_b)
    assert on.layer.backward_weight_s == off.layer.backward_weight_s
    # Llama 3 8B at TP 8, 8,192 tokens (S = T h beta = 64 MiB): the FFN GEMMs (FC1 2 T h 2f / 8, FC2 2 T h f / 8)
    # outlast their collectives; QKV (2 T h 1.5h / 8, GQA) and the output projection (2 T h^2 / 8) do not
    comm, gpu = instance_tables(instance).comm["h100"], instance.gpu_types["h100"]
    ag, rs = (comm.time_s(c, "nvlink", 8, 8192 * 4096 * 2) for c in ("all_gather", "reduce_scatter"))
    qkv, proj = (compute.flops_time_s(f / 8, gpu, Precision.bf16, 4096, 8)
                 for f in (2 * 8192 * 4096 * 6144, 2 * 8192 * 4096 * 4096))
    ffn = compute.flops_time_s(2 * 8192 * 4096 * 14336 / 8, gpu, Precision.bf16, 4096, 8)
    assert min(ag, rs) > qkv > proj and ffn > max(ag, rs)
    assert on.tp_cp_comm.forward_s == pytest.approx(ag - qkv + rs - proj)
    assert on.tp_cp_comm.backward_input_s == pytest.approx(ag - proj + rs - qkv)


def test_overlap_options_default_off_and_tp_overlap_needs_sequence_parallel():
    training = Training(seq_len=2048, global_batch_sequences=8)
    assert not training.tp_comm_overlap and not training.overlap_grad_reduce
    with pytest.raises(ValidationError, match="sequence_parallel"):
        Training(seq_len=2048, global_batch_sequences=8, sequence_parallel=False, tp_comm_overlap=True)
    schema = Instance.model_json_schema()["$defs"]["Training"]["properties"]  # what `scaleacross-milp schema` prints
    for option in ("tp_comm_overlap", "overlap_grad_reduce"):
        assert schema[option]["default"] is False and "Megatron" in schema[option]["description"]
