"""Compute FLOPs and per-GPU compute time of transformer layers, one microbatch.

Notation: T = b*s tokens of one microbatch, h hidden, a heads, d head_dim, g kv_heads, f dense FFN width,
fe expert FFN width, E experts, k top_k, e shared experts, V vocab; nm = 3 matrices if gated (SwiGLU) else 2.
A matmul of an [T, n] by [n, m] matrix costs 2*T*n*m FLOPs.

Forward FLOPs per layer:
  attention projections  2*T*h*(a*d + 2*g*d)  (QKV, GQA)  +  2*T*a*d*h  (output)
  attention core         4*T*s*a*d  (QK^T and AV over the full s x s, as Megatron-LM counts); the time is
                         charged for half of it with a `flash` kernel (causal blocks skipped), the model FLOPs
                         (MFU numerator) always count it whole, as PaLM's MFU does (Chowdhery et al. 2022, app. B)
  dense FFN              2*T*h*f*nm
  MoE FFN                2*T*h*E (router) + (k + e) * 2*T*h*fe*nm (active routed + shared experts)
Backward: every matmul costs its forward again for the input gradient and again for the weight gradient;
the attention core has no weights, so its backward (2x forward) is all backward-input.
Recomputation (done just before the backward, so charged to backward-input): full adds a whole forward,
selective adds the attention-core forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from scaleacross_milp.spec.hardware import Architecture, GPUType, Precision
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.training import AttentionKernel, Kernels, Recompute

# --- efficiency per GPU generation (fractions of the datasheet dense peak) -----------------------------------
# GEMM ceiling: the Maximum Achievable Matmul FLOPS (MAMF) of each generation over its dense peak, measured by a
# brute-force search of matmul shapes (S. Bekman, "Machine Learning Engineering", compute/accelerator/README.md,
# table "Maximum Achievable Matmul FLOPS comparison table", BF16 and FP8 (float8_e4m3fn) parts):
#   A100 SXM  BF16 271.2 / 312  = 86.9 %   (no FP8 tensor cores: an FP8 entry is priced like BF16)
#   H100 SXM  BF16 794.5 / 989  = 80.3 %   FP8 1,402.6 / 1,979 = 70.9 %
#   B200 SXM  BF16 1,745 / 2,250 = 77.6 %  FP8 3,432.5 / 4,500 = 76.3 %
# times GEMM_LAYER_SHARE, the share of that ceiling a layer's matmuls keep in training (bias, dropout, launch gaps,
# kernels the model does not list): 0.74 / 0.869, the A100 layer ceiling fitted on Megatron-LM 2021 Table 1 (grid
# 0.70-0.80 by 0.02 x half-dim 60, 100, 160, 220, least max |error| of the whole replay: mean 3.4 %, max 5.0 %).
# Flash attention, forward + backward as this module counts its FLOPs (forward c, backward 2c; the kernels'
# benchmarks count 3.5c, flash-attention's benchmark_flash_attention.py, so a published fwd+bwd rate R is
# 3/3.5 R here; with separate forward F and backward B rates it is 3 / (1/F + 2.5/B)), causal, head dim 128,
# 8k-16k tokens, over the 16-bit peak (rates read off the papers' bar charts, to about +-5 %):
#   A100  FlashAttention-2 fwd+bwd ~190 TFLOP/s (Dao 2023, FlashAttention-2, fig. "Attention forward + backward
#         speed (A100 80GB SXM4)", causal, head dim 128): 3/3.5 x 190 / 312 = 0.52
#   H100  FlashAttention-3 / cuDNN class (what Transformer Engine and current stacks run): forward ~640, backward
#         ~480 TFLOP/s (Shah et al. 2024, FlashAttention-3, figs. 5 and 7, head dim 128, 8k-16k):
#         3 / (1/640 + 2.5/480) / 989 = 0.44 (FlashAttention-2 on H100, ~370 / ~300, would be 0.33)
#   B200  FlashAttention-4 forward 1,613 TFLOP/s BF16 (Zadouri, Dao et al. 2025, FlashAttention-4, B200, 71 % of
#         peak); no backward figure: taken at H100's backward / forward ratio 480/640, 1,210:
#         3 / (1/1613 + 2.5/1210) / 2250 = 0.50
GEMM_LAYER_SHARE = 0.74 / 0.869
# FP8 GEMMs as Transformer Engine runs them also cast to FP8: per GEMM [T, K] x [K, N] its input (T K elements) in
# forward and its output gradient (T N) in backward are read in BF16 (2 bytes) and written as FP8 with the
# transpose Hopper's FP8 GEMMs need for the other operand layout (1 + 1), 4 bytes per element, amax taken on the
# way; casts fused into a norm or activation (the QKV / FC1 inputs, FC2's) write what the BF16 output would have.
# Left per token and layer: attention-output input 4ad forward, output gradients 4((a+2g)d + 2h + nm f) backward,
# over the GEMMs' 6(h(a+2g)d + adh + nm h f) FLOPs: 40h / 72h^2 = 0.56/h for GPT (a d = h, g = a, f = 4h, nm 2),
# 0.59/h for Llama 3 8B. FP8_CAST_BYTES_PER_FLOP_H = gamma: the HBM bytes per GEMM FLOP times the hidden size,
# priced with the elementwise ops at HBM_EFF (flops_time_s). The derived gamma ~0.57 misses what is not a cast
# (amax reductions across the TP group, scale updates, the FP8 weight casts); gamma is fitted
# (benchmarks/fit_fp8_cast.py: bisection, to 0.01) on the one tuned FP8 row (fidelity.rows.TUNED_ROWS: NVIDIA
# DGX Cloud Llama 3.1 8B FP8 on 8 H100, TP1 CP2 DP4, step 9.33 s, run as it ran: zero1 with overlap_grad_reduce
# and overlap_param_gather), every other number of this section fixed before it; no Blackwell FP8 run was
# available, so B200 takes it unchecked.
FP8_CAST_BYTES_PER_FLOP_H = 1.91


@dataclass(frozen=True)
class KernelEfficiency:
    """One generation's kernel efficiencies, fractions of the dense peak (sources in the comment above)."""

    matmul_16bit: float
    matmul_fp8: float
    flash: float


