"""Compute per GPU generation and FP8 training (Transformer Engine style), against hand-computed figures.

Published numbers used by hand below: MAMF / peak (Bekman's table) A100 BF16 0.869, H100 BF16 0.803 and FP8 0.709,
B200 BF16 0.776 and FP8 0.763; the A100 layer ceiling 0.74 of the Megatron-LM fit; flash attention A100 0.52,
H100 0.44, B200 0.50 (costmodel/compute.py states their sources)."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel import compute, memory
from scaleacross_milp.costmodel.build import build_shape_costs
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.spec.hardware import Architecture, GPUType, Precision
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.training import AttentionKernel, Training
from tests.costs import sole

A100 = GPUType(peak_dense_tflops={"bf16": 312}, hbm_gib=80, hbm_tbyte_s=2.039, nvlink_gbyte_s=230)
H100 = GPUType(peak_dense_tflops={"bf16": 989, "fp8": 1979}, hbm_gib=80, hbm_tbyte_s=3.35, nvlink_gbyte_s=370)
B200 = GPUType(peak_dense_tflops={"bf16": 2250, "fp8": 4500}, hbm_gib=180, hbm_tbyte_s=8.0, nvlink_gbyte_s=900)
SHARE = 0.74 / 0.869  # the A100 layer ceiling over A100's MAMF


@pytest.mark.parametrize(("gpu", "generation"), [
    (A100, Architecture.ampere), (H100, Architecture.hopper), (B200, Architecture.blackwell),
    (H100.model_copy(update={"peak_dense_tflops": {"fp8": 1979}}), Architecture.hopper),  # 16-bit = 989.5
    (H100.model_copy(update={"peak_dense_tflops": {"bf16": 645}}), Architecture.hopper),  # the 500 W H100
    (A100.model_copy(update={"peak_dense_tflops": {"tf32": 156}}), Architecture.ampere),  # 16-bit = 312
])
def test_generation_is_inferred_from_the_sixteen_bit_peak(gpu, generation):
    assert gpu.generation is generation


def test_a_given_architecture_selects_its_numbers():
    h100_as_ampere = H100.model_copy(update={"architecture": Architecture.ampere})
    assert compute.gemm_ceiling(h100_as_ampere, Precision.bf16) == pytest.approx(0.74)
    assert compute.gemm_ceiling(H100, Precision.bf16) == pytest.approx(0.803 * SHARE)


@pytest.mark.parametrize(("gpu", "precision", "mamf"), [
    (A100, Precision.bf16, 0.869), (H100, Precision.bf16, 0.803), (H100, Precision.fp8, 0.709),
    (B200, Precision.bf16, 0.776), (B200, Precision.fp8, 0.763),
])
def test_gemm_ceiling_is_the_generations_mamf_times_the_layer_share(gpu, precision, mamf):
    assert compute.gemm_ceiling(gpu, precision) == pytest.approx(mamf * SHARE)


@pytest.mark.parametrize(("gpu", "precision", "half_dim"), [
    (A100, Precision.bf16, 100.0),
    (H100, Precision.bf16, 100 * (989 / 3.35 * 2) / (312 / 2.039 * 2)),   # 192.9
    (H100, Precision.fp8, 100 * (1979 / 3.35 * 1) / (312 / 2.039 * 2)),   # 193.0: twice the FLOPs on 1-byte elements
    (B200, Precision.bf16, 100 * (2250 / 8.0 * 2) / (312 / 2.039 * 2)),   # 183.8
])
def test_gemm_half_dim_follows_the_gpus_ridge(gpu, precision, half_dim):
    assert compute.gemm_half_dim(gpu, precision) == pytest.approx(half_dim)
    x = 4096 / 2
    assert compute.gemm_efficiency(gpu, precision, 4096, 2) == pytest.approx(
        compute.gemm_ceiling(gpu, precision) * x / (x + half_dim))


@pytest.mark.parametrize(("gpu", "flash"), [(A100, 0.52), (H100, 0.44), (B200, 0.50)])
def test_flash_core_runs_at_the_generations_kernel_efficiency(gpu, flash):
    for precision in (Precision.bf16, Precision.fp8):  # fp8 training keeps attention in BF16
        if precision in gpu.peak_dense_tflops:
            t = compute.core_time_s(1e15, gpu, precision, 4096, 1, AttentionKernel.flash)
            assert t == pytest.approx(1e15 / (gpu.peak_dense_tflops[Precision.bf16] * 1e12 * flash))


def _llama8b_on_h100(llama8b, precision: str) -> Instance:
    return Instance.model_validate(dict(
        name="fp8", model=llama8b.model_dump(), gpu_types={"h100": H100.model_dump()},
        training=dict(seq_len=8192, global_batch_sequences=8, precision=precision, recompute="none"),
        topology=dict(buildings=[dict(name="b", gpus=8, gpu_type="h100")])))


def test_fp8_layer_prices_gemms_at_the_fp8_peak_and_attention_in_bf16(llama8b):
    """One Llama 3 8B layer, one microbatch of 8,192 tokens, TP1: forward = GEMMs + flash core + elementwise."""
    shape = Shape(tp=1, pp=1, dp=8, micro_batch=1, microbatches=1)
    gemm = 2 * 8192 * (4096 * 10240 + 3 * 4096 * 14336)  # QKV + output (GQA) and SwiGLU: 3.5734e12 FLOPs
    core = 4 * 8192 * 8192 * 32 * 128 / 2  # causal half executed by the flash kernel
    elementwise = 188_416 * 8192  # fused bytes per token (test_compute_memory)
    hbm = 3.35e12 * 0.80
    ceiling_fp8, half_fp8 = 0.709 * SHARE, 1979 / 3.35 / (312 / 2.039 * 2) * 100
    ceiling_bf16, half_bf16 = 0.803 * SHARE, 989 / 3.35 * 2 / (312 / 2.039 * 2) * 100
    gemm_fp8 = (gemm / (1979e12 * ceiling_fp8 * 4096 / (4096 + half_fp8))
                + gemm * compute.FP8_CAST_BYTES_PER_FLOP_H / 4096 / hbm)
    gemm_bf16 = gemm / (989e12 * ceiling_bf16 * 4096 / (4096 + half_bf16))
    core_bf16 = core / (989e12 * 0.44)
    variant = [DPVariant(DPMode.ddp)]
    fp8 = sole(build_shape_costs(_llama8b_on_h100(llama8b, "fp8"), shape, variant)).layer
    bf16 = sole(build_shape_costs(_llama8b_on_h100(llama8b, "bf16"), shape, variant)).layer
    assert fp8.forward_s == pytest.approx(gemm_fp8 + core_bf16 + elementwise / hbm, rel=1e-9)
    assert bf16.forward_s == pytest.approx(gemm_bf16 + core_bf16 + elementwise / hbm, rel=1e-9)
    assert fp8.backward_weight_s == pytest.approx(gemm_fp8, rel=1e-9)  # weight gradients: GEMMs only
    assert 1.3 < bf16.total_s / fp8.total_s < 1.5  # what NVIDIA's 8-GPU runs show (12.27 s BF16, 9.33 s FP8)


def test_fp8_adds_weight_copies_and_scaling_state(llama8b):
    params = 4096 * 10240 + 2 * 4096 + 3 * 4096 * 14336  # one Llama 3 8B layer: 218,112,000
    scaling = 4 * (1024 + 2) * 3 * 4  # fp32 amax history + scale + inverse, 3 tensors of each of 4 GEMMs
    shape = Shape(tp=2, pp=1, dp=4, micro_batch=1, microbatches=2)
    fp8 = Training(seq_len=8192, global_batch_sequences=8, precision="fp8")
    bf16 = Training(seq_len=8192, global_batch_sequences=8, precision="bf16")
    for variant, held in ((DPVariant(DPMode.ddp), params / 2), (DPVariant(DPMode.fsdp_no_reshard), params / 2),
                          (DPVariant(DPMode.fsdp), params / 2 / 4)):
        extra = (memory.layer_state_bytes(llama8b, shape, fp8, variant)
                 - memory.layer_state_bytes(llama8b, shape, bf16, variant))
        assert extra == pytest.approx(2 * held + scaling)
        assert memory.fp8_layer_bytes(llama8b, shape, bf16, variant) == 0.0
    # activations are the 16-bit ones: FP8 input + FP8 transpose = the 2 bytes of the BF16 input
    assert memory.layer_activation_bytes(llama8b, shape, fp8) == memory.layer_activation_bytes(llama8b, shape, bf16)


def test_moe_layers_scale_each_local_experts_gemms():
    mixtral = ModelSpec(name="mx", layers=4, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=32000,
                        moe=dict(experts=8, top_k=2, expert_ffn_hidden=14336))
    shape = Shape(tp=1, ep=2, pp=1, dp=4, micro_batch=1, microbatches=2)
    assert memory.gemms_per_layer(mixtral, shape) == 2 + 2 * 8 / 2  # QKV, output, 4 local experts x 2
