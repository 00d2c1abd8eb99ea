"""Optimality: the optimiser's verified time against the exhaustive optimum on small generated instances.

    python benchmarks/optimality.py [--instances N] [--limit LAYOUTS] [--time-limit S] [--csv PATH]

Instances: the seeded generator's `small` instances (scaleacross_milp.generate, seeds 0, 1, ...) with 2-3
buildings, each with its search restricted to SEARCH (the same restriction for the MILP and for the enumeration,
so both search one space), taken in seed order while the exhaustive count (baselines.exhaustive.count_layouts)
stays within --limit, until N are found. Per instance: the exhaustive optimum (every layout replayed), the MILP's
plan replayed by the verifier, their ratio (target <= 1.01), the MILP's proven gap, and whether the MILP's bound stays
below the exhaustive optimum's verified time (it bounds the MILP's own model of the time, so a bound above the
replayed optimum shows a term the MILP over-prices against the replay).
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.baselines.exhaustive import count_layouts, exhaustive
from scaleacross_milp.generate import generate_instance, link_class
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import SearchOptions
from scaleacross_milp.verify.verifier import verify

SEARCH = {"tp_degrees": [8], "cp_degrees": [1], "micro_batch_sizes": [1], "pp_degrees": [1, 2],
          "interleave_chunks": [2], "schedules": ["1f1b", "interleaved"], "dp_modes": ["fsdp", "hsdp"]}
"""The searched space of every instance: TP 8, CP 1, micro-batch 1, PP 1 or 2, 1F1B or interleaved (v = 2), FSDP or
HSDP; layer splits, placements, DP and EP degrees and transports stay free."""
MAX_BUILDINGS = 3
COLUMNS = ("seed", "model", "GPUs", "buildings", "GPU types", "links", "layouts", "replayed", "optimum", "exhaustive s",
           "MILP verified s", "ratio", "MILP gap %", "MILP bound s", "bound <= optimum", "exhaustive wall s",
           "MILP wall s")


def restricted(seed: int) -> Instance:
    instance = generate_instance(seed, "small")
    search = SearchOptions.model_validate({**instance.search.model_dump(), **SEARCH})
    return instance.model_copy(update={"search": search})


def suite(count: int, limit: int) -> list[tuple[int, Instance, int]]:
    """(seed, instance, layouts) of the first `count` small seeds with at most MAX_BUILDINGS buildings and at most
    `limit` layouts."""
    found, seed = [], 0
    while len(found) < count:
        instance = restricted(seed)
        if len(instance.topology.buildings) <= MAX_BUILDINGS:
            layouts, _ = count_layouts(instance)
            if layouts <= limit:
                found.append((seed, instance, layouts))
        seed += 1
    return found


def links_label(instance: Instance) -> str:
    return ", ".join(f"{link_class(link)} {link.capacity_gbit_s:g} Gb/s" + (f" loss {link.loss_rate:g}"
                                                                             if link.loss_rate else "")
                     for link in instance.topology.links)


def layout_label(layout: Layout) -> str:
    """Shape, schedule, DP mode and the buildings each stage's cells sit in."""
    cells = " | ".join(",".join(f"{k}:{n}" for k, n in sorted(s.cells_per_building.items())) for s in layout.stages)
    return f"{layout.shape.label()} {layout.schedule.value} {layout.dp_mode.value} [{cells}]"


def row(seed: int, instance: Instance, layouts: int, time_limit: float) -> dict[str, object]:
    started = time.perf_counter()
    best = exhaustive(instance, limit=layouts)
    exhaustive_wall = time.perf_counter() - started
    started = time.perf_counter()
    plan = solve_instance(instance, time_limit_s=time_limit)
    milp_wall = time.perf_counter() - started
    verified = verify(instance, plan)[0].iteration_s
    buildings = instance.topology.buildings
    return {
        "seed": seed, "model": instance.model_spec.name, "GPUs": sum(b.gpus for b in buildings),
        "buildings": len(buildings), "GPU types": "+".join(sorted({b.gpu_type for b in buildings})),
        "links": links_label(instance), "layouts": layouts, "replayed": best.evaluated,
        "optimum": layout_label(best.layout),
        "exhaustive s": best.iteration_s, "MILP verified s": verified, "ratio": verified / best.iteration_s,
        "MILP gap %": 100 * plan.solve.rel_gap, "MILP bound s": plan.solve.bound_s,
        "bound <= optimum": plan.solve.bound_s <= best.iteration_s, "exhaustive wall s": exhaustive_wall,
        "MILP wall s": milp_wall,
    }


def cell(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=10)
    parser.add_argument("--limit", type=int, default=5000, help="most layouts per instance")
    parser.add_argument("--time-limit", type=float, default=20.0, help="MILP seconds per instance")
    parser.add_argument("--csv", type=Path, default=Path("optimality.csv"))
    args = parser.parse_args()

    console = Console(width=240)
    rows = []
    for seed, instance, layouts in suite(args.instances, args.limit):
        try:
            rows.append(row(seed, instance, layouts, args.time_limit))
        except InputError as exc:
            console.print(f"seed {seed}: skipped ({exc})")
            continue
        console.print(f"seed {seed}: ratio {rows[-1]['ratio']:.4f} ({rows[-1]['replayed']} layouts replayed)")
    table = Table(title="MILP plan (verified) vs exhaustive optimum")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("model", "GPU types", "links", "optimum") else "right")
    for values in rows:
        table.add_row(*(cell(values[column]) for column in COLUMNS))
    console.print(table)
    if rows:
        ratios = [values["ratio"] for values in rows]
        console.print(f"ratio: max {max(ratios):.4f}, above 1.01 on {sum(r > 1.01 for r in ratios)} of {len(rows)}; "
                      f"bound above the optimum on {sum(not v['bound <= optimum'] for v in rows)}")
    with args.csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    console.print(f"CSV written to {args.csv}")


if __name__ == "__main__":
    main()