KERNELS: dict[Architecture, KernelEfficiency] = {
    Architecture.ampere: KernelEfficiency(matmul_16bit=0.869, matmul_fp8=0.869, flash=0.52),
    Architecture.hopper: KernelEfficiency(matmul_16bit=0.803, matmul_fp8=0.709, flash=0.44),
    Architecture.blackwell: KernelEfficiency(matmul_16bit=0.776, matmul_fp8=0.763, flash=0.50),
}
# GEMM efficiency drops when the per-GPU matrix dimension x = hidden / tp shrinks (NVIDIA "Matrix Multiplication
# Background" guide: tile quantisation, wave effects, and memory traffic per FLOP growing as 1/x):
#   eff(x) = ceiling x / (x + x_half),  x_half = GEMM_EFF_HALF_DIM x ridge(GPU, precision) / REFERENCE_RIDGE,
# ridge = peak FLOP/s / HBM bytes/s x bytes per element: the dimension at which a square GEMM's arithmetic intensity
# (2n^3 FLOPs over 3n^2 elements) meets the roofline ridge, so x_half grows with the GPU's FLOPs per byte: 100 on
# the A100 of the fit (312 TFLOP/s, 2.039 TB/s, 2-byte elements), ~190 on H100 at BF16 and at FP8 (twice the
# FLOPs on 1-byte elements), ~185 on B200.
GEMM_EFF_HALF_DIM = 100.0
REFERENCE_RIDGE = 312 / 2.039 * 2
ELEMENT_BYTES: dict[Precision, int] = {Precision.fp8: 1, Precision.bf16: 2, Precision.fp16: 2, Precision.tf32: 4,
                                       Precision.fp32: 4}
# Elementwise ops (norms, residual adds, activation function, RoPE, dropout) are memory-bound: their time is
# bytes / (hbm * HBM_EFF). HBM_EFF ~0.8 is typical achievable streaming bandwidth (STREAM-like copy kernels).
HBM_EFF = 0.80
# A materialized attention core streams its b*a*s*s scores through HBM (fp16/bf16, Megatron-LM's kernels): QK^T
# writes 2 bytes per score, the fused scale-mask-softmax reads 2 and writes 2, dropout reads 2 and writes 2 plus a
# 1-byte mask, AV reads 2: 13 bytes (the tensors of Korthikanti et al. 2022's 5as^2b stored bytes).
SCORE_BYTES_FORWARD = 13.0
# HBM bytes per logit of the loss, (forward, backward). fused: bf16 logits read, fp32 softmax / gradient, 6 each
# way. eager (torchtitan: `cross_entropy(pred.float(), labels)`): forward float() 2+4, log_softmax 4+4 = 14;
# backward nll_loss's zero-filled fp32 gradient 4, log_softmax backward 4+4+4, back to bf16 4+2 = 22.
LOGIT_BYTES: dict[Kernels, tuple[float, float]] = {Kernels.fused: (6.0, 6.0), Kernels.eager: (14.0, 22.0)}


