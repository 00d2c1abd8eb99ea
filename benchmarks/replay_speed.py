"""Time the replay on plans with many microbatches and several distinct pipeline patterns.

    python benchmarks/replay_speed.py [--scale N]

Each case is a fixed layout evaluated as `evaluate` does; the table gives, per case, the network flows of the
full replay (its records on link tracks), the CPU seconds of that one replay (`replay(..., FULL)`) and of the
whole `verify` of the layout (replays A, B and D: C and C0 run only beside a plan's prediction), and the
iteration time (which a speed-up must not change). `--scale` multiplies the global batch, hence the microbatches.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from scaleacross_milp.loader import load_instance
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.replay import FULL, replay
from scaleacross_milp.verify.verifier import verify
from scaleacross_milp.verify.workload import build_workload

ROOT = Path(__file__).resolve().parents[1]
H100 = {"peak_dense_tflops": {"bf16": 989}, "hbm_gib": 79.6, "hbm_tbyte_s": 3.35, "nvlink_domain_gpus": 8,
        "nvlink_gbyte_s": 370, "nic_gbit_s": 400}
A100 = {"peak_dense_tflops": {"bf16": 312}, "hbm_gib": 79.2, "hbm_tbyte_s": 2.0, "nvlink_domain_gpus": 8,
        "nvlink_gbyte_s": 230, "nic_gbit_s": 200}
MIXTRAL_TOPOLOGY = {
    "buildings": [{"name": "east", "gpus": 1024, "gpu_type": "h100", "pod_gpus": 512},
                  {"name": "west", "gpus": 512, "gpu_type": "h100", "pod_gpus": 512},
                  {"name": "far", "gpus": 256, "gpu_type": "a100", "pod_gpus": 256, "oversubscription": 2.0}],
    "links": [{"a": "east", "b": "west", "capacity_gbit_s": 12800, "distance_km": 5, "paths": 32,
               "transports": ["ecmp_go_back_n", "spray_selective_repeat"]},
              {"a": "west", "b": "far", "capacity_gbit_s": 1600, "distance_km": 600, "loss_rate": 1e-5, "paths": 8,
               "transports": ["ecmp_go_back_n", "ecmp_selective_repeat"]}],
}
"""The three unequal buildings of issue 12's Mixtral repro (east, west 5 km, far 600 km over a lossy link)."""


def mixtral(batch: int) -> Instance:
    return Instance.model_validate({
        "name": "mixtral-3b", "model": json.loads((ROOT / "models" / "mixtral-8x7b.json").read_text()),
        "training": {"seq_len": 4096, "global_batch_sequences": batch, "recompute": "selective"},
        "gpu_types": {"h100": H100, "a100": A100}, "topology": MIXTRAL_TOPOLOGY, "search": {"time_limit_s": 60},
    })


def llama70b(batch: int) -> Instance:
    base = load_instance(ROOT / "instances" / "pp-out-2b-thin-link-llama3-70b.json")
    return base.model_copy(update={"training": base.training.model_copy(
        update={"global_batch_sequences": batch})})


def llama405b_131k(scale: int) -> tuple[Instance, Layout]:
    """The bundled 131,072-GPU instance, TP 4 x CP 2 x PP 32 x DP 512, whole pipelines in each of the eight
    buildings and FSDP across all of them (GPipe): every stage's parameter gathers before each microbatch's
    forward and backward, and its gradient reduce-scatters, cross the buildings' links (64 concurrent routes)."""
    base = load_instance(ROOT / "instances" / "two-region-8b-131k-llama3-405b.json")
    instance = base.model_copy(update={"training": base.training.model_copy(
        update={"global_batch_tokens": base.training.global_batch_tokens * scale})})
    buildings = [b.name for b in instance.topology.buildings]
    layers = [4] * 30 + [3] * 2
    return instance, Layout.model_validate({
        "shape": {"tp": 4, "cp": 2, "pp": 32, "dp": 512, "micro_batch": 1, "microbatches": 16 * scale},
        "schedule": "gpipe", "dp_mode": "fsdp",
        "stages": [{"stage": j, "layers": n, "cells_per_building": dict.fromkeys(buildings, 64)}
                   for j, n in enumerate(layers)],
        "pipelines": [{"buildings": [b] * 32, "pipelines": 64} for b in buildings]})


