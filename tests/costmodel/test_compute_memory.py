from functools import partial

import pytest

from scaleacross_milp.costmodel import compute, memory
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.spec.hardware import GPUType, Precision
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.training import AttentionKernel, Kernels, Recompute, Training


def test_dense_layer_flops_by_hand(llama8b):
    # T = 1*8192; QKV+out = 4096*(2*32*128 + 2*8*128) = 4096*10240 = 41,943,040 params
    # FFN = 3*4096*14336 = 176,160,768 params -> matmul fwd = 2*8192*218,103,808 = 3.5734e12
    # core = 4*8192*8192*32*128 = 2.7488e11
    f = compute.layer_flops(llama8b, 1, 8192, Recompute.none)
    matmul = 2 * 8192 * (4096 * 10240 + 3 * 4096 * 14336)
    core = 4 * 8192 * 8192 * 32 * 128
    assert f.forward == pytest.approx(matmul + core)
    assert f.backward_weight == pytest.approx(matmul)
    assert f.backward_input == pytest.approx(matmul + 2 * core)


def test_recompute_adds_forward(llama8b):
    none = compute.layer_flops(llama8b, 1, 8192, Recompute.none)
    sel = compute.layer_flops(llama8b, 1, 8192, Recompute.selective)
    full = compute.layer_flops(llama8b, 1, 8192, Recompute.full)
    core = 4 * 8192 * 8192 * 32 * 128
    assert sel.backward_input - none.backward_input == pytest.approx(core)
    assert full.backward_input - none.backward_input == pytest.approx(none.forward)


@pytest.mark.parametrize(("shape", "eager", "fused"), [
    # GQA, SwiGLU: h 64, a 4, g 2, d 16, f 128. eager 84h + 20(a+g)d + 4(a+g)d + 10f = 5376 + 1920 + 384 + 1280;
    # fused 20h + 4(a+g)d + 6f = 1280 + 384 + 768
    (dict(hidden=64, heads=4, kv_heads=2, ffn_hidden=128), 8960, 2432),
    # MHA (no repeat_kv), GeLU (one kernel, 4f either way): eager 5376 + 2560 + 1024; fused 1280 + 512 + 1024
    (dict(hidden=64, heads=4, kv_heads=4, ffn_hidden=256, gated_ffn=False), 8960, 2816),
])
def test_elementwise_bytes_per_token_by_hand(shape, eager, fused):
    model = ModelSpec(name="m", layers=2, vocab=100, **shape)
    assert compute.elementwise_bytes_forward(model, 3, kernels=Kernels.eager) == 3 * eager
    assert compute.elementwise_bytes_forward(model, 3, kernels=Kernels.fused) == 3 * fused
    assert compute.elementwise_bytes_forward(model, 3) == 3 * fused  # fused is the default


def test_llama8b_eager_bytes_are_the_docstrings(llama8b):
    assert compute.elementwise_bytes_forward(llama8b, 1, kernels=Kernels.eager) == 610_304
    assert compute.elementwise_bytes_forward(llama8b, 1) == 188_416
    assert compute.sequence_elementwise_bytes_forward(llama8b, 1, Kernels.eager) == 84 * 4096


def test_six_n_tokens_sanity():
    # short sequences make attention negligible: model FLOPs ~ 6 * params(excluding embedding lookup) * tokens
    model = ModelSpec(name="m", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=128256)
    tokens = 128 * 1024
    flops = compute.model_flops_per_iteration(model, 128, 1024)
    params = 32 * memory.layer_params(model).total + memory.head_params(model, 2)
    assert flops == pytest.approx(6 * params * tokens, rel=0.03)


def test_moe_layer_uses_active_experts():
    moe = dict(experts=8, top_k=2, expert_ffn_hidden=14336)
    model = ModelSpec(
        name="mx", layers=4, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=32000, moe=moe
    )
    dense = compute.ffn_flops(model, 1000, moe_layer=False)
    sparse = compute.ffn_flops(model, 1000, moe_layer=True)
    assert sparse == pytest.approx(2 * dense + 2 * 1000 * 4096 * 8)  # 2 active experts + router
    p = memory.layer_params(model, moe_layer=True)
    assert p.expert == 8 * 3 * 4096 * 14336


def test_efficiency_falls_with_small_per_gpu_matrices():
    a100 = GPUType(peak_dense_tflops={"bf16": 312}, hbm_gib=80, hbm_tbyte_s=2.039, nvlink_gbyte_s=230)
    eff = partial(compute.gemm_efficiency, a100, Precision.bf16)
    assert eff(8192, 1) > eff(8192, 8) > eff(1024, 8)
    assert eff(10**9, 1) == pytest.approx(0.74, rel=1e-3)  # the A100 layer ceiling of the Megatron-LM fit


