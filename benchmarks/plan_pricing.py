"""Pricing on fixed plans: the MILP's price of saved plans against their replay, apart from the search.

    python benchmarks/plan_pricing.py save DIR [--count 40] [--first-seed 0] [--size medium] [--time-limit 5]
    python benchmarks/plan_pricing.py price DIR [--csv out.csv] [--against before.csv]

The property suite's |MILP - replay| moves with the plans each time-limited search picks (a rerun of the same code
moves a few seeds' plans), so a pricing change measured there mixes with the search's swings. `save` solves each
generated instance once (`solve_instance`) and writes the instance and its plan to DIR; `price` prices every saved
plan with the MILP, every layout decision held (`milp.price.price_layout`, the plan's link transports included), and
replays it, with whichever code is on the path: run it once per version (PYTHONPATH to a worktree) on the same DIR.
It prints the median and worst |MILP - replay| / MILP and how many plans lie beyond 1 % and 3 %; with `--against`
(an earlier `--csv`), each plan whose difference moved by more than 0.3 points.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

from scaleacross_milp.generate import Size, generate_instance
from scaleacross_milp.loader import load_instance
from scaleacross_milp.milp.price import price_layout
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.spec.plan import Plan
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.verifier import verify

MOVED = 0.003
"""A plan whose difference moved by more than this (0.3 points) is listed by `--against`."""


def save(folder: Path, seeds: range, size: Size, time_limit_s: float) -> None:
    """Solve each generated instance once and write `inst-<size>-<seed>.json` and `plan-<size>-<seed>.json`."""
    folder.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        instance = generate_instance(seed, size)
        (folder / f"inst-{size.value}-{seed}.json").write_text(instance.model_dump_json(indent=1))
        plan = solve_instance(instance, time_limit_s=time_limit_s, threads=1)
        (folder / f"plan-{size.value}-{seed}.json").write_text(plan.model_dump_json(indent=1))
        print(f"{size.value}-{seed}: {plan.shape.label()} {plan.schedule.value} {plan.dp_mode.value}, "
              f"{plan.prediction.iteration_s:.3f} s", flush=True)


def price(folder: Path) -> list[dict[str, object]]:
    """One row per saved plan: its MILP price and replay (seconds) and (replay - MILP) / MILP, as the property suite
    reports it (None where the MILP cannot hold the layout)."""
    rows = []
    for path in sorted(folder.glob("plan-*.json"), key=lambda p: (len(p.stem), p.stem)):
        tag = path.stem.removeprefix("plan-")
        instance = load_instance(folder / f"inst-{tag}.json")
        layout = resolve(instance, Plan.model_validate_json(path.read_text())).placed()  # its transports written out
        milp = price_layout(instance, layout)
        replayed = verify(instance, layout)[0].iteration_s
        rows.append({"plan": tag, "milp_s": milp, "replay_s": replayed,
                     "difference": None if milp is None else (replayed - milp) / milp,
                     "layout": f"{layout.shape.label()} {layout.schedule.value} v{layout.interleave} "
                               f"{layout.dp_mode.value}"})
        priced = "not held" if milp is None else f"{milp:.4f} s"
        print(f"{tag}: MILP {priced}, replay {replayed:.4f} s, {rows[-1]['layout']}", flush=True)
    return rows


def summary(rows: list[dict[str, object]]) -> str:
    """Median and worst |difference|, and how many plans lie beyond 1 % and 3 % (unpriced plans counted apart)."""
    spread = [abs(float(row["difference"])) for row in rows if row["difference"] not in (None, "")]
    if not spread:
        return "no plan priced"
    return (f"{len(spread)} plans priced ({len(rows) - len(spread)} not): |MILP - replay| / MILP median "
            f"{statistics.median(spread):.2%}, worst {max(spread):.2%}; beyond 1 %: {sum(d > 0.01 for d in spread)}, "
            f"beyond 3 %: {sum(d > 0.03 for d in spread)}")


def moved(rows: list[dict[str, object]], before: Path) -> list[str]:
    """The plans whose difference moved by more than MOVED since the rows of `before`."""
    earlier = {row["plan"]: row for row in csv.DictReader(before.open())}
    lines = []
    for row in rows:
        old = earlier.get(str(row["plan"]))
        if old is None or old["difference"] == "" or row["difference"] is None:
            continue
        if abs(float(row["difference"]) - float(old["difference"])) > MOVED:
            lines.append(f"{row['plan']}: {float(old['difference']):+.2%} -> {float(row['difference']):+.2%} "
                         f"{row['layout']}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    saving = commands.add_parser("save", help="solve generated instances once and save their plans")
    saving.add_argument("folder", type=Path)
    saving.add_argument("--count", type=int, default=40)
    saving.add_argument("--first-seed", type=int, default=0)
    saving.add_argument("--size", type=Size, default=Size.medium, choices=list(Size))
    saving.add_argument("--time-limit", type=float, default=5.0, help="seconds per solve")
    pricing = commands.add_parser("price", help="price and replay every saved plan")
    pricing.add_argument("folder", type=Path)
    pricing.add_argument("--csv", type=Path, default=None, help="write the per-plan rows here")
    pricing.add_argument("--against", type=Path, default=None, help="an earlier --csv to compare with")
    args = parser.parse_args()
    if args.command == "save":
        save(args.folder, range(args.first_seed, args.first_seed + args.count), args.size, args.time_limit)
        return
    rows = price(args.folder)
    if args.csv is not None:
        with args.csv.open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else ["plan"])
            writer.writeheader()
            writer.writerows(rows)
    for line in moved(rows, args.against) if args.against is not None else []:
        print(line)
    print(summary(rows))


if __name__ == "__main__":
    main()
