"""Branch and bound over shapes: each shape's placement MILP is solved in order of its lower bound.

The reported bound is min over all shapes of (the shape's MILP bound, or its analytical lower bound when it was
pruned or not reached), so it holds over the whole searched space; shapes that cannot fit in memory or in the
buildings are excluded by necessary conditions, never by guesses.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from scaleacross_milp.milp.bounds import (
    admissible_pairs,
    attainable_options,
    first_stage_lower_bound_s,
    fits_capacity,
    lower_bound_s,
    min_memory_gib,
)
from scaleacross_milp.milp.context import ShapeContext, shape_context
from scaleacross_milp.milp.extract import extract_plan
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import model_size, polish, solve_milp
from scaleacross_milp.milp.patterns import Pattern, fixed_cells, pattern_cells
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.shapes import enumerate_shapes
from scaleacross_milp.spec.instance import InputError, Instance
from scaleacross_milp.spec.plan import Plan, SolveStats

SHAPE_SHARE = 0.25
"""At most this fraction of the remaining time goes to one shape's full MILP, so one hard shape cannot starve the
others. When a shape stops at its share the search may end before the time limit with the gap still open: the
status then says "gap open" (raise --time-limit to give each shape more)."""
MIN_SHAPE_SECONDS = 2.0
PATTERN_PHASE = 0.2
"""Phase 1 spends at most this fraction of the time limit on pattern incumbents (DP-out, PP-out; see `patterns`)
of the shapes in bound order, so that phase 2's full MILPs start with a good cutoff."""
PATTERN_SECONDS = 0.1
"""A pattern solve's time cap, as a fraction of the time limit (at least half of MIN_SHAPE_SECONDS)."""
PATTERN_GAP = 0.1
"""A pattern solve's gap, as a fraction of the requested gap: with its placement fixed the MILP is small, and an
incumbent close to the pattern's optimum leaves the full MILPs (and the final gap) more room."""


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


