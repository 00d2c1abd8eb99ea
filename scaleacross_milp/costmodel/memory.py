"""Parameter counts, per-GPU state bytes under each DP variant, and activation bytes.

Parameters per layer (a heads, g kv_heads, d head_dim, nm = 3 gated / 2 plain FFN matrices):
  attention  h*(2*a*d + 2*g*d) + 2*h (two norms)
  dense FFN  nm*h*f
  MoE layer  router h*E + shared nm*h*fe*e  ("dense" part, replicated over EP)  +  routed nm*h*fe*E ("expert")
Dense params are split over tp; expert params over tp*ep (an EP rank holds E/ep experts, each split over tp).

State bytes per parameter: weights beta (2) + grad_bytes_per_param + optimizer_bytes_per_param.
  DDP              everything replicated
  FSDP             everything sharded over N = dp*cp (dense) or dp*cp/ep (experts)
  fsdp-no-reshard  weights unsharded after forward (full beta), grads + optimizer sharded over N
  HSDP (r)         like FSDP with shard group N/r
  zero1            weights and gradients replicated (beta + g), optimizer states sharded over N (o / N): Megatron's
                   distributed optimizer keeps the bf16 parameters and the full gradient buffer on every rank and
                   shards the fp32 master weights and Adam moments
FSDP/HSDP also hold transient unsharded buffers: ~2 layers of weights (current + prefetched) and one layer of
unsharded gradients; these are per GPU, not per layer (`fsdp_transient_bytes`).

fp8 training (Transformer Engine) adds per layer (`fp8_layer_bytes`): an FP8 copy of each GEMM weight and its
transpose, FP8_WEIGHT_COPY_BYTES = 2 per layer parameter, held like the 16-bit weights (whole under DDP,
fsdp-no-reshard and zero1, the shard under FSDP / HSDP); and per FP8 tensor (input, weight, output gradient of
each GEMM) its scale, inverse scale and amax history in fp32, FP8_SCALING_BYTES_PER_TENSOR. Activations are
counted as in 16-bit training: a GEMM's input is saved as FP8 plus its FP8 transpose (the operand layout of the
weight-gradient GEMM on Hopper), the 2 bytes per element of the BF16 input it replaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from scaleacross_milp.costmodel.costs import DPVariant, ShapeCosts
from scaleacross_milp.spec.hardware import Precision
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.training import AttentionKernel, Recompute, Training

FP8_WEIGHT_COPY_BYTES = 2
"""FP8 weight and its transpose, per GEMM weight (Transformer Engine's cached FP8 weights; the layer's 2h norm
weights, which have none, are counted too: under 1e-3 of a layer)."""
FP8_AMAX_HISTORY = 1024
"""Amax history length of delayed scaling (Transformer Engine's DelayedScaling recipe, NeMo's fp8_amax_history_len)."""
FP8_SCALING_BYTES_PER_TENSOR = 4 * (FP8_AMAX_HISTORY + 2)
"""fp32 amax history, scale and inverse scale of one FP8 tensor."""
FP8_TENSORS_PER_GEMM = 3
"""Input, weight and output gradient."""


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one layer: `dense` (replicated over EP) and `expert` (routed experts, split over EP)."""

    dense: float
    expert: float

    @property
    def total(self) -> float:
        return self.dense + self.expert


def attention_params(model: ModelSpec) -> float:
    d = model.attention_head_dim
    return model.hidden * (2 * model.heads * d + 2 * model.kv_heads * d) + 2 * model.hidden


def layer_params(model: ModelSpec, moe_layer: bool = False) -> LayerParams:
    nm = 3 if model.gated_ffn else 2
    attn = attention_params(model)
    if not moe_layer or model.moe is None:
        return LayerParams(dense=attn + nm * model.hidden * model.ffn_hidden, expert=0.0)
    moe = model.moe
    ffn_e = nm * model.hidden * moe.expert_ffn_hidden
    return LayerParams(
        dense=attn + model.hidden * moe.experts + moe.shared_experts * ffn_e, expert=moe.experts * ffn_e
    )


@dataclass(frozen=True)
class ModelParams:
    """A model's layer parameters, counted once per model (`model_params`): a dense layer, an MoE layer (the dense
    one's counts without MoE), the share of MoE layers and their count-weighted average."""

    dense: LayerParams
    moe: LayerParams
    moe_share: float
    average: LayerParams


_SEEN: dict[int, tuple[ModelSpec, ModelParams]] = {}
"""`model_params` by the model object's identity (the object is held, so its id is not reused)."""


