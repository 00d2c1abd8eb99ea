"""Property suite on generated instances (issue 12): solve each, replay the plan, and check what must hold on any
valid instance.

    python benchmarks/property_suite.py [--count 200] [--first-seed 0 | --seeds N ...] [--size medium] [--time-limit S]
                                        [--threads 1] [--workers 1] [--csv out.csv] [--plans DIR]

Per instance (scaleacross_milp.generate, seeded), with T the optimizer's replayed (verified) time and TOL the
verifier's agreement tolerance (verify.verifier.TOLERANCE, 10 %):
  restrictions  T <= (1 + TOL) min_k T_k, T_k the replay (in the full instance) of the plan solved the same way on
                the instance restricted to building k. A building dominated by another (a GPU type at least as
                good on every datasheet figure, at least as many GPUs, pods at least as large and no more
                oversubscribed) cannot do better alone, so only undominated buildings are solved.
  patterns      T <= (1 + TOL) min T_P over DP-out and PP-out layouts over the fastest buildings, replayed by the
                verifier: from the optimizer's plan and the two best restrictions, DP-out replicates the shape's
                pipelines (same layers per stage) over the fastest buildings at the largest DP the batch allows,
                and PP-out deepens the pipeline (same DP) with whole stages filling the fastest buildings in
                contiguous blocks (layers in proportion to each building's speed). Each layout keeps its schedule
                and DP mode, uses the most efficient transport on each link (costmodel.network) and is kept only
                when it is in the searched space (degrees, schedule options) and fits in every building's HBM
                (the MILP's memory model, milp.bounds.stage_memory).
  agreement     |T - MILP| <= TOL * MILP.
  bound         the reported bound <= (1 + TOL) x every evaluated layout's replayed time (the plan's own, the
                restrictions', the patterns').
  time          the solve's wall time <= 1.1 x its time limit.
The ratio checks allow TOL because the optimizer ranks layouts by its prediction, which may differ from the replay
by TOL; the table and summary show the raw ratios. An instance whose solve raises InputError (exit 2: infeasible) is
counted and listed, any other exception (or a plan that does not replay) as a crash with its message. Every replay
is stopped after REPLAY_LIMIT_S (a crash for the plan's, a failure for the other layouts'; after one pattern layout
too slow to replay, the instance's other pattern layouts are skipped). With --plans DIR (a new directory), every
instance that fails a property leaves its instance and plan there (`NAME.instance.json`, `NAME.plan.json`), to be
run again with `scaleacross-milp evaluate`: a 5 s search's plan depends on the machine's load and the worker's
earlier solves, and may not come back when the seed is solved alone.
"""

from __future__ import annotations

import argparse
import csv
import math
import multiprocessing
import signal
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.schedule import ScheduleOption, searched_options
from scaleacross_milp.gcpause import collect_left_cycles
from scaleacross_milp.generate import Size, generate_instance
from scaleacross_milp.milp.bounds import stage_memory
from scaleacross_milp.milp.context import ShapeContext, shape_context
from scaleacross_milp.milp.patterns import Cells, dp_out_cells, fastest_first, pp_out_cells, speed_layers
from scaleacross_milp.milp.price import layout_option
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.shapes import pipeline_degrees
from scaleacross_milp.milp.solve import NoPlanFound, solve_instance
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout, Plan, StagePlacement
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.topology import Building
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.replay import FULL, replay
from scaleacross_milp.verify.verifier import TOLERANCE, verify
from scaleacross_milp.verify.workload import build_workload

TIME_SLACK = 0.10
"""A solve may end this fraction past its time limit."""
SAME = 1e-6
"""Relative difference below which the plan's predicted time is its incumbent (the polish holds it to 1e-9)."""
PATTERN_BASES = 2
"""Besides the optimizer's plan, the best restrictions whose shapes seed the DP-out / PP-out layouts."""
MAX_VARIANTS = 3
"""DP-out DP degrees (and PP-out PP degrees) tried per base layout."""
REPLAY_LIMIT_S = 20.0
"""A layout's replay running longer is stopped and reported (issue 12: the replay must stay within a few seconds)."""
PLAN_REPLAY_LIMIT_S = 60.0
"""The same for the plan's verification (`verify`, as `solve` runs it: five replays)."""


