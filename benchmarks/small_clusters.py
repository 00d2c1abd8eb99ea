"""Small clusters over many zones: issue 12's five-zone cloud scenario and its target, up to 1,000 GPUs and 8
buildings proven within 1 % in 2 s on 2 cores.

    PYTHONPATH=. python benchmarks/small_clusters.py [--gpus 160 400 640 1000] [--zones 5 8] [--limits 2 10 30]
        [--out CSV]

Each point is `zones_instance(gpus, zones)`: a 407M-parameter GPT (GPT-3 350M's shape, 24 layers of 1,024, seq 2,048,
TF32 on A100 40GB, no recompute, batch 1,024 sequences), its GPUs spread over the zones in unequal shares (1 : 1.5 :
2 : ... in 8-GPU nodes), every pair of zones joined by a 400 Gb/s, 4-path ECMP go-back-N link of 30 + 20 |i - j| km.
Per point and limit: wall time, status, iteration time, bound and gap.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.milp.solve import NoPlanFound, solve_instance
from scaleacross_milp.spec.instance import Instance

GPT_407M = {"name": "gpt-407m", "layers": 24, "hidden": 1024, "ffn_hidden": 4096, "heads": 16, "kv_heads": 16,
            "vocab": 50257, "gated_ffn": False}
A100_40GB = {"peak_dense_tflops": {"bf16": 312, "tf32": 156, "fp32": 19.5}, "hbm_gib": 40, "hbm_tbyte_s": 1.555,
             "nvlink_domain_gpus": 8, "nvlink_gbyte_s": 300, "nic_gbit_s": 100}
"""A100 SXM4 40GB datasheet figures (dense TF32 156 TFLOP/s, 1,555 GB/s HBM2)."""


def zone_gpus(gpus: int, zones: int) -> list[int]:
    """`gpus` over `zones` in shares 2 : 3 : ... : zones + 1, whole 8-GPU nodes, the remainder to the last zone."""
    weights = [k + 2 for k in range(zones)]
    nodes = [max(1, round(gpus / 8 * w / sum(weights))) for w in weights]
    nodes[-1] += gpus // 8 - sum(nodes)
    return [8 * n for n in nodes]


def zones_instance(gpus: int, zones: int) -> Instance:
    """The scenario of the module docstring."""
    names = [f"z{k}" for k in range(zones)]
    return Instance.model_validate({
        "name": f"zones{zones}-{gpus}",
        "model": GPT_407M,
        "training": {"seq_len": 2048, "global_batch_sequences": 1024, "precision": "tf32", "recompute": "none"},
        "gpu_types": {"a100-40": A100_40GB},
        "topology": {
            "buildings": [{"name": name, "gpus": count, "gpu_type": "a100-40"}
                          for name, count in zip(names, zone_gpus(gpus, zones), strict=True)],
            "links": [{"a": names[i], "b": names[j], "capacity_gbit_s": 400, "distance_km": 30 + 20 * (j - i),
                       "paths": 4, "transports": ["ecmp_go_back_n"]}
                      for i in range(zones) for j in range(i + 1, zones)]},
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", nargs="+", type=int, default=[160, 400, 640, 1000])
    parser.add_argument("--zones", nargs="+", type=int, default=[5, 8])
    parser.add_argument("--limits", nargs="+", type=float, default=[2.0, 10.0, 30.0])
    parser.add_argument("--out", type=Path, help="CSV file to write the rows to")
    args = parser.parse_args()

    columns = ["instance", "limit_s", "wall_s", "status", "iteration_s", "bound_s", "gap_pct"]
    table = Table(title="small clusters over many zones (target: optimal within 1 % in 2 s)")
    for column in columns:
        table.add_column(column, justify="left" if column in ("instance", "status") else "right")
    rows = []
    for zones in args.zones:
        for gpus in args.gpus:
            instance = zones_instance(gpus, zones)
            for limit in args.limits:
                row: dict[str, object] = {"instance": instance.name, "limit_s": limit}
                try:
                    solve = solve_instance(instance, time_limit_s=limit).solve
                    row.update(wall_s=solve.wall_s, status=solve.status, iteration_s=solve.incumbent_s,
                               bound_s=solve.bound_s, gap_pct=100 * solve.rel_gap)
                except NoPlanFound:
                    row.update(status="no plan")
                rows.append(row)
                table.add_row(*(f"{row[c]:.3f}" if isinstance(row.get(c), float) else str(row.get(c, ""))
                                for c in columns))
    Console(width=160).print(table)
    if args.out:
        with args.out.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