def model_params(model: ModelSpec) -> ModelParams:
    """The model's `ModelParams`, counted once per model: looked up by the object first, then on its JSON (a model
    copied with a list inside is not hashable), whose dump costs more than the lookup saves when called per shape."""
    seen = _SEEN.get(id(model))
    if seen is None or seen[0] is not model:
        if len(_SEEN) >= 64:
            _SEEN.clear()
        seen = _SEEN[id(model)] = (model, _model_params(model.model_dump_json()))
    return seen[1]


@lru_cache(maxsize=64)
def _model_params(model_json: str) -> ModelParams:
    model = ModelSpec.model_validate_json(model_json)
    share = len(model.moe_layer_indices()) / model.layers
    d, m = layer_params(model, False), layer_params(model, True)
    return ModelParams(d, m, share, LayerParams(dense=(1 - share) * d.dense + share * m.dense, expert=share * m.expert))


def average_layer_params(model: ModelSpec) -> LayerParams:
    """Dense/MoE layers weighted by their counts."""
    return model_params(model).average


def embedding_params(model: ModelSpec) -> float:
    """V*h (vocab-parallel over tp)."""
    return float(model.vocab * model.hidden)


def head_params(model: ModelSpec, pp: int) -> float:
    """V*h plus the final norm; a tied head shares the embedding unless pp > 1 (then the last stage keeps
    its own copy, as Megatron-LM does)."""
    if model.tied_embeddings and pp == 1:
        return float(model.hidden)
    return float(model.vocab * model.hidden + model.hidden)


def grad_bytes_per_cell(model: ModelSpec, training: Training, pp: int) -> tuple[float, float, float]:
    """(per layer, embedding, LM head) gradient bytes one stage cell holds after reduction inside the cell (dense
    params once, expert params once): what cross-building DP synchronisation moves (`ShapeCosts`'
    grad_bytes_per_layer_per_cell, grad_bytes_fixed_first and grad_bytes_fixed_last)."""
    g = training.grad_bytes_per_param
    return average_layer_params(model).total * g, embedding_params(model) * g, head_params(model, pp) * g


def boundary_bytes(model: ModelSpec, training: Training, micro_batch: int) -> float:
    """Activation bytes of one microbatch of one pipeline crossing a stage boundary, one direction (b s h beta)."""
    return micro_batch * training.seq_len * model.hidden * training.bytes_per_element


def total_params(model: ModelSpec) -> float:
    """All parameters (embedding + layers + head, untied)."""
    layers = sum(layer_params(model, i in set(model.moe_layer_indices())).total for i in range(model.layers))
    return layers + embedding_params(model) + head_params(model, pp=1 if model.tied_embeddings else 2)


def dp_group(shape: Shape) -> int:
    """Ranks sharing a dense parameter shard: N = dp*cp."""
    return shape.dp * shape.cp


def shard_groups(shape: Shape, variant: DPVariant) -> tuple[float, float]:
    """(dense shard group, expert shard group) for sharded variants: N/r and N/(ep*r)."""
    r = variant.replicas if variant.mode is DPMode.hsdp else 1
    n = dp_group(shape)
    return n / r, max(1.0, n / (shape.ep * r))


def state_bytes(dense: float, expert: float, shape: Shape, training: Training, variant: DPVariant) -> float:
    """Per-GPU weights+grads+optimizer bytes for `dense` params (split over tp) and `expert` params (split
    over tp*ep), formulas in the module docstring (transient FSDP buffers excluded)."""
    beta, g, o = training.bytes_per_element, training.grad_bytes_per_param, training.optimizer_bytes_per_param
    d_gpu, e_gpu = dense / shape.tp, expert / (shape.tp * shape.ep)
    if variant.mode is DPMode.ddp:
        return (d_gpu + e_gpu) * (beta + g + o)
    nd, ne = shard_groups(shape, variant)
    if variant.mode is DPMode.fsdp_no_reshard:
        return (d_gpu + e_gpu) * beta + (d_gpu / nd + e_gpu / ne) * (g + o)
    if variant.mode is DPMode.zero1:
        return (d_gpu + e_gpu) * (beta + g) + (d_gpu / nd + e_gpu / ne) * o
    return (d_gpu / nd + e_gpu / ne) * (beta + g + o)


def layer_state_bytes(model: ModelSpec, shape: Shape, training: Training, variant: DPVariant) -> float:
    """state_bytes of an average layer plus its fp8_layer_bytes."""
    p = average_layer_params(model)
    return state_bytes(p.dense, p.expert, shape, training, variant) + fp8_layer_bytes(model, shape, training, variant)


