"""Agreement: the MILP's price of a layout against the verifier's replay of it, over many layouts, not only the
optimiser's plans (issue 12: the MILP must rank layouts as the replay does).

    python benchmarks/agreement.py [--points 0 3] [--sample 60] [--seed 0] [--csv out.csv]

Per design point of benchmarks/optimality.py (small 2-3 building instances, the same restricted search), a seeded
sample of the layouts exhaustive enumeration walks (scaleacross_milp.baselines.exhaustive.layouts) is priced twice:
by the MILP with every decision fixed (scaleacross_milp.milp.price.price_layout) and by the replay. The difference
is (MILP - replay) / replay. Printed: median, 90th percentile and worst |difference| per schedule, DP mode, link
transport and layout pattern, the share of layout pairs both order the same way, and the worst layouts; every
layout goes to the CSV with its JSON (for `scaleacross-milp evaluate`).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import itertools
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.baselines.exhaustive import layouts
from scaleacross_milp.baselines.pricing import replay_s
from scaleacross_milp.milp.extract import layout_pattern
from scaleacross_milp.milp.price import price_layout
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Layout

_spec = importlib.util.spec_from_file_location("optimality", Path(__file__).with_name("optimality.py"))
optimality = sys.modules.setdefault("optimality", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(optimality)


def pattern(layout: Layout) -> str:
    return layout_pattern(layout.stages, layout.pipelines).split(" ")[0]


def transports(layout: Layout) -> str:
    return ",".join(t.value for t in layout.link_transports().values()) if pattern(layout) != "single-building" \
        else "none"


def groups(row: dict[str, object]) -> dict[str, str]:
    return {"schedule": str(row["schedule"]), "DP mode": str(row["dp_mode"]), "transports": str(row["transports"]),
            "pattern": str(row["pattern"])}


def sample_rows(index: int, count: int, seed: int) -> list[dict[str, object]]:
    """`count` feasible layouts of point `index`, each priced by the MILP and replayed."""
    instance = optimality.restricted(optimality.POINTS[index])
    every = list(layouts(instance))
    random.Random(seed).shuffle(every)
    routes, rows = route_table(instance.topology), []
    for layout in every:
        replayed = replay_s(instance, layout)
        milp = price_layout(instance, layout, routes) if replayed is not None else None
        if replayed is None or milp is None:
            continue
        rows.append({"point": index, "layout": optimality.layout_label(layout),
                     "schedule": layout.schedule.value + (f" v{layout.interleave}" if layout.interleave > 1 else ""),
                     "dp_mode": layout.dp_mode.value, "transports": transports(layout), "pattern": pattern(layout),
                     "milp_s": milp, "replay_s": replayed, "difference": (milp - replayed) / replayed,
                     "layout_json": layout.model_dump_json(exclude_none=True)})
        if len(rows) == count:
            break
    return rows


def concordance(rows: list[dict[str, object]]) -> float:
    """Share of same-point layout pairs that the MILP and the replay order the same way."""
    agree = total = 0
    for a, b in itertools.combinations(rows, 2):
        if a["point"] != b["point"] or a["replay_s"] == b["replay_s"]:
            continue
        total += 1
        agree += (a["milp_s"] < b["milp_s"]) == (a["replay_s"] < b["replay_s"])
    return agree / total if total else 1.0


def summary_table(rows: list[dict[str, object]]) -> Table:
    table = Table(title="|MILP - replay| / replay over sampled layouts")
    for column in ("group", "value", "layouts", "median %", "p90 %", "worst %", "mean signed %"):
        table.add_column(column, justify="left" if column in ("group", "value") else "right")
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        by["all", ""].append(row["difference"])
        for group, value in groups(row).items():
            by[group, value].append(row["difference"])
    for (group, value), diffs in sorted(by.items()):
        size = sorted(abs(d) for d in diffs)
        table.add_row(group, value, str(len(diffs)), f"{100 * statistics.median(size):.2f}",
                      f"{100 * size[int(0.9 * (len(size) - 1))]:.2f}", f"{100 * size[-1]:.2f}",
                      f"{100 * statistics.mean(diffs):+.2f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, nargs="+", default=None, help="run only these indices of POINTS")
    parser.add_argument("--sample", type=int, default=60, help="layouts per point")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", type=Path, default=None, help="write every layout's row to this file")
    args = parser.parse_args()

    console = Console(width=200)
    rows: list[dict[str, object]] = []
    for index in args.points if args.points is not None else range(len(optimality.POINTS)):
        point_rows = sample_rows(index, args.sample, args.seed)
        rows += point_rows
        worst = max((abs(r["difference"]) for r in point_rows), default=0.0)
        console.print(f"point {index} {optimality.POINTS[index].label}: {len(point_rows)} layouts, worst "
                      f"{100 * worst:.1f} %", markup=False)
    if not rows:
        return
    console.print(summary_table(rows))
    console.print(f"pairs ordered alike: {100 * concordance(rows):.1f} %")
    worst = Table(title="worst layouts")
    for column in ("point", "layout", "transports", "MILP s", "replay s", "difference %"):
        worst.add_column(column)
    for row in sorted(rows, key=lambda r: -abs(r["difference"]))[:12]:
        worst.add_row(str(row["point"]), str(row["layout"]), str(row["transports"]), f"{row['milp_s']:.4f}",
                      f"{row['replay_s']:.4f}", f"{100 * row['difference']:+.1f}")
    console.print(worst)
    if args.csv is None:
        return
    with args.csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    console.print(f"{len(rows)} layouts written to {args.csv}")


if __name__ == "__main__":
    main()
