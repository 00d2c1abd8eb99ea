"""Wall time against --time-limit: for each instance and limit, the solve's wall time (verification excluded), its
screening time, status and gap. Issue 13's promise: wall <= limit + 10 %.

    PYTHONPATH=. python benchmarks/time_limits.py [--limits 0.5 2 10] [--buildings 64 500 20000] [--out CSV]
        [--generated DIR] [INSTANCE ...]

Instances: the bundled ones (default), every JSON in --generated DIR (e.g. from `benchmarks/generate.py DIR --size
large`), and for each --buildings count B, B 128-GPU H100 buildings in sites of 8 training Llama 3 8B
(`sites_instance`): the many-buildings case, solved or refused up front (`InputError`, printed as "refused").
Screening time is that of `milp.screen.screen` on its own (the same work the solve starts with).
"""

from __future__ import annotations

import argparse
import csv
import gc
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.loader import load_instance
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.screen import screen
from scaleacross_milp.milp.solve import NoPlanFound, solve_instance
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError

ROOT = Path(__file__).resolve().parents[1]
INSTANCES = ROOT / "instances"


SITE_BUILDINGS = 8
"""Buildings per site in `sites_instance`."""


def sites_instance(buildings: int) -> Instance:
    """`buildings` 128-GPU H100 buildings in sites of SITE_BUILDINGS: each site a star of 5 km, 3.2 Tb/s links around
    its first building, the sites' first buildings on a ring of 500 km, 1.6 Tb/s links; Llama 3 8B with a batch of 8
    sequences per building (dp-out-2b-far-llama3-8b's model, training and GPU type)."""
    base = load_instance(INSTANCES / "dp-out-2b-far-llama3-8b.json")
    names = [f"b{k}" for k in range(buildings)]
    hubs = names[::SITE_BUILDINGS]

    def link(a: str, b: str, gbit: float, km: float) -> dict[str, object]:
        return {"a": a, "b": b, "capacity_gbit_s": gbit, "distance_km": km, "paths": 16,
                "transports": ["spray_selective_repeat"]}

    links = [link(names[k - k % SITE_BUILDINGS], names[k], 3200, 5) for k in range(buildings) if k % SITE_BUILDINGS]
    links += [link(hubs[k], hubs[(k + 1) % len(hubs)], 1600, 500) for k in range(len(hubs) if len(hubs) > 2 else 1)
              if len(hubs) > 1]
    data = base.model_dump(mode="json", exclude_none=True)
    data.update(name=f"sites-{buildings}b-llama3-8b", topology={
        "buildings": [{"name": name, "gpus": 128, "gpu_type": "h100-sxm"} for name in names], "links": links})
    data["training"]["global_batch_sequences"] = 8 * buildings
    return Instance.model_validate(data)


def measure(instance: Instance, limit: float) -> dict[str, object]:
    """One solve under `limit` and one screening on its own, each on a collected heap (the earlier solves' Pyomo
    models are cyclic garbage, which the collector would otherwise sweep inside this solve's limit, as a fresh
    `solve` process and a batch worker, `batch.worker.run_job`, never do)."""
    row: dict[str, object] = {"instance": instance.name, "buildings": len(instance.topology.buildings),
                              "gpus": sum(b.gpus for b in instance.topology.buildings), "limit_s": limit}
    gc.collect()
    start = time.perf_counter()
    try:
        plan = solve_instance(instance, time_limit_s=limit)
    except (InputError, NoPlanFound) as exc:
        row.update(wall_s=time.perf_counter() - start, status="refused" if isinstance(exc, InputError) else "no plan",
                   note=str(exc)[:80])
        return row
    row.update(wall_s=plan.solve.wall_s, status=plan.solve.status, iteration_s=plan.solve.incumbent_s,
               bound_s=plan.solve.bound_s, gap_pct=100 * plan.solve.rel_gap)
    gc.collect()
    start = time.perf_counter()
    screen(instance, route_table(instance.topology))
    row["screen_s"] = time.perf_counter() - start
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instances", nargs="*", type=Path, default=sorted(INSTANCES.glob("*.json")))
    parser.add_argument("--limits", nargs="+", type=float, default=[0.5, 2.0, 10.0])
    parser.add_argument("--buildings", nargs="*", type=int, default=[64, 500, 20000])
    parser.add_argument("--generated", type=Path, help="a folder of generated instances to add")
    parser.add_argument("--out", type=Path, help="CSV file to write the rows to")
    args = parser.parse_args()

    paths = list(args.instances) + (sorted(args.generated.glob("*.json")) if args.generated else [])
    instances = [load_instance(path) for path in paths] + [sites_instance(count) for count in args.buildings]
    columns = ["instance", "buildings", "gpus", "limit_s", "wall_s", "screen_s", "status", "iteration_s", "bound_s",
               "gap_pct", "note"]
    table = Table(title="wall time against --time-limit (verification excluded)")
    for column in columns:
        table.add_column(column, justify="left" if column in ("instance", "status", "note") else "right")
    console, rows = Console(width=220), []
    for instance in instances:
        for limit in args.limits:
            row = measure(instance, limit)
            rows.append(row)
            table.add_row(*(f"{row[c]:.2f}" if isinstance(row.get(c), float) else str(row.get(c, "")) for c in columns))
            console.print(f"{instance.name} @ {limit:g} s: {row['wall_s']:.2f} s, {row['status']}")
    console.print(table)
    if args.out:
        with args.out.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