def peak_tflops(gpu: GPUType, precision: Precision) -> float:
    """The GPU's dense peak at `precision`; the 16-bit peak (GPUType.sixteen_bit_tflops) for a 16-bit precision
    the type does not list (the BF16 attention of fp8 training on a type given only its fp8 peak)."""
    if precision in gpu.peak_dense_tflops:
        return gpu.peak_dense_tflops[precision]
    return gpu.sixteen_bit_tflops


def gemm_ceiling(gpu: GPUType, precision: Precision) -> float:
    """GEMM_LAYER_SHARE x the generation's MAMF fraction (FP8 or 16-bit)."""
    kernels = KERNELS[gpu.generation]
    return GEMM_LAYER_SHARE * (kernels.matmul_fp8 if precision is Precision.fp8 else kernels.matmul_16bit)


def gemm_half_dim(gpu: GPUType, precision: Precision) -> float:
    """x_half = GEMM_EFF_HALF_DIM x (peak / HBM bandwidth x element bytes) / REFERENCE_RIDGE."""
    ridge = peak_tflops(gpu, precision) / gpu.hbm_tbyte_s * ELEMENT_BYTES[precision]
    return GEMM_EFF_HALF_DIM * ridge / REFERENCE_RIDGE


def gemm_efficiency(gpu: GPUType, precision: Precision, hidden: int, tp: int) -> float:
    """eff = gemm_ceiling x x / (x + gemm_half_dim) with x = hidden / tp."""
    x = hidden / tp
    return gemm_ceiling(gpu, precision) * x / (x + gemm_half_dim(gpu, precision))


def core_precision(precision: Precision) -> Precision:
    """The attention core's precision: BF16 under fp8 training (Transformer Engine keeps attention in BF16)."""
    return Precision.bf16 if precision is Precision.fp8 else precision


@dataclass(frozen=True)
class Flops:
    """FLOPs of some work for one microbatch, split like OpTimes."""

    forward: float
    backward_input: float
    backward_weight: float

    @property
    def total(self) -> float:
        return self.forward + self.backward_input + self.backward_weight

    def __add__(self, other: Flops) -> Flops:
        return Flops(
            self.forward + other.forward,
            self.backward_input + other.backward_input,
            self.backward_weight + other.backward_weight,
        )

    def scaled(self, factor: float) -> Flops:
        return Flops(self.forward * factor, self.backward_input * factor, self.backward_weight * factor)


def _ffn_matrices(model: ModelSpec) -> int:
    return 3 if model.gated_ffn else 2


def attention_matmul_flops(model: ModelSpec, tokens: int) -> float:
    """Forward FLOPs of the attention projections: 2*T*h*(2*a*d + 2*g*d)."""
    d = model.attention_head_dim
    return 2.0 * tokens * model.hidden * (2 * model.heads * d + 2 * model.kv_heads * d)


def attention_core_flops(model: ModelSpec, tokens: int, seq_len: int) -> float:
    """Forward FLOPs of QK^T and AV: 4*T*s*a*d."""
    return 4.0 * tokens * seq_len * model.heads * model.attention_head_dim


def ffn_flops(model: ModelSpec, tokens: int, moe_layer: bool) -> float:
    """Forward FLOPs of the FFN block: dense 2*T*h*f*nm; MoE 2*T*h*E + (k+e)*2*T*h*fe*nm."""
    nm = _ffn_matrices(model)
    if not moe_layer or model.moe is None:
        return 2.0 * tokens * model.hidden * model.ffn_hidden * nm
    moe = model.moe
    router = 2.0 * tokens * model.hidden * moe.experts
    return (
        router + (moe.top_k + moe.shared_experts) * 2.0 * tokens * model.hidden * moe.expert_ffn_hidden * nm
    )


def tp_gemm_flops(model: ModelSpec, tokens: int, moe_layer: bool) -> tuple[float, float, float, float]:
    """Forward FLOPs of the four GEMMs a TP collective of sequence parallelism feeds or follows, in layer order:
    QKV 2*T*h*(a+2g)*d, attention output 2*T*a*d*h, FC1 2*T*h*f'*(nm-1), FC2 2*T*h*f' (f' = f, or (k+e)*fe in an
    MoE layer: the routed and shared experts' GEMMs; the router is left out)."""
    d, h = model.attention_head_dim, model.hidden
    width = model.ffn_hidden
    if moe_layer and model.moe is not None:
        width = (model.moe.top_k + model.moe.shared_experts) * model.moe.expert_ffn_hidden
    fc2 = 2.0 * tokens * h * width
    return (2.0 * tokens * h * (model.heads + 2 * model.kv_heads) * d, 2.0 * tokens * model.heads * d * h,
            fc2 * (_ffn_matrices(model) - 1), fc2)


