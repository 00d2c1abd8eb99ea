"""Accelerator types: compute peaks, memory and interconnect per GPU."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from scaleacross_milp.spec.base import Contract


class Precision(str, Enum):
    """The training precision: which `peak_dense_tflops` entry prices the matrix multiplies, and how wide the stored
    and communicated elements are (`Training.bytes_per_element`). `tf32`: tensor-core matmuls at the TF32 peak on
    fp32 storage (PyTorch's `allow_tf32`); `fp32`: CUDA-core matmuls at the FP32 peak."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    tf32 = "tf32"
    fp32 = "fp32"


class GPUType(Contract):
    """One GPU model with its node (NVLink domain) and scale-out NIC.

    `peak_dense_tflops` maps a precision to dense (non-sparse) peak TFLOP/s.
    `nvlink_gbyte_s` is the achievable bus bandwidth per GPU for ring collectives inside the NVLink domain.
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

    @model_validator(mode="after")
    def _has_a_precision(self) -> GPUType:
        if not self.peak_dense_tflops:
            raise ValueError("peak_dense_tflops must name at least one precision")
        return self
