"""GPU types and building fabrics of the published runs, with where each number comes from.

GPU types (dense tensor-core peaks, no sparsity):
  a100-80gb       NVIDIA A100 SXM4 80GB datasheet: 312 TFLOP/s FP16/BF16, HBM2e 2,039 GB/s; NVLink 3 600 GB/s
                  per GPU (300 each way) of which ring collectives reach ~230 GB/s bus bandwidth (nccl-tests
                  on DGX A100, the figure tests/costmodel already uses); one 200 Gb/s HDR InfiniBand NIC per
                  GPU (DGX A100 / Selene, Narayanan et al. 2021 section 5).
  h100-80gb       NVIDIA H100 SXM5 80GB datasheet: 989 TFLOP/s BF16, HBM3 3.35 TB/s; NVLink 4 900 GB/s per
                  GPU, ~370 GB/s ring bus bandwidth (DESIGN.md section 2); 400 Gb/s RoCE per GPU (Llama 3).
  h100-96gb-500w  Grand Teton H100 with 96 GB HBM2e capped at 500 W (torchtitan, Liang et al. 2024). The same
                  GH100 die and tensor-core peak (989 TFLOP/s at boost clock; the 500 W cap's sustained
                  clock is not published, so no derating is assumed); HBM2e bandwidth is not published either:
                  6 stacks x 409.6 GB/s (HBM2e at 3.2 Gb/s per pin, the rate that gives A100 80GB its
                  2,039 GB/s from 5 stacks) = 2.46 TB/s; 400 Gb/s RDMA per GPU (row notes).
HBM capacity is 80 or 96 GB = 74.5 or 89.4 GiB (the verifier does not check memory; the numbers are the
datasheets').
"""

from __future__ import annotations

from scaleacross_milp.spec.hardware import GPUType
from scaleacross_milp.spec.topology import Building

GB_IN_GIB = 1e9 / 2**30

GPU_TYPES: dict[str, GPUType] = {
    "a100-80gb": GPUType(peak_dense_tflops={"fp16": 312, "bf16": 312}, hbm_gib=80 * GB_IN_GIB, hbm_tbyte_s=2.039,
                         nvlink_gbyte_s=230, nic_gbit_s=200),
    "h100-80gb": GPUType(peak_dense_tflops={"bf16": 989, "fp16": 989}, hbm_gib=80 * GB_IN_GIB, hbm_tbyte_s=3.35,
                         nvlink_gbyte_s=370, nic_gbit_s=400),
    "h100-96gb-500w": GPUType(peak_dense_tflops={"bf16": 989, "fp16": 989}, hbm_gib=96 * GB_IN_GIB,
                              hbm_tbyte_s=2.4, nvlink_gbyte_s=370, nic_gbit_s=400),
}

LLAMA3_POD_GPUS = 3072
LLAMA3_OVERSUBSCRIPTION = 7.0
"""Llama 3 (Dubey et al. 2024 section 3.3.1; row notes): 3,072-GPU pods with full bisection, 1:7 above."""


def building(source: str, gpus: int, gpu_type: str) -> Building:
    """One building holding the whole run. Selene (Megatron-LM rows) and the torchtitan cluster are taken as
    non-blocking fat trees (nothing published says otherwise); the Llama 3 cluster has its pods."""
    if source.startswith("llama3"):
        return Building(name="dc", gpus=gpus, gpu_type=gpu_type, pod_gpus=LLAMA3_POD_GPUS,
                        oversubscription=LLAMA3_OVERSUBSCRIPTION)
    return Building(name="dc", gpus=gpus, gpu_type=gpu_type)
