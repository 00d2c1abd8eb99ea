"""How the solve scales: screening, model build, HiGHS time, wall time and final gap as GPUs grow 1,024 -> 262,144
and buildings 2 -> 16, for a dense and a MoE model (issue 13).

    PYTHONPATH=. python benchmarks/scaling.py [--time-limit 60] [--models llama3-70b deepseek-v3]
        [--points 1024x2 4096x4 16384x8 65536x8 131072x16 262144x16] [--csv scaling.csv]

Each point is a generated instance (`generate.DesignPoint`: the model, B buildings of unequal sizes summing to the
GPUs in a chain of 50 km links, 1:4 cross-building oversubscription, no loss, H100 only, seed 0). Screening is
`milp.screen.screen` of every shape on its own (no deadline: the full screen the solve starts with), sharpen the
pricing of every shape that passed and the sharpening of its bounds over every pair (`bounds.first_stage_lower_bound_s`,
what the search does lazily for the shapes at the front of its queue); build is the
solve's screening plus Pyomo model building and translation to HiGHS (`SolveStats.build_s`), HiGHS the time inside
the solver (`solver_s`), wall the whole solve (verification excluded).
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.generate import DesignPoint, design_instance
from scaleacross_milp.milp.bounds import first_stage_lower_bound_s
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.screen import screen
from scaleacross_milp.milp.solve import NoPlanFound, solve_instance

DEFAULT_POINTS = ("1024x2", "4096x4", "16384x8", "65536x8", "131072x16", "262144x16")
"""GPUs x buildings: 1,024 to 262,144 GPUs, 2 to 16 buildings."""
COLUMNS = ["model", "gpus", "buildings", "shapes", "screen_s", "sharpen_s", "build_s", "highs_s", "wall_s", "status",
           "gap_pct", "iteration_s", "variables", "constraints"]


def point(text: str) -> tuple[int, int]:
    """`GPUSxBUILDINGS`, e.g. 131072x16."""
    gpus, buildings = text.lower().split("x")
    return int(gpus), int(buildings)


def measure(model: str, gpus: int, buildings: int, limit: float) -> dict[str, object]:
    """One point: its full screening on its own, then one solve under `limit`."""
    instance = design_instance(DesignPoint(model=model, buildings=buildings, distance_km=50.0, oversubscription=4.0,
                                           loss_rate=0.0, mixed=False, gpus=gpus))
    row: dict[str, object] = {"model": model, "gpus": gpus, "buildings": buildings}
    start = time.perf_counter()
    screening = screen(instance, route_table(instance.topology))
    row.update(screen_s=time.perf_counter() - start, shapes=screening.total)
    start = time.perf_counter()
    for candidate in screening.candidates:
        ctx = screening.context(candidate)
        first_stage_lower_bound_s(ctx, ctx.pairs)
    row.update(sharpen_s=time.perf_counter() - start)
    try:
        plan = solve_instance(instance, time_limit_s=limit)
    except NoPlanFound as exc:
        return row | {"status": "no plan", "wall_s": limit, "gap_pct": None, "iteration_s": None} | {
            "note": str(exc)}
    stats = plan.solve
    return row | {"build_s": stats.build_s, "highs_s": stats.solver_s, "wall_s": stats.wall_s, "status": stats.status,
                  "gap_pct": 100 * stats.rel_gap, "iteration_s": stats.incumbent_s, "variables": stats.variables,
                  "constraints": stats.constraints}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--models", nargs="+", default=["llama3-70b", "deepseek-v3"])
    parser.add_argument("--points", nargs="+", type=point,
                        default=[point(p) for p in DEFAULT_POINTS])
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    console, rows = Console(width=200), []
    table = Table(title=f"scaling (time limit {args.time_limit:g} s; times in s, gap in %)")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("model", "status") else "right")
    for model in args.models:
        for gpus, buildings in args.points:
            row = measure(model, gpus, buildings, args.time_limit)
            rows.append(row)
            console.print(f"{model} {gpus:,} GPUs / {buildings} buildings: {row['status']}, wall {row['wall_s']:.1f} s")
            table.add_row(*(f"{row[c]:,.2f}" if isinstance(row.get(c), float) else
                            f"{row[c]:,}" if isinstance(row.get(c), int) else str(row.get(c, "")) for c in COLUMNS))
    console.print(table)
    if args.csv:
        with args.csv.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
