"""Accelerator types: compute peaks, memory and interconnect per GPU."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from scaleacross_milp.spec.base import Contract


class Precision(str, Enum):
    """The training precision: which `peak_dense_tflops` entry prices the matrix multiplies, and how wide the stored
    and communicated elements are (`Training.bytes_per_element`). `tf32`: tensor-core matmuls at the TF32 peak on
    fp32 storage (PyTorch's `allow_tf32`); `fp32`: CUDA-core matmuls at the FP32 peak. `fp8`: FP8 training as
    NVIDIA Transformer Engine runs it: the transformer layers' GEMMs (QKV, attention output, MLP / expert
    matrices) take FP8 inputs at the FP8 peak, while the attention core, norms, activations, embedding, LM head,
    stored weights, activations and communication stay 16-bit (BF16); each GEMM weight also keeps an FP8 copy
    and its transpose, and every FP8 tensor its scaling factor and amax history (costmodel.compute, .memory)."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    tf32 = "tf32"
    fp32 = "fp32"


class Architecture(str, Enum):
    """The GPU generation, which selects the kernel efficiencies of costmodel.compute (GEMM ceiling per precision,
    flash-attention efficiency). NVIDIA Ampere (A100, A800, A30), Hopper (H100, H200, H800, GH200), Blackwell (B200,
    B300, GB200)."""

    ampere = "ampere"
    hopper = "hopper"
    blackwell = "blackwell"


SIXTEEN_BIT_PER_PEAK: dict[Precision, float] = {
    Precision.bf16: 1.0, Precision.fp16: 1.0, Precision.fp8: 0.5, Precision.tf32: 2.0, Precision.fp32: 16.0}
"""A dense peak's 16-bit equivalent: FP8 doubles the BF16 rate and TF32 halves it on A100, H100 and B200 (datasheets:
624 / 312 / 156, 1,979 / 989 / 495, 4,500 / 2,250 / 1,100 TFLOP/s); the FP32 CUDA-core peak is 1/16 of BF16 on
A100 (19.5 of 312) and ~1/15 on H100 SXM (67 of 989)."""
HOPPER_FROM_TFLOPS = 500.0
BLACKWELL_FROM_TFLOPS = 1400.0
"""Generation inferred from the 16-bit dense peak when not given: below 500 TFLOP/s Ampere (A100 312), below 1,400
Hopper (H100 / H200 989, a 500 W-capped H100 ~645), else Blackwell (B200 2,250, GB200 2,500)."""


class GPUType(Contract):
    """One GPU model with its node (NVLink domain) and scale-out NIC.

    `peak_dense_tflops` maps a precision to dense (non-sparse) peak TFLOP/s.
    `nvlink_gbyte_s` is the achievable bus bandwidth per GPU for ring collectives inside the NVLink domain.
    `architecture`: the generation (Architecture); omitted, it is inferred from the 16-bit peak (`generation`).
    """

    peak_dense_tflops: dict[Precision, PositiveFloat]
    hbm_gib: PositiveFloat
    hbm_tbyte_s: PositiveFloat
    nvlink_domain_gpus: PositiveInt = 8
    nvlink_gbyte_s: PositiveFloat
    nic_gbit_s: PositiveFloat = 400.0
    usable_hbm_fraction: float = Field(0.92, gt=0, le=1)
    gpu_hour_usd: NonNegativeFloat | None = Field(
        None, description="price of one GPU of this type for one hour, $/GPU-hour (a building's own "
        "gpu_hour_usd overrides it); costmodel.price")
    architecture: Architecture | None = Field(
        None, description="GPU generation, which picks its GEMM and flash-attention efficiencies "
        "(costmodel.compute.KERNELS); omitted, inferred from the 16-bit peak")

    @model_validator(mode="after")
    def _has_a_precision(self) -> GPUType:
        if not self.peak_dense_tflops:
            raise ValueError("peak_dense_tflops must name at least one precision")
        return self

    @property
    def sixteen_bit_tflops(self) -> float:
        """The dense BF16 / FP16 peak: the bf16 entry, else fp16, else another entry x SIXTEEN_BIT_PER_PEAK."""
        precision = next(p for p in SIXTEEN_BIT_PER_PEAK if p in self.peak_dense_tflops)
        return self.peak_dense_tflops[precision] * SIXTEEN_BIT_PER_PEAK[precision]

    @property
    def generation(self) -> Architecture:
        """`architecture` if given, else Ampere / Hopper / Blackwell by the 16-bit peak (HOPPER_FROM_TFLOPS,
        BLACKWELL_FROM_TFLOPS)."""
        if self.architecture is not None:
            return self.architecture
        peak = self.sixteen_bit_tflops
        if peak < HOPPER_FROM_TFLOPS:
            return Architecture.ampere
        return Architecture.hopper if peak < BLACKWELL_FROM_TFLOPS else Architecture.blackwell