def executed_core_fraction(attention: AttentionKernel) -> float:
    """Share of the s x s attention core a kernel computes: 1 materialized, 1/2 flash (causal blocks skipped)."""
    return 0.5 if attention is AttentionKernel.flash else 1.0


def layer_flops(
    model: ModelSpec, micro_batch: int, seq_len: int, recompute: Recompute, moe_layer: bool = False,
    attention: AttentionKernel = AttentionKernel.materialized,
) -> Flops:
    """One whole layer (all tp*cp GPUs together), one microbatch, incl. recomputation; the attention core as
    `attention` executes it."""
    tokens = micro_batch * seq_len
    matmul = attention_matmul_flops(model, tokens) + ffn_flops(model, tokens, moe_layer)
    recomputed = matmul if recompute is Recompute.full else 0.0
    return Flops(matmul, matmul + recomputed, matmul) + core_layer_flops(
        model, micro_batch, seq_len, recompute, attention
    )


def core_layer_flops(model: ModelSpec, micro_batch: int, seq_len: int, recompute: Recompute,
                     attention: AttentionKernel = AttentionKernel.materialized) -> Flops:
    """The attention-core part of layer_flops: forward c, backward-input 2c (+ c recomputed unless recompute is
    none), no weights; c = executed_core_fraction x 4*T*s*a*d."""
    core = attention_core_flops(model, micro_batch * seq_len, seq_len) * executed_core_fraction(attention)
    recomputed = 0.0 if recompute is Recompute.none else core
    return Flops(core, 2 * core + recomputed, 0.0)


def average_layer_flops(model: ModelSpec, micro_batch: int, seq_len: int, recompute: Recompute,
                        attention: AttentionKernel = AttentionKernel.materialized) -> Flops:
    """Dense and MoE layers weighted by their counts in the model."""
    moe_share = len(model.moe_layer_indices()) / model.layers
    dense = layer_flops(model, micro_batch, seq_len, recompute, False, attention)
    if moe_share == 0:
        return dense
    moe = layer_flops(model, micro_batch, seq_len, recompute, True, attention)
    return dense.scaled(1 - moe_share) + moe.scaled(moe_share)


def lm_head_flops(model: ModelSpec, micro_batch: int, seq_len: int) -> Flops:
    """LM head 2*T*h*V forward, the same for backward-input and backward-weight (loss FLOPs neglected)."""
    f = 2.0 * micro_batch * seq_len * model.hidden * model.vocab
    return Flops(f, f, f)


