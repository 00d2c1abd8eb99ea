"""Solve every bundled instance and print build time, solve time, gap and model size per instance.

    python benchmarks/solve_instances.py [--time-limit S] [INSTANCE ...]

Targets (issue 2, 2 cores): the 131,072-GPU, 8-building instances to a proven gap <= 1% in under 60 s; every
other bundled instance in under 10 s.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.loader import load_instance
from scaleacross_milp.milp.solve import solve_instance

INSTANCES = Path(__file__).resolve().parents[1] / "instances"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instances", nargs="*", type=Path, default=sorted(INSTANCES.glob("*.json")))
    parser.add_argument("--time-limit", type=float, default=None, help="seconds; default: each instance's own")
    args = parser.parse_args()

    table = Table(title="scaleacross-milp: bundled instances")
    for column in ("instance", "GPUs", "build s", "HiGHS s", "wall s", "status", "iteration s", "bound s", "gap %",
                   "shapes solved / screened", "vars (bin/int)", "constraints"):
        table.add_column(column, justify="left" if column == "instance" else "right")
    console = Console(width=200)
    for path in args.instances:
        instance = load_instance(path)
        plan = solve_instance(instance, time_limit_s=args.time_limit)
        s = plan.solve
        gpus = sum(b.gpus for b in instance.topology.buildings)
        table.add_row(
            instance.name, f"{gpus:,}", f"{s.build_s:.2f}", f"{s.solver_s:.2f}", f"{s.wall_s:.2f}", s.status,
            f"{s.incumbent_s:.3f}", f"{s.bound_s:.3f}", f"{100 * s.rel_gap:.2f}",
            f"{s.shapes_solved} / {s.shapes_solved + s.shapes_pruned}",
            f"{s.variables} ({s.binaries}/{s.integers})", f"{s.constraints}",
        )
        console.print(f"solved {instance.name} in {s.wall_s:.1f} s")
    console.print(table)


if __name__ == "__main__":
    main()
