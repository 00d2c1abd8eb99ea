"""Branch and bound over shapes: each shape's placement MILP is solved in order of its lower bound.

The reported bound is min over all shapes of (the shape's MILP bound, or its analytical lower bound when it was
pruned or not reached), so it holds over the whole searched space; shapes that cannot fit in memory or in the
buildings are excluded by necessary conditions, never by guesses.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from scaleacross_milp.milp.bounds import (
    admissible_pairs,
    attainable_options,
    fits_capacity,
    lower_bound_s,
    min_memory_gib,
)
from scaleacross_milp.milp.context import ShapeContext, shape_context
from scaleacross_milp.milp.extract import extract_plan
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import model_size, solve_milp
from scaleacross_milp.milp.patterns import Pattern, fixed_cells, pattern_cells
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.shapes import enumerate_shapes
from scaleacross_milp.spec.instance import InputError, Instance
from scaleacross_milp.spec.plan import Plan, SolveStats

SHAPE_SHARE = 0.25
"""At most this fraction of the remaining time goes to one shape, so one hard shape cannot starve the others.
When a shape stops at its share the search may end before the time limit with the gap still open: the status
then says "gap open" (raise --time-limit to give each shape more)."""
MIN_SHAPE_SECONDS = 2.0
PATTERN_SHARE = 0.1
"""Each named pattern (DP-out, PP-out; see `patterns`) first gets at most this fraction of a shape's time for a
quick incumbent; the full MILP gets the rest, with the best incumbent so far as its cutoff."""


class InfeasibleInstance(InputError):
    """No layout satisfies the instance; the message names the binding constraint."""


class NoPlanFound(RuntimeError):
    """The time limit ended before any feasible layout was found (the bound is still reported)."""


@dataclass
class Screening:
    """Shapes that passed the necessary conditions, and why the others did not."""

    candidates: list[tuple[float, ShapeContext]] = field(default_factory=list)
    no_schedule: int = 0
    no_capacity: int = 0
    no_memory: list[tuple[float, ShapeContext]] = field(default_factory=list)


def screen(instance: Instance) -> tuple[int, Screening]:
    routes = route_table(instance.topology)
    shapes = enumerate_shapes(instance)
    result = Screening()
    for shape in shapes:
        ctx = shape_context(instance, shape, routes)
        ctx = replace(ctx, options=attainable_options(ctx))
        if not ctx.options:
            result.no_schedule += 1
        elif not fits_capacity(ctx):
            result.no_capacity += 1
        elif not (pairs := admissible_pairs(ctx)):
            result.no_memory.append((min_memory_gib(ctx), ctx))
        else:
            options = [o for o in ctx.options if any(o == po for po, _ in pairs)]
            variants = [v for v in ctx.variants if any(v == pv for _, pv in pairs)]
            ctx = replace(ctx, options=options, variants=variants)
            result.candidates.append((lower_bound_s(ctx, pairs), ctx))
    result.candidates.sort(key=lambda item: item[0])
    return len(shapes), result


def infeasibility(instance: Instance, total: int, screening: Screening) -> InfeasibleInstance:
    training, search = instance.training, instance.search
    if total == 0:
        return InfeasibleInstance(
            f"no shape divides the work: training.global batch of {training.batch_sequences} sequences must be a "
            f"multiple of DP x micro-batch (search.micro_batch_sizes {search.micro_batch_sizes}), and TP "
            f"(search.tp_degrees) must divide model.heads and fit the NVLink domain"
        )
    if screening.no_memory:
        need, ctx = min(screening.no_memory, key=lambda item: item[0])
        hbm = max(g.hbm_usable_bytes for g in ctx.costs.per_gpu_type.values()) / 2**30
        return InfeasibleInstance(
            f"memory: the model does not fit under any allowed shape; the smallest per-GPU need is {need:.1f} GiB "
            f"({ctx.shape.label()}) against {hbm:.1f} GiB usable HBM. Allow more GPUs, larger "
            f"search.tp_degrees / pp_degrees, FSDP/HSDP in search.dp_modes, or training.recompute 'full'."
        )
    if screening.no_capacity:
        return InfeasibleInstance(
            "capacity: no shape's stage cells (TP x CP x EP GPUs) fit in topology.buildings' GPU counts"
        )
    return InfeasibleInstance(
        "schedule: no allowed search.schedules applies (interleaved needs microbatches divisible by PP, the "
        "zero-bubble schedules at least PP microbatches, and interleaved and ZB-V a multiple of their chunks per "
        "rank in layers)"
    )


def solve_instance(
    instance: Instance,
    *,
    time_limit_s: float | None = None,
    rel_gap: float | None = None,
    threads: int | None = None,
) -> Plan:
    """Search shapes and solve each shape's placement MILP; arguments override instance.search when given."""
    start = time.perf_counter()
    limit = time_limit_s if time_limit_s is not None else instance.search.time_limit_s
    gap = rel_gap if rel_gap is not None else instance.search.rel_gap
    threads = threads if threads is not None else instance.search.threads
    total, screening = screen(instance)
    build_s, solver_s = time.perf_counter() - start, 0.0
    if not screening.candidates:
        raise infeasibility(instance, total, screening)

    incumbent, best = math.inf, None
    shape_bounds: list[float] = []
    solved, out_of_time = 0, False
    for lower, ctx in screening.candidates:
        remaining = limit - (time.perf_counter() - start)
        out_of_time = out_of_time or remaining <= 0
        if lower >= incumbent * (1 - gap) or remaining <= 0:
            shape_bounds.append(lower)
            continue
        built = time.perf_counter()
        model = build_model(ctx)
        build_s += time.perf_counter() - built
        share = min(remaining, max(MIN_SHAPE_SECONDS, remaining * SHAPE_SHARE))
        solved += 1
        for pattern in Pattern:
            cells = pattern_cells(ctx, pattern)
            if cells is None:
                continue
            with fixed_cells(model, cells):
                outcome = solve_milp(model, time_limit_s=share * PATTERN_SHARE, rel_gap=gap, threads=threads,
                                     cutoff=None if math.isinf(incumbent) else incumbent)
            solver_s += outcome.wall_s
            if outcome.incumbent is not None and outcome.incumbent < incumbent:
                incumbent, best = outcome.incumbent, (model, ctx, model_size(model))
        outcome = solve_milp(model, time_limit_s=share - (time.perf_counter() - built), rel_gap=gap,
                             threads=threads, cutoff=None if math.isinf(incumbent) else incumbent)
        solver_s += outcome.wall_s
        if outcome.incumbent is not None and outcome.incumbent < incumbent:
            incumbent, best = outcome.incumbent, (model, ctx, model_size(model))
        shape_bounds.append(max(lower, outcome.bound))

    bound = min(min(shape_bounds), incumbent)
    wall = time.perf_counter() - start
    if best is None:
        if all(math.isinf(b) for b in shape_bounds):
            raise InfeasibleInstance(
                "placement: no shape admits a placement satisfying memory, building capacity and layer "
                "divisibility together"
            )
        raise NoPlanFound(
            f"no feasible layout found within the {limit:.0f} s time limit (best bound {bound:.3f} s); "
            f"raise --time-limit"
        )
    model, ctx, size = best
    rel = (incumbent - bound) / incumbent if incumbent > 0 else 0.0
    stats = SolveStats(
        status="optimal" if rel <= gap + 1e-9 else "time limit" if out_of_time or wall >= limit else "gap open",
        incumbent_s=incumbent, bound_s=bound, rel_gap=max(rel, 0.0), wall_s=wall, build_s=build_s, solver_s=solver_s,
        shapes_total=total, shapes_solved=solved, shapes_pruned=len(screening.candidates) - solved, **size,
    )
    return extract_plan(model, ctx, stats)