def gemms_per_layer(model: ModelSpec, shape: Shape) -> float:
    """GEMM weights one GPU holds per average layer: QKV, attention output and the FFN's (gated: fused gate/up and
    down; plain: up and down), 4; an MoE layer holds 2 per local expert (E/ep) and per shared expert instead of
    the dense FFN's 2 (the router runs unquantised)."""
    params = model_params(model)
    if model.moe is None or params.moe_share == 0:
        return 4.0
    moe = 2 + 2 * (model.moe.experts / shape.ep + model.moe.shared_experts)
    return (1 - params.moe_share) * 4.0 + params.moe_share * moe


def fp8_layer_bytes(model: ModelSpec, shape: Shape, training: Training, variant: DPVariant) -> float:
    """fp8 only (else 0): FP8_WEIGHT_COPY_BYTES x the layer parameters on the GPU held like the 16-bit weights
    (D/tp + E/(tp ep) whole under DDP, fsdp-no-reshard and zero1, D/(tp N_d) + E/(tp ep N_e) under FSDP / HSDP) +
    FP8_SCALING_BYTES_PER_TENSOR x FP8_TENSORS_PER_GEMM x gemms_per_layer."""
    if training.precision is not Precision.fp8:
        return 0.0
    p = average_layer_params(model)
    d_gpu, e_gpu = p.dense / shape.tp, p.expert / (shape.tp * shape.ep)
    if variant.mode in (DPMode.fsdp, DPMode.hsdp):
        nd, ne = shard_groups(shape, variant)
        d_gpu, e_gpu = d_gpu / nd, e_gpu / ne
    scaling = FP8_SCALING_BYTES_PER_TENSOR * FP8_TENSORS_PER_GEMM * gemms_per_layer(model, shape)
    return FP8_WEIGHT_COPY_BYTES * (d_gpu + e_gpu) + scaling


def fsdp_transient_bytes(model: ModelSpec, shape: Shape, training: Training, variant: DPVariant) -> float:
    """Unsharded buffers of FSDP/HSDP per GPU: 2 layers of weights (beta) + 1 layer of gradients, using the
    largest layer (MoE if any). 0 for DDP, fsdp-no-reshard and zero1 (weights already counted unsharded)."""
    if variant.mode in (DPMode.ddp, DPMode.fsdp_no_reshard, DPMode.zero1):
        return 0.0
    params = model_params(model)
    layers = [params.dense] + ([params.moe] if model.moe is not None else [])
    per_gpu = max(lp.dense / shape.tp + lp.expert / (shape.tp * shape.ep) for lp in layers)
    return per_gpu * (2 * training.bytes_per_element + training.grad_bytes_per_param)


REPLICATED_ELEMENTS_PER_H = 10
"""Per token, in units of h bytes: the 2h inputs of the attention and MLP blocks, their h dropout masks and the
4h of the two norms' inputs: what sequence parallelism splits over TP (Korthikanti et al. 2022 section 4.2.2)."""


def _attention_block_elements(model: ModelSpec) -> float:
    """Korthikanti's 11h for MHA, generalised: norm output 2h, Q 2ad, K and V 4gd, projection input 2ad,
    dropout mask h (bytes per token)."""
    d = model.attention_head_dim
    return 3 * model.hidden + 4 * model.heads * d + 4 * model.kv_heads * d


def _mlp_block_bytes(model: ModelSpec, moe_layer: bool) -> float:
    """Korthikanti's 19h for a 4h GeLU MLP: input 2h, fc1 output 2f, activation output 2f, mask h; gated:
    gate and up outputs 4f + product 2f. MoE: the per-token FFN part repeats for each of the k + e experts
    a token visits (router logits neglected)."""
    width, copies = model.ffn_hidden, 1
    if moe_layer and model.moe is not None:
        width, copies = model.moe.expert_ffn_hidden, model.moe.top_k + model.moe.shared_experts
    inner = (6 if model.gated_ffn else 4) * width
    return 3 * model.hidden + copies * inner


