"""What is trained: sequence length, batch, precision, recomputation, optimizer state."""

from __future__ import annotations

import math
from enum import Enum

from pydantic import Field, PositiveInt, model_validator

from scaleacross_milp.spec.base import Contract
from scaleacross_milp.spec.hardware import Precision


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class AttentionKernel(str, Enum):
    """How the attention core runs. `materialized`: scores and softmax over the whole s x s square through HBM,
    the causal mask applied afterwards (Megatron-LM 2021-2022). `flash` (default, what current training stacks
    run): a fused FlashAttention-style kernel that skips the blocks above the causal diagonal (half the core
    FLOPs) and never stores the s x s scores."""

    materialized = "materialized"
    flash = "flash"


class Kernels(str, Enum):
    """How the memory-bound (elementwise) ops of a layer execute; only their HBM traffic differs, not the FLOPs.
    `fused` (default): each chain of elementwise ops is one kernel that reads its inputs and writes its output
    once (Megatron-LM's fused kernels, torch.compile). `eager`: PyTorch eager mode, one kernel per op, each
    reading and writing HBM, with the fp32 upcasts of the Llama reference code (torchtitan's Llama: RMSNorm and
    RoPE in fp32, GQA keys and values repeated to every head). The bytes of both are in
    costmodel.compute.elementwise_bytes_forward."""

    fused = "fused"
    eager = "eager"


MAX_SEQ_LEN = 10_000_000
"""Longest sequence accepted (tokens): far beyond any context trained today."""
MAX_BATCH_SEQUENCES = 100_000_000
"""Largest global batch accepted (sequences): every GPU of the largest accepted building, a thousand times over."""


class BatchRounding(str, Enum):
    """How a shape runs when DP x micro-batch q does not divide the global batch B. Megatron-LM, DeepSpeed and
    torchtitan require global batch = DP x micro-batch x accumulation steps, so the user rounds; we choose, per
    shape, the microbatches per pipeline m (m >= 1) and the shape runs q m sequences:
    `exact` (default): m = B / q, only shapes with q | B; `down`: m = floor(B / q); `up`: m = ceil(B / q);
    `nearest`: whichever of the two is nearer B (ties upward). A shape is kept only when
    |q m - B| / B <= `batch_tolerance`."""

    exact = "exact"
    down = "down"
    up = "up"
    nearest = "nearest"


