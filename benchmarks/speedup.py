"""Speedup suite: the optimiser's verified iteration time against the production, framework and single-dimension
baselines on seeded design points (issue 14).

    python benchmarks/speedup.py [--count 48] [--seed 0] [--points 0 5 7] [--time-limit 10] [--workers 1]
                                 [--csv speedup.csv]

Design points (`design_points`, scaleacross_milp.generate.DesignPoint, built by generate.design_instance): every
factor's levels are repeated to `count` points and shuffled on their own by `seed` (a balanced design: each level
appears count / levels times, rounded), the rest of each instance (building sizes, pods, paths, queue pairs,
transports) drawn from the point's seed:
  model             Llama 3 70B, Llama 3 405B, Mixtral 8x7B, DeepSeek-V3 (models/)
  buildings         2, 4, 8 (in a chain)
  distance          1, 50, 1,000 km per link
  oversubscription  cross-building 1:1, 1:2, 1:4, 1:8, 1:16 (link capacity = the smaller end's NIC bandwidth / ratio)
  loss              0, 1e-5, 1e-4, 1e-3 on every link
  GPU types         uniform (H100) or mixed (2-3 of A100, H100, B200)
  GPUs              a power of two in the model's range (GPU_RANGE): 256-512 for the 70B and 47B models,
                    512-1,024 for the 405B and 671B ones; 2 sequences of 4,096 tokens per node
Per point: the optimiser's plan (milp.solve.solve_instance) and every baseline (baselines.compare.compare: each
replayed by the verifier), the verified times, and speedup S_b = T_b / T_opt - 1 (the paper's convention; every
layout runs the instance's batch, `batch_rounding` exact). Summary per baseline: max S_b (and its point), the
geometric mean, exp(mean ln(1 + S_b)) - 1, and the point where it loses most. `dimensions` names what the plan
changes against production: shape, placement (cells per building and stage), schedule, DP mode, transports.
"""

from __future__ import annotations

import argparse
import csv
import math
import multiprocessing
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.baselines import Kind
from scaleacross_milp.baselines.compare import compare
from scaleacross_milp.generate import DesignPoint, design_instance
from scaleacross_milp.milp.solve import NoPlanFound, solve_instance
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout, dp_mode_label, schedule_label
from scaleacross_milp.verify.verifier import verify

sys.path.insert(0, str(Path(__file__).resolve().parent))
from property_suite import ReplayTooSlow, replay_cap  # noqa: E402 - the benchmarks' own wall-clock cap

MODELS = ("llama3-70b", "llama3-405b", "mixtral-8x7b", "deepseek-v3")
BUILDINGS = (2, 4, 8)
DISTANCES_KM = (1.0, 50.0, 1000.0)
OVERSUBSCRIPTION = (1.0, 2.0, 4.0, 8.0, 16.0)
LOSS = (0.0, 1e-5, 1e-4, 1e-3)
MIXED = (False, True)
GPU_RANGE = {"llama3-70b": (256, 512), "mixtral-8x7b": (256, 512), "llama3-405b": (512, 1024),
             "deepseek-v3": (512, 1024)}
"""Cluster GPUs per model (powers of two, at least 64 a building): the training state (18 bytes a parameter) takes
3-35 % of the HBM. Larger clusters multiply the replays' pipelines and microbatches (an 8-building DeepSeek-V3 point
of 2,048 GPUs took 7 minutes with its baselines on 2 shared cores)."""
BASELINES = (Kind.production, Kind.framework, Kind.single_dimension)
POINT_LIMIT_S = 240.0
"""A point still running after this wall time (solve, replays and baselines) is stopped and reported ("stopped"):
one solve can hang (README, Speedup over baselines)."""