def cases(scale: int) -> list[tuple[str, Instance, Layout]]:
    """(name, instance, layout): PP 4-32, 1-8 distinct patterns, 16-112 microbatches at scale 1."""
    east_west = {"east": 1, "west": 1}
    mixtral_stages = [east_west, east_west, {"east": 2}, {"east": 2}, east_west, {"east": 1, "far": 1},
                      {"east": 1, "far": 1}, {"east": 2}]
    routes = [["east"] * 8, ["east", "west", "east", "east", "west", "far", "far", "east"],
              ["west", "east", "east", "east", "east", "east", "far", "east"],
              ["west", "west", "east", "east", "west", "far", "east", "east"]]
    mix_layout = {"shape": {"tp": 1, "ep": 8, "pp": 8, "dp": 16, "micro_batch": 1, "microbatches": 112 * scale},
                  "dp_mode": "fsdp",
                  "stages": [{"stage": j, "layers": 4, "cells_per_building": c} for j, c in enumerate(mixtral_stages)],
                  "pipelines": [{"buildings": r, "pipelines": 4} for r in routes]}
    zbv = {**mix_layout, "shape": {**mix_layout["shape"], "pp": 4, "dp": 32, "microbatches": 56 * scale},
           "stages": [{"stage": j, "layers": 8, "cells_per_building": c} for j, c in
                      enumerate([{"east": 2, "west": 2}, {"east": 4}, {"east": 2, "far": 2}, {"east": 4}])],
           "pipelines": None}
    llama_cells = [{"A": 4}] * 4 + [{"A": 2, "B": 2}] * 8 + [{"B": 4}] * 4
    llama_stages = [{"stage": j, "layers": 5, "cells_per_building": c} for j, c in enumerate(llama_cells)]
    llama = {"shape": {"tp": 8, "pp": 16, "dp": 4, "micro_batch": 1, "microbatches": 64 * scale},
             "schedule": "1f1b", "dp_mode": "fsdp-no-reshard", "stages": llama_stages}
    return [
        ("mixtral 1F1B fsdp pp8 4 patterns", mixtral(1792 * scale), Layout.model_validate({**mix_layout,
                                                                                           "schedule": "1f1b"})),
        ("mixtral ZB-V fsdp pp4", mixtral(1792 * scale), Layout.model_validate({**zbv, "schedule": "zb-v"})),
        ("llama3-70b 1F1B no-reshard pp16", llama70b(256 * scale), Layout.model_validate(llama)),
        ("llama3-405b GPipe fsdp pp32, 8 buildings", *llama405b_131k(scale)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="multiply the global batch (and microbatches)")
    args = parser.parse_args()
    print("| plan | GPUs | patterns | microbatches | flows | full replay | verify | iteration |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, instance, layout in cases(args.scale):
        resolved = resolve(instance, layout)
        workload = build_workload(instance, resolved)
        started = time.process_time()
        result = replay(workload, instance.topology, FULL)
        one = time.process_time() - started
        started = time.process_time()
        verification, _ = verify(instance, layout)
        whole = time.process_time() - started
        flows = sum(record.track.startswith("link ") for record in result.records)
        print(f"| {name} | {layout.shape.gpus:,} | {len(resolved.patterns)} | {layout.shape.microbatches} | "
              f"{flows:,} | {one:.2f} s | {whole:.2f} s | {verification.iteration_s:.4f} s |", flush=True)


if __name__ == "__main__":
    main()