class Training(Contract):
    """One training step. Give the global batch in sequences or in tokens (a multiple of `seq_len`).

    `sequence_parallel`: Megatron-LM sequence parallelism (Korthikanti et al. 2022): norms, residual adds and
    their activations are split over the TP ranks and TP uses all-gather / reduce-scatter; without it they are
    replicated on every TP rank and TP uses all-reduce.

    `kernels`: `fused` or `eager` elementwise ops (Kernels); changes time only, activation memory is counted
    the same way for both.

    `optimizer_bytes_per_param`: 12 for Adam with fp32 master weights, momentum and variance.
    `grad_bytes_per_param`: 4 when gradients are accumulated and reduced in fp32, 2 in bf16.

    `batch_rounding` and `batch_tolerance`: what a shape whose DP x micro-batch does not divide the batch runs
    (BatchRounding); the batch a shape really runs is `Shape.batch_sequences`.

    Communication overlap, named and defaulted as Megatron-core names and defaults them (all off):
    `tp_comm_overlap` (Megatron-LM `--tp-comm-overlap`, Transformer Engine userbuffers): each TP all-gather /
    reduce-scatter of sequence parallelism is split into chunks pipelined with the GEMM it feeds or follows, so per
    op only max(0, comm - GEMM) is exposed (costmodel.comm.tp_comm); it needs `sequence_parallel`, as Megatron-LM
    requires. CP's ring exchange is always overlapped with the attention core (costmodel.comm.cp_comm).
    `overlap_grad_reduce` (Megatron-core DistributedDataParallelConfig), for the `ddp` DP mode: a chunk's gradients
    are reduced bucket by bucket as its last backward makes them final, behind that backward and the rank's later
    work; off, every chunk's reduction starts once the rank's last backward has finished (finalize_model_grads).
    PyTorch DDP always overlaps (set it on for it); the FSDP modes always reduce in their post-backward hooks
    (costmodel.dp.grad_reduce_overlaps). It applies to `zero1` (Megatron's distributed optimizer) alike, whose
    reduction is a reduce-scatter.
    `overlap_param_gather` (Megatron-core DistributedDataParallelConfig), for the `zero1` DP mode: the updated
    parameters are all-gathered bucket by bucket behind the next iteration's forward (each module's forward
    pre-hook waits for its bucket), so a chunk's first forward waits only for its first bucket and for what the
    gather stream falls behind the forward; off, the all-gather runs after the optimizer step, exposed
    (costmodel.dp.params_gathered_at_end).
    `overlap_moe_expert_parallel_comm` (Megatron-core `--overlap-moe-expert-parallel-comm`, batch-level overlap,
    MCore 0.14; DualPipe's forward-backward overlap): in the steady state each forward runs merged with another
    microbatch's backward, and each one's EP all-to-alls run behind the other's compute; the warm-up forwards and
    cool-down backwards have no partner and expose theirs (costmodel.comm.ep_hidden). As in Megatron-core it needs
    interleaved 1F1B when PP > 1 (shapes with EP > 1 keep only interleaved schedules) and no full recompute.
    """

    seq_len: PositiveInt = Field(le=MAX_SEQ_LEN)
    global_batch_sequences: PositiveInt | None = Field(None, le=MAX_BATCH_SEQUENCES)
    global_batch_tokens: PositiveInt | None = Field(None, le=MAX_BATCH_SEQUENCES * MAX_SEQ_LEN)
    precision: Precision = Precision.bf16
    recompute: Recompute = Recompute.selective
    sequence_parallel: bool = True
    attention: AttentionKernel = AttentionKernel.flash
    kernels: Kernels = Kernels.fused
    optimizer_bytes_per_param: float = Field(12.0, ge=0)
    grad_bytes_per_param: float = Field(4.0, gt=0)
    batch_rounding: BatchRounding = Field(BatchRounding.exact, description=(
        "when DP x micro-batch q does not divide the global batch B, each shape runs m microbatches per pipeline: "
        "exact (only q | B), down m = floor(B/q), up m = ceil(B/q), nearest (ties up); m >= 1"))
    batch_tolerance: float = Field(0.05, ge=0, lt=1, description=(
        "largest relative change of the global batch accepted, |q m - B| / B, under down / up / nearest"))
    tp_comm_overlap: bool = Field(False, description=(
        "Megatron-LM --tp-comm-overlap: TP all-gathers / reduce-scatters pipelined with the GEMM each feeds or "
        "follows, exposing max(0, comm - GEMM) per op; needs sequence_parallel"))
    overlap_grad_reduce: bool = Field(False, description=(
        "Megatron-core overlap_grad_reduce (ddp mode): DP gradient reduction bucket by bucket behind the last "
        "backward; off, after the rank's last backward (the FSDP modes always overlap)"))
    overlap_param_gather: bool = Field(False, description=(
        "Megatron-core overlap_param_gather (zero1 mode): the updated parameters all-gathered bucket by bucket "
        "behind the next forward; off, after the optimizer step, exposed"))
    overlap_moe_expert_parallel_comm: bool = Field(False, description=(
        "Megatron-core --overlap-moe-expert-parallel-comm: each steady-state forward merged with another "
        "microbatch's backward, their EP all-to-alls behind each other's compute; with EP > 1 and PP > 1 only "
        "interleaved schedules; not with full recompute"))

    @model_validator(mode="after")
    def _batch_given_once(self) -> Training:
        if (self.global_batch_sequences is None) == (self.global_batch_tokens is None):
            raise ValueError("give exactly one of global_batch_sequences or global_batch_tokens")
        if self.global_batch_tokens is not None and self.global_batch_tokens % self.seq_len:
            raise ValueError(
                f"global_batch_tokens ({self.global_batch_tokens}) is not a multiple of "
                f"seq_len ({self.seq_len})"
            )
        return self

    @model_validator(mode="after")
    def _tp_overlap_needs_sequence_parallel(self) -> Training:
        if self.tp_comm_overlap and not self.sequence_parallel:
            raise ValueError("tp_comm_overlap needs sequence_parallel (Megatron-LM overlaps the all-gathers and "
                             "reduce-scatters of sequence parallelism)")
        return self

    @model_validator(mode="after")
    def _ep_overlap_without_full_recompute(self) -> Training:
        if self.overlap_moe_expert_parallel_comm and self.recompute is Recompute.full:
            raise ValueError("overlap_moe_expert_parallel_comm does not run with full recompute (Megatron-core "
                             "asserts it: the merged forward-backward pairs need the forward's activations)")
        return self

    @property
    def batch_sequences(self) -> int:
        if self.global_batch_sequences is not None:
            return self.global_batch_sequences
        return self.global_batch_tokens // self.seq_len

    def rounded_microbatches(self, per_microbatch: int) -> int | None:
        """Microbatches per pipeline m when DP x micro-batch is `per_microbatch` (q) under `batch_rounding`
        (BatchRounding), or None when the rule keeps no m >= 1 with |q m - B| <= batch_tolerance x B."""
        batch, q = self.batch_sequences, per_microbatch
        low, high = batch // q, -(-batch // q)
        m = {BatchRounding.exact: low if low == high else 0, BatchRounding.down: low, BatchRounding.up: high,
             BatchRounding.nearest: high if high * q - batch <= batch - low * q else low}[self.batch_rounding]
        if m < 1 or abs(q * m - batch) > self.batch_tolerance * batch:
            return None
        return m

    @property
    def largest_batch_sequences(self) -> int:
        """The largest batch the rule can run: B under `exact`, floor(B (1 + batch_tolerance)) otherwise."""
        if self.batch_rounding is BatchRounding.exact:
            return self.batch_sequences
        return math.floor(self.batch_sequences * (1 + self.batch_tolerance))

    @property
    def bytes_per_element(self) -> int:
        """Bytes of a weight, activation or communicated element in the training precision: 4 for fp32 and tf32
        (fp32 storage), else 2 (fp8 keeps 16-bit weights, activations and communication)."""
        return 4 if self.precision in (Precision.fp32, Precision.tf32) else 2
