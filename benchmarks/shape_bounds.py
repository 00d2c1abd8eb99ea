"""Shape bounds against shape optima: every analytical bound must stay at or below its shape's MILP optimum.

    python benchmarks/shape_bounds.py [--size small] [--seeds 0 1 2 ...] [--shapes 12] [--time-limit S]

Per generated instance (scaleacross_milp.generate, seeded), the screened shapes with the least screening floors
(half of --shapes) and others drawn at random (the rest, seeded), each priced and its full MILP solved without the
search's bound row (`shape_floor`) within --time-limit. For the shapes whose MILP proves its optimum, the floor with
its crossing term (`Screening.crossing_floor_s`) and the sharpened bound (`bounds.first_stage_lower_bound_s`)
are compared with it: a bound above the optimum (beyond 1e-6) is a violation, and the bound would cut real layouts
off. Reports per shape and a summary: shapes proven, violations, and how close each bound gets (bound / optimum,
median and lowest), and how many floors the crossing term raised (above the compute floor alone by 1 %).
"""

from __future__ import annotations

import argparse
import random
import statistics

from rich.console import Console
from rich.table import Table

from scaleacross_milp.generate import Size, generate_instance
from scaleacross_milp.milp.bounds import first_stage_lower_bound_s
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import HighsModel, MILPStatus, SolverFailure, solve_milp
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.screen import screen
from scaleacross_milp.milp.shapes import per_requested

TOLERANCE = 1e-6
MAX_EXTENT = 400
"""Shapes whose model has more stages x buildings are skipped: their MILPs rarely prove an optimum in the limit."""


def check(size: Size, seed: int, shapes: int, time_limit_s: float) -> list[dict]:
    """The rows of one instance (module docstring)."""
    instance = generate_instance(seed, size)
    screening = screen(instance, route_table(instance.topology))
    ranked = sorted(screening.candidates, key=lambda c: c.floor_s)
    rest = ranked[shapes // 2:]
    picked = ranked[:shapes // 2] + random.Random(seed).sample(rest, min(len(rest), shapes - shapes // 2))
    rows = []
    for candidate in picked:
        ctx = screening.context(candidate)
        if len(ctx.buildings) * candidate.shape.pp > MAX_EXTENT:
            continue
        factor = per_requested(ctx)
        model = build_model(ctx)
        model.shape_floor.deactivate()
        try:
            outcome = solve_milp(HighsModel(model), time_limit_s=time_limit_s, rel_gap=1e-6, threads=1)
        except SolverFailure:  # a run killed past its limit (HiGHS's root cut loop) proves nothing: not proven
            outcome = None
        proven = outcome is not None and outcome.status is MILPStatus.optimal
        rows.append({"seed": seed, "shape": candidate.shape.label(),
                     "floor_s": screening.crossing_floor_s(candidate), "compute_floor_s": candidate.floor_s,
                     "sharpened_s": first_stage_lower_bound_s(ctx, ctx.pairs) * factor,
                     "optimum_s": outcome.bound * factor if proven else None})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=Size, default=Size.small)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(12)))
    parser.add_argument("--shapes", type=int, default=12)
    parser.add_argument("--time-limit", type=float, default=20.0)
    args = parser.parse_args()
    console = Console()
    table = Table("seed", "shape", "compute floor s", "floor s", "sharpened s", "optimum s", "")
    rows = [row for seed in args.seeds for row in check(args.size, seed, args.shapes, args.time_limit)]
    proven = [row for row in rows if row["optimum_s"] is not None]
    violations = 0
    for row in rows:
        optimum = row["optimum_s"]
        bad = optimum is not None and max(row["floor_s"], row["sharpened_s"]) > optimum * (1 + TOLERANCE)
        violations += bad
        table.add_row(str(row["seed"]), row["shape"], f"{row['compute_floor_s']:.4f}", f"{row['floor_s']:.4f}",
                      f"{row['sharpened_s']:.4f}", "-" if optimum is None else f"{optimum:.4f}",
                      "ABOVE THE OPTIMUM" if bad else "")
    console.print(table)
    console.print(f"{len(rows)} shapes, {len(proven)} proven optimal within {args.time_limit:g} s, "
                  f"{violations} bounds above their optimum")
    raised = sum(row["floor_s"] > 1.01 * row["compute_floor_s"] for row in rows)
    console.print(f"floors raised by the crossing term: {raised} of {len(rows)}")
    for name in ("floor_s", "sharpened_s"):
        ratios = [row[name] / row["optimum_s"] for row in proven]
        if ratios:
            console.print(f"{name[:-2]} / optimum: median {statistics.median(ratios):.3f}, lowest {min(ratios):.3f}")


if __name__ == "__main__":
    main()