def test_activation_bytes_match_korthikanti(gpt175b):
    # GPT-3 175B: MHA, 4h GeLU MLP -> Korthikanti's 34 sbh/t + 5 a s^2 b/t (sequence parallel)
    gpt = gpt175b
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    shape = Shape(tp=t, pp=8, dp=1, micro_batch=b, microbatches=64)

    def act(recompute: Recompute, sp: bool = True, attention: str = "materialized", on: Shape = shape) -> float:
        training = Training(seq_len=s, global_batch_sequences=64, recompute=recompute, sequence_parallel=sp,
                            attention=attention)
        return memory.layer_activation_bytes(gpt, on, training)

    assert act(Recompute.none) == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)))
    assert act(Recompute.selective) == pytest.approx(s * b * h * 34 / t)
    assert act(Recompute.full) == pytest.approx(2 * s * b * h / t)
    cp2 = Shape(tp=t, cp=2, pp=8, dp=1, micro_batch=b, microbatches=64)
    assert act(Recompute.selective, on=cp2) == pytest.approx(s * b * h * 17 / t)
    # without sequence parallelism (Korthikanti eq. 2): sbh(10 + 24/t + 5as/(ht)); full recompute keeps 2sbh
    assert act(Recompute.none, sp=False) == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    assert act(Recompute.full, sp=False) == pytest.approx(2 * s * b * h)
    # a flash kernel never stores the s x s scores
    assert act(Recompute.none, attention="flash") == pytest.approx(s * b * h * 34 / t)


def test_flash_executes_half_the_core_and_streams_no_scores(llama8b):
    core = 4 * 8192 * 8192 * 32 * 128
    materialized = compute.layer_flops(llama8b, 1, 8192, Recompute.selective)
    flash = compute.layer_flops(llama8b, 1, 8192, Recompute.selective, attention=AttentionKernel.flash)
    assert materialized.forward - flash.forward == pytest.approx(core / 2)
    assert materialized.backward_input - flash.backward_input == pytest.approx(3 * core / 2)  # 2 bwd + recompute
    assert compute.attention_score_bytes_forward(llama8b, 8192, 8192, AttentionKernel.flash) == 0
    assert compute.attention_score_bytes_forward(llama8b, 8192, 8192, AttentionKernel.materialized) == (
        13 * 32 * 8192 * 8192)


def test_fsdp_state_is_ddp_over_n(llama8b):
    training = Training(seq_len=8192, global_batch_sequences=64)
    shape = Shape(tp=2, cp=2, pp=1, dp=16, micro_batch=1, microbatches=4)
    ddp = memory.layer_state_bytes(llama8b, shape, training, DPVariant(DPMode.ddp))
    fsdp = memory.layer_state_bytes(llama8b, shape, training, DPVariant(DPMode.fsdp))
    hsdp = memory.layer_state_bytes(llama8b, shape, training, DPVariant(DPMode.hsdp, 4))
    nors = memory.layer_state_bytes(llama8b, shape, training, DPVariant(DPMode.fsdp_no_reshard))
    assert fsdp == pytest.approx(ddp / 32)  # N = dp*cp
    assert hsdp == pytest.approx(ddp / 8)
    per_gpu = memory.layer_params(llama8b).total / 2
    assert ddp == pytest.approx(per_gpu * 18)  # 2 + 4 + 12 bytes
    assert nors == pytest.approx(per_gpu * (2 + 16 / 32))
    assert memory.fsdp_transient_bytes(llama8b, shape, training, DPVariant(DPMode.fsdp)) > 0
    assert memory.fsdp_transient_bytes(llama8b, shape, training, DPVariant(DPMode.ddp)) == 0


@pytest.mark.parametrize("precision, width", [("bf16", 2), ("fp8", 2), ("tf32", 4), ("fp32", 4)])
def test_four_byte_precisions_store_and_send_four_byte_elements(gpt175b, precision, width):
    # tf32 / fp32 training keeps fp32 weights, activations and messages: Korthikanti's 16-bit counts scale by
    # beta / 2, and the last stage's logits take beta + 4 bytes each.
    s, b, h, t = 2048, 1, 12288, 8
    shape = Shape(tp=t, pp=8, dp=1, micro_batch=b, microbatches=64)
    training = Training(seq_len=s, global_batch_sequences=64, recompute=Recompute.selective, precision=precision)
    assert training.bytes_per_element == width
    assert memory.layer_activation_bytes(gpt175b, shape, training) == pytest.approx(s * b * h * 34 / t * width / 2)
    logits = memory.logits_bytes(gpt175b, shape, s, training.bytes_per_element)
    assert logits == pytest.approx(s * gpt175b.vocab / t * (width + 4))