@dataclass
class Outcome:
    """One instance's figures; `failures` names every property that does not hold."""

    seed: int
    name: str
    gpus: int
    buildings: int
    model: str
    kind: str = "ok"
    """ok, infeasible (InputError), no plan (NoPlanFound), slow replay (the plan's verification stopped at
    PLAN_REPLAY_LIMIT_S) or crash (any other exception)."""
    message: str = ""
    time_limit_s: float = 0.0
    wall_s: float = math.nan
    work_s: float = math.nan
    wall_bound: bool = False
    """The wall clock ended the search before its work budget (`SolveStats.wall_bound`)."""
    status: str = ""
    plan: str = ""
    milp_s: float = math.nan
    """The solve's incumbent (`SolveStats.incumbent_s`)."""
    predicted_s: float = math.nan
    """The plan's predicted iteration time, the sum of its breakdown: the replay is compared with it."""
    bound_s: float = math.nan
    gap: float = math.nan
    replay_s: float = math.nan
    difference: float = math.nan
    best_restriction_s: float = math.nan
    best_restriction: str = ""
    best_pattern_s: float = math.nan
    best_pattern: str = ""
    best_layout_s: float = math.nan
    layouts: int = 0
    failures: list[str] = field(default_factory=list)
    plan_json: str = field(default="", repr=False)
    """The plan as `solve` writes it (not in the CSV)."""

    @property
    def restriction_ratio(self) -> float:
        return self.replay_s / self.best_restriction_s

    @property
    def pattern_ratio(self) -> float:
        return self.replay_s / self.best_pattern_s

    def row(self) -> dict:
        data = asdict(self) | {"restriction_ratio": self.restriction_ratio, "pattern_ratio": self.pattern_ratio}
        del data["plan_json"]
        return data | {"failures": "; ".join(self.failures)}


def _fabric_at_least(a: Building, b: Building) -> bool:
    """Building a's fabric is no worse than b's for any job b can hold: a job of b fits in one of a's pods, or a's
    pods are at least as large and no more oversubscribed."""
    pod_a, pod_b = min(a.pod_gpus or a.gpus, a.gpus), min(b.pod_gpus or b.gpus, b.gpus)
    return pod_a >= b.gpus or (pod_a >= pod_b and a.oversubscription <= b.oversubscription)


def _dominates(instance: Instance, a: Building, b: Building) -> bool:
    """a can hold every layout of b at least as fast: a GPU type at least as good on every datasheet figure, at
    least as many GPUs, a fabric no worse."""
    ga, gb = instance.gpu_type_of(a.name), instance.gpu_type_of(b.name)
    precision = instance.training.precision
    better_gpu = all(getattr(ga, f) >= getattr(gb, f) for f in ("hbm_gib", "hbm_tbyte_s", "nvlink_domain_gpus",
                                                                 "nvlink_gbyte_s", "nic_gbit_s", "usable_hbm_fraction"))
    return (better_gpu and ga.peak_dense_tflops[precision] >= gb.peak_dense_tflops[precision]
            and a.gpus >= b.gpus and _fabric_at_least(a, b))


def undominated(instance: Instance) -> list[Building]:
    """Buildings no other building dominates (of mutually dominating twins, the first)."""
    buildings = instance.topology.buildings
    return [b for i, b in enumerate(buildings)
            if not any(_dominates(instance, a, b) and (not _dominates(instance, b, a) or j < i)
                       for j, a in enumerate(buildings) if j != i)]


def restricted(instance: Instance, building: Building) -> Instance:
    """The instance with only `building` (no links)."""
    data = instance.model_dump(mode="json") | {"name": f"{instance.name}@{building.name}"}
    data["topology"] = {"buildings": [building.model_dump(mode="json")], "links": []}
    return Instance.model_validate(data)


def as_layout(plan: Plan) -> Layout:
    """The decisions of a plan, its transports included (a plan keeps them on its link uses), for any instance
    holding its buildings."""
    keep = set(Layout.model_fields) - {"instance", "transports"}
    return Layout.model_validate(plan.model_dump(include=keep) | {"transports": plan.link_transports()})


class ReplayTooSlow(Exception):
    """A replay ran past REPLAY_LIMIT_S."""


