"""A priced cluster for the cost tests: a cheap hall near the job and an expensive one 100 km away behind a priced
link, each of 16 H100s, and a search narrowed to TP 8, DDP, 1F1B, micro-batch 1 (batch 16) so every solve is small.
Alone, the near hall runs the batch on 2 replicas (PP 1 x DP 2); with the far hall, 2 pipelines of 2 stages cross
the link (PP-out), faster and dearer."""

from __future__ import annotations

NEAR_USD, FAR_USD, EGRESS_USD = 2.0, 6.0, 0.02
"""$/GPU-hour of the near and far hall (the far hall's by its GPU type), $/GB over the link."""
HALLS = [{"name": "near", "gpus": 16, "gpu_type": "h100", "gpu_hour_usd": NEAR_USD},
         {"name": "far", "gpus": 16, "gpu_type": "h100-far"}]
FAR_TYPE = {"peak_dense_tflops": {"bf16": 989}, "hbm_gib": 79.6, "hbm_tbyte_s": 3.35, "nvlink_domain_gpus": 8,
            "nvlink_gbyte_s": 370, "nic_gbit_s": 400, "gpu_hour_usd": FAR_USD}
LINK = [{"a": "near", "b": "far", "capacity_gbit_s": 800, "distance_km": 100, "egress_usd_per_gb": EGRESS_USD}]
SEARCH = {"tp_degrees": [8], "micro_batch_sizes": [1], "dp_modes": ["ddp"], "schedules": ["1f1b"],
          "time_limit_s": 30, "rel_gap": 0.0, "threads": 1}


def priced_halls(small_instance, **search):
    """The priced two-hall instance (small_instance: the tests' builder) with `search` overrides."""
    return small_instance(HALLS, LINK, {**SEARCH, **search}, gpus=0, batch=16, search_defaults={},
                          gpu_types={"h100-far": FAR_TYPE})
