"""What is trained: sequence length, batch, precision, recomputation, optimizer state."""

from __future__ import annotations

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


class Training(Contract):
    """One training step. Give the global batch in sequences or in tokens (a multiple of `seq_len`).

    `sequence_parallel`: Megatron-LM sequence parallelism (Korthikanti et al. 2022): norms, residual adds and
    their activations are split over the TP ranks and TP uses all-gather / reduce-scatter; without it they are
    replicated on every TP rank and TP uses all-reduce.

    `kernels`: `fused` or `eager` elementwise ops (Kernels); changes time only, activation memory is counted
    the same way for both.

    `optimizer_bytes_per_param`: 12 for Adam with fp32 master weights, momentum and variance.
    `grad_bytes_per_param`: 4 when gradients are accumulated and reduced in fp32, 2 in bf16.
    """

    seq_len: PositiveInt
    global_batch_sequences: PositiveInt | None = None
    global_batch_tokens: PositiveInt | None = None
    precision: Precision = Precision.bf16
    recompute: Recompute = Recompute.selective
    sequence_parallel: bool = True
    attention: AttentionKernel = AttentionKernel.flash
    kernels: Kernels = Kernels.fused
    optimizer_bytes_per_param: float = Field(12.0, ge=0)
    grad_bytes_per_param: float = Field(4.0, gt=0)

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

    @property
    def batch_sequences(self) -> int:
        if self.global_batch_sequences is not None:
            return self.global_batch_sequences
        return self.global_batch_tokens // self.seq_len

    @property
    def bytes_per_element(self) -> int:
        """Bytes of a weight, activation or communicated element in the training precision: 4 for fp32 and tf32
        (fp32 storage), else 2 (fp8 keeps 16-bit weights, activations and communication)."""
        return 4 if self.precision in (Precision.fp32, Precision.tf32) else 2