def design_points(count: int = 48, seed: int = 0) -> list[DesignPoint]:
    """`count` points of a balanced design (module docstring), deterministic per `seed`."""
    rng = random.Random(f"speedup-{seed}")

    def column(levels: tuple) -> list:
        values = [levels[i % len(levels)] for i in range(count)]
        rng.shuffle(values)
        return values

    columns = zip(column(MODELS), column(BUILDINGS), column(DISTANCES_KM), column(OVERSUBSCRIPTION), column(LOSS),
                  column(MIXED), strict=True)
    points = []
    for index, (model, buildings, km, ratio, loss, mixed) in enumerate(columns):
        low, high = GPU_RANGE[model]
        sizes = [2**k for k in range(low.bit_length() - 1, high.bit_length()) if 2**k >= 64 * buildings]
        points.append(DesignPoint(model=model, buildings=buildings, distance_km=km, oversubscription=ratio,
                                  loss_rate=loss, mixed=mixed, gpus=rng.choice(sizes or [high]),
                                  seed=seed * 1000 + index))
    return points


@dataclass
class Outcome:
    """One design point's figures; `times` and `speedups` keyed by baseline kind (None: not built, see `notes`);
    `layouts` holds the plan (key "optimiser") and each priced baseline's layout (not written to the CSV)."""

    index: int
    point: str
    gpus: int
    status: str = ""
    optimizer_s: float | None = None
    gap: float | None = None
    plan: str = ""
    times: dict[str, float | None] = field(default_factory=dict)
    speedups: dict[str, float | None] = field(default_factory=dict)
    dimensions: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    error: str = ""
    wall_s: float = 0.0
    layouts: dict[str, Layout] = field(default_factory=dict)


def plan_label(layout: Layout) -> str:
    """Shape, schedule, DP mode and the buildings each stage's cells sit in."""
    cells = " | ".join(",".join(f"{k}:{n}" for k, n in sorted(s.cells_per_building.items())) for s in layout.stages)
    return f"{layout.shape.label()} {schedule_label(layout)} {dp_mode_label(layout)} [{cells}]"


def dimensions(plan: Layout, other: Layout) -> str:
    """The dimensions in which `plan` differs from `other`: shape, placement, schedule, DP mode, transports."""
    placement = [(s.layers, dict(sorted(s.cells_per_building.items()))) for s in plan.stages]
    theirs = [(s.layers, dict(sorted(s.cells_per_building.items()))) for s in other.stages]
    differs = {"shape": plan.shape != other.shape, "placement": placement != theirs,
               "schedule": schedule_label(plan) != schedule_label(other),
               "DP mode": dp_mode_label(plan) != dp_mode_label(other),
               "transports": plan.link_transports() != other.link_transports()}
    return ", ".join(name for name, flag in differs.items() if flag) or "none"


def run_point(index: int, point: DesignPoint, time_limit_s: float, threads: int = 1) -> Outcome:
    """Solve, verify and compare one design point (in a worker process); a point without a plan (InputError,
    NoPlanFound), stopped after POINT_LIMIT_S, or whose solve, replay or baselines raise anything else ("crash") is
    returned with its message."""
    started = time.perf_counter()
    out = Outcome(index=index, point=point.label, gpus=point.gpus)
    try:
        with replay_cap(POINT_LIMIT_S):
            _measure(out, design_instance(point), time_limit_s, threads)
    except ReplayTooSlow:
        out.status, out.error = "stopped", f"still running after {POINT_LIMIT_S:g} s"
    except (InputError, NoPlanFound) as exc:
        out.status, out.error = "no plan", str(exc)
    except Exception as exc:  # noqa: BLE001 - one point's crash is reported, the suite goes on
        out.status, out.error = "crash", f"{type(exc).__name__}: {exc}"
    out.wall_s = time.perf_counter() - started
    return out


def _measure(out: Outcome, instance: Instance, time_limit_s: float, threads: int) -> None:
    """Fill `out` with the plan's and every baseline's verified time and the speedups."""
    plan = solve_instance(instance, time_limit_s=time_limit_s, threads=threads)
    verification, _ = verify(instance, plan)
    out.status, out.gap, out.optimizer_s, out.plan = plan.solve.status, plan.solve.rel_gap, \
        verification.iteration_s, plan_label(plan)
    out.layouts["optimiser"] = plan
    for row in compare(instance, verification.tokens_per_s, time_limit_s):
        if row.kind == Kind.exhaustive.value:
            continue
        out.times[row.kind] = row.iteration_s
        out.speedups[row.kind] = None if row.iteration_s is None else row.iteration_s / out.optimizer_s - 1
        out.dimensions[row.kind] = dimensions(plan, row.layout) if row.layout else ""
        out.notes[row.kind] = row.note
        if row.layout is not None:
            out.layouts[row.kind] = row.layout