def layer_activation_bytes(
    model: ModelSpec, shape: Shape, training: Training, moe_layer: bool = False
) -> float:
    """Bytes one GPU keeps for one layer and one in-flight microbatch (Korthikanti et al. 2022, sequence
    parallel): none sbh(34/t + 5as/(ht)); selective sbh*34/t; full 2sbh/t; 34h generalised to
    attention + MLP + 4h (norms) per token; all divided by cp (the sequence is split over cp ranks).
    Without sequence parallelism the 10h of norm and block inputs and dropout masks are held on every TP rank
    (sbh(10 + 24/t + 5as/(ht)) for GPT) and full recompute keeps 2sbh; a flash kernel stores no 5as^2b scores.
    The formulas count 16-bit elements; 4-byte training (fp32, tf32) scales them by beta / 2 (dropout masks, one
    byte either way, are over-counted by h per token and mask)."""
    b, s, t, cp, h = shape.micro_batch, training.seq_len, shape.tp, shape.cp, model.hidden
    width = training.bytes_per_element / 2
    copies = 1 if training.sequence_parallel else t  # TP ranks holding what sequence parallelism would split
    if training.recompute is Recompute.full:
        return width * 2.0 * s * b * h * copies / t / cp
    per_token = _attention_block_elements(model) + _mlp_block_bytes(model, moe_layer) + 4 * h
    linear = s * b * (per_token + (copies - 1) * REPLICATED_ELEMENTS_PER_H * h) / t
    materialized = training.recompute is Recompute.none and training.attention is AttentionKernel.materialized
    core = 5.0 * model.heads * s * s * b / t if materialized else 0.0
    return width * (linear + core) / cp


def average_activation_bytes(model: ModelSpec, shape: Shape, training: Training) -> float:
    share = model_params(model).moe_share
    dense = layer_activation_bytes(model, shape, training, False)
    if share == 0:
        return dense
    return (1 - share) * dense + share * layer_activation_bytes(model, shape, training, True)


def logits_bytes(model: ModelSpec, shape: Shape, seq_len: int, bytes_per_element: int = 2) -> float:
    """Last-stage logits buffer per GPU: b*s*V/(tp*cp) * (beta logits + 4 fp32 softmax/grad) bytes."""
    return shape.micro_batch * seq_len * model.vocab / (shape.tp * shape.cp) * (bytes_per_element + 4.0)


@dataclass(frozen=True)
class ShapeMemory:
    """The per-GPU byte counts of one shape that its stages' memory needs are built from (ShapeCosts carries the
    same fields): what the memory screen reads before any time is priced."""

    activation_bytes_per_layer: float
    layer_state_bytes: dict[DPVariant, float]
    first_stage_fixed_bytes: dict[DPVariant, float]
    last_stage_fixed_bytes: dict[DPVariant, float]
    stage_fixed_bytes: dict[DPVariant, float]


def memory_key(shape: Shape) -> tuple[int, int, int, int, int, bool]:
    """What a shape's per-GPU byte counts (`shape_memory`, `layer_kinds.moe_memory`) depend on: TP, CP, EP, DP (the
    shard groups), the micro-batch (activations, logits) and whether the LM head has its own copy (pp > 1,
    `head_params`); shapes that differ only in PP > 1 and microbatches hold the same bytes per layer and stage."""
    return shape.tp, shape.cp, shape.ep, shape.dp, shape.micro_batch, shape.pp > 1


def shape_memory(model: ModelSpec, shape: Shape, training: Training, variants: list[DPVariant]) -> ShapeMemory:
    """Activation bytes per layer and in-flight microbatch, and per variant: layer states, embedding states
    (stage 0), LM-head states plus logits (head stage) and the FSDP transient buffers (every stage)."""
    emb, head = embedding_params(model), head_params(model, shape.pp)
    logits = logits_bytes(model, shape, training.seq_len, training.bytes_per_element)
    return ShapeMemory(
        activation_bytes_per_layer=average_activation_bytes(model, shape, training),
        layer_state_bytes={v: layer_state_bytes(model, shape, training, v) for v in variants},
        first_stage_fixed_bytes={v: state_bytes(emb, 0.0, shape, training, v) for v in variants},
        last_stage_fixed_bytes={v: state_bytes(head, 0.0, shape, training, v) + logits for v in variants},
        stage_fixed_bytes={v: fsdp_transient_bytes(model, shape, training, v) for v in variants},
    )


def stage_bytes(costs: ShapeCosts, variant: DPVariant, stage: int, layers: int, inflight: float,
                head_stage: int | None = None) -> float:
    """Per-GPU bytes of pipeline stage `stage` (of costs.shape.pp) holding `layers` average layers with
    `inflight` microbatches of activations in flight (in whole-stage units), as the MILP's memory rows read the
    same tables: layers (a inflight + s_v) + transient_v + embedding states_v (stage 0) + LM-head states_v and
    logits (on `head_stage`, the rank of the last virtual stage: rank 0 under ZB-V; default the last stage)."""
    total = layers * (costs.activation_bytes_per_layer * inflight + costs.layer_state_bytes[variant])
    total += costs.stage_fixed_bytes.get(variant, 0.0)
    if stage == 0:
        total += costs.first_stage_fixed_bytes[variant]
    if stage == (costs.shape.pp - 1 if head_stage is None else head_stage):
        total += costs.last_stage_fixed_bytes[variant]
    return total