@dataclass
class ShapeSearch:
    """Best-first branch and bound over shapes. A shape's bound starts as its screening bound and is sharpened
    (`first_stage_lower_bound_s`) only when it reaches the front of the queue, so shapes are taken in order of
    sharpened bound while only the few near the front pay for sharpening. Phase 1 solves the front shapes' named
    patterns for incumbents; phase 2 solves each shape's full MILP with the incumbent as cutoff. A shape whose bound
    cannot beat the incumbent by more than the gap ends the search: every shape behind it is worse."""

    candidates: list[tuple[float, ShapeContext]]
    start: float
    limit: float
    gap: float
    threads: int | None
    incumbent: float = math.inf
    best: tuple | None = None
    bounds: list[float] = field(init=False)
    sharpened: set[int] = field(default_factory=set)
    solved: set[int] = field(default_factory=set)
    out_of_time: bool = False
    build_s: float = 0.0
    solver_s: float = 0.0
    models: dict[int, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bounds = [lower for lower, _ in self.candidates]

    def remaining(self) -> float:
        return self.limit - (time.perf_counter() - self.start)

    def promising(self, lower: float) -> bool:
        return lower < self.incumbent * (1 - self.gap)

    def best_first(self) -> Iterator[int]:
        """Unsolved shapes in order of sharpened bound while they are promising; a shape's bound is sharpened when
        its current bound is the smallest left (sharpening only raises it, so the order stays exact)."""
        queue = [(self.bounds[i], i) for i in range(len(self.candidates)) if i not in self.solved]
        heapq.heapify(queue)
        while queue and self.promising(queue[0][0]):
            lower, i = heapq.heappop(queue)
            if i in self.sharpened:
                yield i
                continue
            ctx = self.candidates[i][1]
            self.bounds[i] = max(lower, first_stage_lower_bound_s(ctx, admissible_pairs(ctx)))
            self.sharpened.add(i)
            heapq.heappush(queue, (self.bounds[i], i))

    def model(self, i: int):
        """Shape i's MILP, built once and dropped after its full solve (`best` keeps the incumbent's)."""
        if i not in self.models:
            built = time.perf_counter()
            self.models[i] = build_model(self.candidates[i][1])
            self.build_s += time.perf_counter() - built
        return self.models[i]

    def solve(self, i: int, time_limit_s: float, rel_gap: float | None = None):
        """One HiGHS solve of shape i's model (as currently fixed); keeps the best incumbent."""
        model, ctx = self.model(i), self.candidates[i][1]
        rel_gap = self.gap if rel_gap is None else rel_gap
        outcome = solve_milp(model, time_limit_s=time_limit_s, rel_gap=rel_gap, threads=self.threads,
                             cutoff=None if math.isinf(self.incumbent) else self.incumbent)
        self.solver_s += outcome.wall_s
        if outcome.incumbent is not None and outcome.incumbent < self.incumbent:
            self.incumbent, self.best = outcome.incumbent, (model, ctx, model_size(model))
        return outcome

    def try_patterns(self, i: int, late: bool = False) -> None:
        """Solve shape i's named patterns, each within PATTERN_SECONDS of the limit and the time left (`late`:
        MIN_SHAPE_SECONDS / 2 each even past the limit)."""
        ctx = self.candidates[i][1]
        cap = max(MIN_SHAPE_SECONDS / 2, self.limit * PATTERN_SECONDS)
        for pattern in Pattern:
            cells = pattern_cells(ctx, pattern)
            budget = MIN_SHAPE_SECONDS / 2 if late else min(self.remaining(), cap)
            if cells is not None and budget > 0:
                with fixed_cells(self.model(i), cells):
                    self.solve(i, budget, self.gap * PATTERN_GAP)

    def run(self) -> None:
        tried = set()
        for i in self.best_first():
            if self.remaining() <= self.limit * (1 - PATTERN_PHASE):
                break
            self.try_patterns(i)
            tried.add(i)
        for i in self.best_first():
            if self.remaining() <= 0:
                self.out_of_time = True
                break
            if i not in tried:
                self.try_patterns(i)
                if not self.promising(self.bounds[i]):
                    continue
            remaining = self.remaining()
            outcome = self.solve(i, min(remaining, max(MIN_SHAPE_SECONDS, remaining * SHAPE_SHARE)))
            self.solved.add(i)
            self.bounds[i] = max(self.bounds[i], outcome.bound)
            self.models.pop(i)
        front = min(((b, i) for i, b in enumerate(self.bounds) if i not in self.solved), default=(math.inf, -1))
        if self.best is None and self.out_of_time and not math.isinf(front[0]):
            self.try_patterns(front[1], late=True)  # screening ate the time: the best shape's patterns still run
        self.models.clear()


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
    if not screening.candidates:
        raise infeasibility(instance, total, screening)
    search = ShapeSearch(screening.candidates, start, limit, gap, threads, build_s=time.perf_counter() - start)
    search.run()

    best, bound = search.best, min(min(search.bounds), search.incumbent)
    if best is None:
        if all(math.isinf(b) for b in search.bounds):
            raise InfeasibleInstance(
                "placement: no shape admits a placement satisfying memory, building capacity and layer "
                "divisibility together"
            )
        raise NoPlanFound(
            f"no feasible layout found within the {limit:.0f} s time limit (best bound {bound:.3f} s); "
            f"raise --time-limit"
        )
    model, ctx, size = best
    incumbent = polish(model, model.T, threads)
    wall = time.perf_counter() - start
    rel = (incumbent - bound) / incumbent if incumbent > 0 else 0.0
    stats = SolveStats(
        status="optimal" if rel <= gap + 1e-9 else "time limit" if search.out_of_time or wall >= limit else "gap open",
        incumbent_s=incumbent, bound_s=bound, rel_gap=max(rel, 0.0), wall_s=wall, build_s=search.build_s,
        solver_s=search.solver_s, shapes_total=total, shapes_solved=len(search.solved),
        shapes_pruned=len(screening.candidates) - len(search.solved), **size,
    )
    return extract_plan(model, ctx, stats)