@contextmanager
def replay_cap(seconds: float = REPLAY_LIMIT_S) -> Iterator[None]:
    """Raise ReplayTooSlow in the block after `seconds` of wall time (SIGALRM)."""
    def expire(*_) -> None:
        raise ReplayTooSlow(f"replay ran past {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def replayed_s(instance: Instance, layout: Layout) -> float:
    """The verifier's iteration time of `layout`: its full replay alone (`verify` adds four attribution replays)."""
    with replay_cap():
        return replay(build_workload(instance, resolve(instance, layout)), instance.topology, FULL).makespan_s


def _variant(layout: Layout) -> DPVariant:
    return DPVariant(layout.dp_mode, layout.hsdp_replicas or 1) if layout.dp_mode is DPMode.hsdp \
        else DPVariant(layout.dp_mode)


def pattern_layout(ctx: ShapeContext, base: Layout, cells: Cells, layers: list[int]) -> Layout | None:
    """A layout of ctx's shape with base's schedule and DP mode, `cells` and `layers` per stage, and the most
    efficient transport per link; None when outside the searched space or beyond a building's HBM."""
    shape = ctx.shape
    option, variant = layout_option(ctx.instance, base), _variant(base)
    allowed = searched_options(ctx.instance, shape)
    if shape.pp > 1 and option not in allowed or variant not in ctx.variants:
        return None
    if shape.pp == 1:
        option = ScheduleOption(Schedule.one_f_one_b)
    fixed, per_layer = stage_memory(ctx, option, variant)
    for (j, k), count in cells.items():
        if count and fixed[j] + layers[j] * per_layer[j] > ctx.gpu(k).hbm_usable_bytes:
            return None
    stages = [StagePlacement(stage=j, layers=layers[j],
                             cells_per_building={k: n for (i, k), n in sorted(cells.items()) if i == j and n})
              for j in range(shape.pp)]
    transports = {f"{link.a}-{link.b}": max(link.transports, key=lambda t, i=i: ctx.efficiency[i, t])
                  for i, link in enumerate(ctx.routes.links)}
    return base.model_copy(update={"shape": shape, "schedule": option.schedule, "stages": stages, "pipelines": None,
                                   "transports": transports})


def _context(instance: Instance, base: Layout, **degrees: int) -> ShapeContext:
    return shape_context(instance, base.shape.model_copy(update=degrees), route_table(instance.topology))


def dp_out_layouts(instance: Instance, base: Layout) -> list[Layout]:
    """Base's pipelines (shape, layers per stage) replicated over the fastest buildings: for each prefix of the
    buildings fastest first, the largest DP (a multiple of EP dividing batch / micro-batch) whose pipelines fit."""
    shape, batch = base.shape, instance.training.batch_sequences
    per_mb = batch // shape.micro_batch
    layers = [s.layers for s in base.stages]
    ctx = _context(instance, base)
    order = fastest_first(ctx)
    column = shape.cell_gpus * shape.pp
    degrees: list[int] = []
    held = 0
    for k in order:
        held += instance.topology.building(k).gpus // column * shape.ep
        best = max((d for d in range(shape.ep, held + 1, shape.ep) if per_mb % d == 0), default=0)
        if best > shape.dp and best not in degrees:
            degrees.append(best)
    layouts = []
    for dp in degrees[-MAX_VARIANTS:]:
        ctx = _context(instance, base, dp=dp, microbatches=per_mb // dp)
        cells = dp_out_cells(ctx)
        layout = pattern_layout(ctx, base, cells, layers) if cells is not None else None
        layouts += [layout] if layout is not None else []
    return layouts


def pp_out_layouts(instance: Instance, base: Layout) -> list[Layout]:
    """Base's DP with deeper pipelines: for each allowed PP degree >= base's whose whole stages need two buildings
    or more, stages fill the fastest buildings in contiguous blocks (milp.patterns.pp_out_cells)."""
    layouts = []
    for pp in pipeline_degrees(instance):
        if pp < base.shape.pp or len(layouts) == MAX_VARIANTS:
            continue
        ctx = _context(instance, base, pp=pp)
        cells = pp_out_cells(ctx)
        if cells is None or len({k for (_, k), n in cells.items() if n}) < 2:
            continue
        layers = speed_layers(ctx, cells, layout_option(ctx.instance, base).chunks)
        layout = pattern_layout(ctx, base, cells, layers) if layers is not None else None
        layouts += [layout] if layout is not None else []
    return layouts


def _label(layout: Layout) -> str:
    homes = sorted({k for s in layout.stages for k in s.cells_per_building})
    return f"{layout.shape.label()} {layout.schedule.value} {layout.dp_mode.value} in {'+'.join(homes)}"


def check_restrictions(instance: Instance, out: Outcome, time_limit_s: float | None, threads: int
                       ) -> list[tuple[float, Layout]]:
    """Solve every undominated single-building restriction; (full-instance replay, layout) of each solved one."""
    solved = []
    for building in undominated(instance):
        sub = restricted(instance, building)
        try:
            plan = solve_instance(sub, time_limit_s=time_limit_s, threads=threads)
        except (InputError, NoPlanFound):
            continue
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, reported with its message
            out.failures.append(f"restriction {building.name} crashed: {type(exc).__name__}: {exc}")
            continue
        layout = as_layout(plan)
        try:
            solved.append((replayed_s(instance, layout), layout))
        except Exception as exc:  # noqa: BLE001 - a plan that does not replay is a finding
            out.failures.append(f"restriction {building.name}'s plan does not replay: {type(exc).__name__}: {exc}")
    return sorted(solved, key=lambda item: item[0])


def check_patterns(instance: Instance, bases: list[Layout], out: Outcome) -> list[tuple[float, Layout]]:
    """Replay the DP-out and PP-out layouts derived from each base that fit (`verify.layout.resolve`: memory with
    each stage's own MoE layers, capacity, NVLink); after a replay too slow, the rest are skipped (each would likely
    be as slow)."""
    layouts = [layout for base in bases for layout in dp_out_layouts(instance, base) + pp_out_layouts(instance, base)
               if not resolve(instance, layout).infeasible]
    evaluated = []
    for i, layout in enumerate(layouts):
        try:
            evaluated.append((replayed_s(instance, layout), layout))
        except ReplayTooSlow as exc:
            out.failures.append(f"pattern {_label(layout)} does not replay: {exc}; {len(layouts) - i - 1} more "
                                f"pattern layouts skipped")
            break
        except Exception as exc:  # noqa: BLE001 - a pattern that does not replay is a finding
            out.failures.append(f"pattern {_label(layout)} does not replay: {type(exc).__name__}: {exc}")
    return sorted(evaluated, key=lambda item: item[0])


def check_seed(seed: int, size: Size = Size.medium, time_limit_s: float | None = None, threads: int = 1) -> Outcome:
    """check_instance on generated instance `seed`."""
    return check_instance(generate_instance(seed, size), time_limit_s, threads, seed)


def check_instance(instance: Instance, time_limit_s: float | None = None, threads: int = 1, seed: int = -1
                   ) -> Outcome:
    """Solve and replay `instance`, and check every property (module docstring)."""
    out = Outcome(seed, instance.name, sum(b.gpus for b in instance.topology.buildings),
                  len(instance.topology.buildings), instance.model_spec.name,
                  time_limit_s=time_limit_s or instance.search.time_limit_s)
    collect_left_cycles()  # the garbage of the previous instance's solve and replays, outside this solve's wall time
    start = time.perf_counter()
    try:
        plan = solve_instance(instance, time_limit_s=time_limit_s, threads=threads)
    except InputError as exc:
        out.kind, out.message = "infeasible", str(exc)
        return out
    except NoPlanFound as exc:
        out.kind, out.message, out.wall_s = "no plan", str(exc), time.perf_counter() - start
        out.failures.append("no plan within the time limit")
        judge(out)
        return out
    except Exception as exc:  # noqa: BLE001 - a crash is a finding, reported with its message
        out.kind, out.message = "crash", f"{type(exc).__name__}: {exc}"
        return out
    out.wall_s = time.perf_counter() - start
    s = plan.solve
    out.status, out.milp_s, out.bound_s, out.gap = s.status, s.incumbent_s, s.bound_s, s.rel_gap
    out.predicted_s = plan.prediction.iteration_s
    out.work_s, out.wall_bound = s.work_s, s.wall_bound
    out.plan, out.plan_json = _label(plan), plan.model_dump_json(indent=2)
    try:
        with replay_cap(PLAN_REPLAY_LIMIT_S):
            verification, _ = verify(instance, plan)
    except ReplayTooSlow as exc:
        out.kind, out.message = "slow replay", f"verify (5 replays): {exc}"
        out.failures.append(f"the plan's verification {exc}")
        judge(out)
        return out
    except Exception as exc:  # noqa: BLE001 - a plan that does not replay is a crash, reported with its message
        out.kind, out.message = "crash", f"the plan does not replay: {type(exc).__name__}: {exc}"
        return out
    out.replay_s, out.difference = verification.iteration_s, verification.relative_difference
    restrictions = check_restrictions(instance, out, time_limit_s, threads)
    bases = [as_layout(plan)] + [layout for _, layout in restrictions[:PATTERN_BASES]]
    patterns = check_patterns(instance, bases, out)
    if restrictions:
        out.best_restriction_s = restrictions[0][0]
        out.best_restriction = _label(restrictions[0][1])
    if patterns:
        out.best_pattern_s, out.best_pattern = patterns[0][0], _label(patterns[0][1])
    out.layouts = 1 + len(restrictions) + len(patterns)
    out.best_layout_s = min([out.replay_s] + [t for t, _ in restrictions + patterns])
    judge(out)
    return out


def judge(out: Outcome) -> None:
    """Append a failure for every property that does not hold (NaN comparisons hold vacuously)."""
    if out.restriction_ratio > 1 + TOLERANCE:
        out.failures.append(f"restriction faster: {out.best_restriction} replays at {out.best_restriction_s:.3f} s, "
                            f"the plan at {out.replay_s:.3f} s (x{out.restriction_ratio:.3f})")
    if out.pattern_ratio > 1 + TOLERANCE:
        out.failures.append(f"pattern faster: {out.best_pattern} replays at {out.best_pattern_s:.3f} s, "
                            f"the plan at {out.replay_s:.3f} s (x{out.pattern_ratio:.3f})")
    if abs(out.predicted_s - out.milp_s) > SAME * out.milp_s:
        out.failures.append(f"prediction {out.predicted_s:.3f} s is not the incumbent {out.milp_s:.3f} s")
    if abs(out.difference) > TOLERANCE:
        out.failures.append(f"MILP {out.predicted_s:.3f} s vs replay {out.replay_s:.3f} s ({out.difference:+.1%})")
    if out.bound_s > (1 + TOLERANCE) * out.best_layout_s:
        out.failures.append(f"bound {out.bound_s:.3f} s above a layout replayed at {out.best_layout_s:.3f} s")
    if out.wall_s > (1 + TIME_SLACK) * out.time_limit_s:
        out.failures.append(f"solve took {out.wall_s:.1f} s for a {out.time_limit_s:g} s limit")


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:+.1%}"


def _num(x: float, digits: int = 3) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def table(outcomes: list[Outcome]) -> Table:
    grid = Table(title="scaleacross-milp: property suite on generated instances")
    for column in ("seed", "GPUs", "bldg", "model", "status", "gap", "MILP s", "replay s", "diff", "x restr.",
                   "x pattern", "bound / best", "wall / limit", "failed"):
        grid.add_column(column, justify="left" if column in ("model", "status", "failed") else "right")
    for o in outcomes:
        failed = ", ".join(f.split(":")[0].split(" (")[0] for f in o.failures) or ("-" if o.kind == "ok" else o.kind)
        grid.add_row(str(o.seed), f"{o.gpus:,}", str(o.buildings), o.model, o.status or o.kind, _pct(o.gap),
                     _num(o.milp_s), _num(o.replay_s), _pct(o.difference), _num(o.restriction_ratio),
                     _num(o.pattern_ratio), _num(o.bound_s / o.best_layout_s), f"{o.wall_s:.1f} / {o.time_limit_s:g}",
                     failed)
    return grid


def summary(outcomes: list[Outcome]) -> list[str]:
    """The headline figures: optimal share, gaps, MILP-vs-replay, ratios, failures, infeasible and crashes."""
    planned = [o for o in outcomes if o.kind in ("ok", "slow replay")]
    solved = [o for o in planned if o.kind == "ok"]
    feasible = [o for o in outcomes if o.kind != "infeasible"]
    lines = [f"{len(outcomes)} instances: {len(solved)} solved and replayed, "
             f"{len(planned) - len(solved)} solved but too slow to replay, "
             f"{sum(o.kind == 'infeasible' for o in outcomes)} infeasible, "
             f"{sum(o.kind == 'no plan' for o in outcomes)} without a plan, "
             f"{sum(o.kind == 'crash' for o in outcomes)} crashed"]
    if planned:
        gaps = [o.gap for o in planned]
        optimal = sum(o.status == "optimal" for o in planned)
        lines += [
            f"optimal within the limit: {optimal} / {len(planned)} with a plan ({optimal / len(planned):.0%}), "
            f"{optimal} / {len(feasible)} not infeasible ({optimal / len(feasible):.0%})",
            f"gap: median {statistics.median(gaps):.1%}, worst {max(gaps):.1%} (seed "
            f"{max(planned, key=lambda o: o.gap).seed})",
            f"ended by their work budget (the same plan on any load): {sum(not o.wall_bound for o in planned)} / "
            f"{len(planned)}; wall time median {statistics.median(o.wall_s for o in planned):.2f} s, longest "
            f"{max(o.wall_s for o in planned):.2f} s (seed {max(planned, key=lambda o: o.wall_s).seed})",
        ]
    if solved:
        diffs = [abs(o.difference) for o in solved]
        worst_diff = max(solved, key=lambda o: abs(o.difference))
        lines.append(f"|MILP - replay| / MILP: median {statistics.median(diffs):.1%}, worst "
                     f"{worst_diff.difference:+.1%} (seed {worst_diff.seed})")
        for name, attr in (("restrictions", "restriction_ratio"), ("patterns", "pattern_ratio")):
            ratios = [o for o in solved if not math.isnan(getattr(o, attr))]
            if ratios:
                worst = max(ratios, key=lambda o: getattr(o, attr))
                lines.append(f"worst ratio of the plan's replay to the best {name}: x{getattr(worst, attr):.3f} "
                             f"(seed {worst.seed}; {len(ratios)} instances compared)")
    failing = [o for o in outcomes if o.failures]
    lines.append(f"instances failing a property: {len(failing)} / {len(outcomes)}")
    lines += [f"  seed {o.seed} ({o.name}): {f}" for o in failing for f in o.failures]
    listed = ("infeasible", "crash", "slow replay")
    lines += [f"  seed {o.seed} {o.kind}: {o.message}" for o in outcomes if o.kind in listed]
    return lines


def write_csv(outcomes: list[Outcome], path: Path) -> None:
    rows = [o.row() for o in outcomes]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def keep_failing(outcome: Outcome, size: Size, directory: Path) -> None:
    """Write a failing instance's instance and plan JSON into `directory` (`--plans`)."""
    instance = generate_instance(outcome.seed, size)
    (directory / f"{outcome.name}.instance.json").write_text(instance.model_dump_json(indent=2))
    (directory / f"{outcome.name}.plan.json").write_text(outcome.plan_json)


def timed_check(seed: int, size: Size, time_limit_s: float | None, threads: int) -> tuple[Outcome, float]:
    """`check_seed` and its wall time in seconds (run in a worker process)."""
    started = time.perf_counter()
    return check_seed(seed, size, time_limit_s, threads), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200, help="generated instances (seeds first-seed ...)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="these seeds instead of --count's")
    parser.add_argument("--size", type=Size, default=Size.medium, choices=list(Size), metavar="{small,medium,large}")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds per solve; default: the instance's")
    parser.add_argument("--threads", type=int, default=1, help="HiGHS threads per solve")
    parser.add_argument("--csv", type=Path, default=None, help="write the per-instance rows here")
    parser.add_argument("--plans", type=Path, default=None,
                        help="a new directory: each failing instance's instance and plan JSON are written there")
    parser.add_argument("--workers", type=int, default=1,
                        help="instances checked at once, one spawned process each (give each a core: solves are "
                             "timed)")
    args = parser.parse_args()
    if args.plans is not None:
        if args.plans.exists():
            parser.error(f"--plans {args.plans}: exists; give a new directory (nothing in it is overwritten)")
        args.plans.mkdir(parents=True)

    console = Console(width=220)
    outcomes = []
    seeds = args.seeds or range(args.first_seed, args.first_seed + args.count)
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(timed_check, seed, args.size, args.time_limit, args.threads) for seed in seeds]
        for future in as_completed(futures):
            outcome, seconds = future.result()
            outcomes.append(outcome)
            console.print(f"seed {outcome.seed} {outcome.name}: {outcome.kind} {outcome.status} ({seconds:.0f} s) "
                          f"{'; '.join(outcome.failures)}", markup=False)
            if args.csv is not None:
                write_csv(sorted(outcomes, key=lambda o: o.seed), args.csv)
            if args.plans is not None and outcome.failures and outcome.plan_json:
                keep_failing(outcome, args.size, args.plans)
    outcomes.sort(key=lambda o: o.seed)
    console.print(table(outcomes))
    for line in summary(outcomes):
        console.print(line, markup=False)


if __name__ == "__main__":
    main()