def model_forward_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs per token of the whole model without recompute (all layers + LM head)."""
    layer = average_layer_flops(model, 1, seq_len, Recompute.none)
    head = lm_head_flops(model, 1, seq_len)
    return (layer.forward * model.layers + head.forward) / seq_len


def model_flops_per_iteration(model: ModelSpec, seq_len: int, batch_sequences: int) -> float:
    """3 x forward FLOPs (fwd + bwd-input + bwd-weight) of all layers and the head for the global batch;
    ~6 * active params * tokens + attention; recompute not counted (the MFU numerator)."""
    return 3.0 * model_forward_flops_per_token(model, seq_len) * seq_len * batch_sequences


def sequence_elementwise_bytes_forward(model: ModelSpec, tokens: int, kernels: Kernels = Kernels.fused) -> float:
    """The part of elementwise_bytes_forward on hidden-sized tensors (2 norms, 2 residual adds): what sequence
    parallelism splits over the TP ranks and what runs replicated on each without it. Per token: fused 20h bytes,
    eager 84h (derivation in elementwise_bytes_forward)."""
    return tokens * (84 if kernels is Kernels.eager else 20) * model.hidden


def attention_score_bytes_forward(model: ModelSpec, tokens: int, seq_len: int, attention: AttentionKernel) -> float:
    """HBM bytes of the s x s scores of one layer's forward (all GPUs together): SCORE_BYTES_FORWARD x b*a*s*s
    (= T*s*a) with a materialized kernel, 0 with flash (the scores stay on chip)."""
    if attention is AttentionKernel.flash:
        return 0.0
    return SCORE_BYTES_FORWARD * tokens * seq_len * model.heads


def elementwise_bytes_forward(model: ModelSpec, tokens: int, moe_layer: bool = False,
                              kernels: Kernels = Kernels.fused) -> float:
    """HBM bytes moved by the memory-bound ops of one layer's forward (all GPUs of the layer together).

    Bytes per token, bf16 activations (2 bytes), fp32 4; f' = f, or (k+e)*fe in an MoE layer.
    fused (one kernel per chain, each input read and the output written once): 2 norms 4h each, 2 residual
    adds 6h each, RoPE on q and k 4(a+g)d, activation 6f' gated (read 2f', write f') or 4f';
        20h + 4(a+g)d + 6f'  (4f' ungated).
    eager (one kernel per op of torchtitan's Llama, models/llama/model.py and models/norms.py, Dec 2024):
      RMSNorm  `(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight`: float() 2h+4h,
               pow 4h+4h, mean reads 4h, times rsqrt 4h+4h, type_as 4h+2h, times weight 2h+2h = 36h, twice;
      residual adds 6h, twice;
      RoPE     per element of q and k: float() 2+4, complex multiply by freqs_cis 4+4, type_as 4+2 = 20(a+g)d;
      repeat_kv (GQA, g < a) materialises k and v on every head: read 2gd, write 2ad each = 4(a+g)d;
      SwiGLU   silu(w1 x) 2f'+2f', times w3 x 4f'+2f' = 10f' (an ungated GeLU is one kernel, 4f');
      free     views and transposes; `output.transpose(1, 2).contiguous()` after SDPA copies nothing (PyTorch's
               flash SDPA writes its output as (b, s, heads, d), aten/.../cuda/attention.cu); per-row scalars
               (rsqrt, eps) and freqs_cis (s x d/2 per sequence) are negligible;
        84h + 20(a+g)d + 4(a+g)d [g < a] + 10f'  (4f' ungated).
    Llama 3 8B (h 4096, a 32, g 8, d 128, f 14336): eager 610,304 B, fused 188,416 B per token per layer (3.2x).
    The caller takes backward as 2x forward for both (read activations and gradients); autograd's eager backward
    kernels (RMSNorm ~80h, SwiGLU 18f', RoPE and repeat_kv as forward, residual gradient adds 6h) come to 1.8x
    forward for Llama 3 8B."""
    d = model.attention_head_dim
    width = model.ffn_hidden
    if moe_layer and model.moe is not None:
        width = (model.moe.top_k + model.moe.shared_experts) * model.moe.expert_ffn_hidden
    qk = (model.heads + model.kv_heads) * d
    if kernels is Kernels.eager:
        repeat_kv = 4 * qk if model.kv_heads < model.heads else 0
        split = 20 * qk + repeat_kv + (10 if model.gated_ffn else 4) * width
    else:
        split = 4 * qk + (6 if model.gated_ffn else 4) * width
    return sequence_elementwise_bytes_forward(model, tokens, kernels) + tokens * split


def flops_time_s(flops: float, gpu: GPUType, precision: Precision, hidden: int, tp: int) -> float:
    """GEMM FLOPs already divided per GPU / (peak[precision] * 1e12 * gemm_efficiency); under fp8 at the FP8 peak
    and the generation's FP8 ceiling, plus the casts: memory_time_s(flops * FP8_CAST_BYTES_PER_FLOP_H / hidden)."""
    time = flops / (peak_tflops(gpu, precision) * 1e12 * gemm_efficiency(gpu, precision, hidden, tp))
    if precision is Precision.fp8:
        time += memory_time_s(flops * FP8_CAST_BYTES_PER_FLOP_H / hidden, gpu)
    return time


def core_time_s(flops: float, gpu: GPUType, precision: Precision, hidden: int, tp: int,
                attention: AttentionKernel) -> float:
    """Attention-core FLOPs per GPU in core_precision (BF16 under fp8): batched matmuls at gemm_efficiency when
    materialized, at the generation's flash efficiency (KERNELS) of the peak with a flash kernel."""
    precision = core_precision(precision)
    if attention is AttentionKernel.materialized:
        return flops_time_s(flops, gpu, precision, hidden, tp)
    return flops / (peak_tflops(gpu, precision) * 1e12 * KERNELS[gpu.generation].flash)


def memory_time_s(nbytes: float, gpu: GPUType) -> float:
    """Bytes / (hbm_tbyte_s * 1e12 * HBM_EFF)."""
    return nbytes / (gpu.hbm_tbyte_s * 1e12 * HBM_EFF)