def geometric_mean(speedups: list[float]) -> float:
    """exp(mean ln(1 + S)) - 1."""
    return math.exp(sum(math.log1p(s) for s in speedups) / len(speedups)) - 1


def summary(outcomes: list[Outcome]) -> list[str]:
    """Per baseline: points priced, max speedup with its point, geometric mean, least speedup with its point."""
    lines = []
    for kind in BASELINES:
        priced = [(o.speedups[kind.value], o) for o in outcomes if o.speedups.get(kind.value) is not None]
        if not priced:
            lines.append(f"{kind.value}: no point priced")
            continue
        best, least = max(priced, key=lambda p: p[0]), min(priced, key=lambda p: p[0])
        lines.append(f"{kind.value}: {len(priced)} points; max {100 * best[0]:+.1f} % (#{best[1].index} "
                     f"{best[1].point}: {best[1].dimensions[kind.value]}), geometric mean "
                     f"{100 * geometric_mean([s for s, _ in priced]):+.1f} %, least {100 * least[0]:+.1f} % "
                     f"(#{least[1].index} {least[1].point})")
    failed = [o for o in outcomes if o.error]
    lines += [f"#{o.index} {o.point}: {o.status}: {o.error}" for o in failed]
    return lines


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f} %"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(outcomes: list[Outcome]) -> Table:
    result = Table(title="Optimiser vs baselines (verified iteration time, s; speedup = baseline / optimiser - 1)")
    for column in ("#", "point", "status", "gap", "optimiser", *(k.value for k in BASELINES),
                   *(f"S {k.value}" for k in BASELINES), "plan"):
        result.add_column(column, justify="left" if column in ("point", "plan", "status") else "right")
    for o in outcomes:
        result.add_row(str(o.index), o.point, o.status, _pct(o.gap).lstrip("+"), _s(o.optimizer_s),
                       *(_s(o.times.get(k.value)) for k in BASELINES), *(_pct(o.speedups.get(k.value))
                                                                          for k in BASELINES), o.plan)
    return result


def csv_row(o: Outcome) -> dict[str, object]:
    flat = {k: v for k, v in asdict(o).items() if k not in ("times", "speedups", "dimensions", "notes", "layouts")}
    for kind in BASELINES:
        flat |= {f"{kind.value} s": o.times.get(kind.value), f"{kind.value} speedup": o.speedups.get(kind.value),
                 f"{kind.value} dimensions": o.dimensions.get(kind.value, ""),
                 f"{kind.value} note": o.notes.get(kind.value, "")}
    return flat


def write_csv(outcomes: list[Outcome], path: Path) -> None:
    rows = [csv_row(o) for o in outcomes]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=48, help="design points (indices 0 .. count - 1)")
    parser.add_argument("--seed", type=int, default=0, help="the design's seed")
    parser.add_argument("--points", type=int, nargs="+", default=None, help="run only these indices")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per MILP solve")
    parser.add_argument("--threads", type=int, default=1, help="HiGHS threads per solve")
    parser.add_argument("--workers", type=int, default=1, help="points run at once, one spawned process each")
    parser.add_argument("--csv", type=Path, default=None, help="write the per-point rows here")
    args = parser.parse_args()

    console = Console(width=260)
    points = design_points(args.count, args.seed)
    indices = args.points if args.points is not None else range(len(points))
    outcomes = []
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(run_point, i, points[i], args.time_limit, args.threads) for i in indices]
        for future in as_completed(futures):
            out = future.result()
            outcomes.append(out)
            console.print(f"#{out.index} {out.point}: {out.status} ({out.wall_s:.0f} s) "
                          + " ".join(f"{k} {_pct(s)}" for k, s in out.speedups.items()) + f" {out.error}",
                          markup=False)
            if args.csv is not None:
                write_csv(sorted(outcomes, key=lambda o: o.index), args.csv)
    outcomes.sort(key=lambda o: o.index)
    console.print(table(outcomes))
    for line in summary(outcomes):
        console.print(line, markup=False)


if __name__ == "__main__":
    main()
