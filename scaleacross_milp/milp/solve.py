"""Branch and bound over shapes: each shape's placement MILP is solved in order of its lower bound.

The reported bound is min over all shapes of (the shape's MILP bound, or its analytical lower bound when it was
pruned or not reached), so it holds over the whole searched space; shapes that cannot fit in memory or in the
buildings are excluded by necessary conditions, never by guesses. Under search.objective `cost` the bounds are on
the cost per requested batch: a shape's time bound times the least rate at which it can hold GPUs
(`bounds.held_rate_floor_usd_s`), or its MILP's cost bound; a budget or a throughput floor prunes a shape whose time
bound already breaks it (`ShapeSearch.lift`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.price import held_usd_per_s, iteration_cost, priced
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.costmodel.stream_paths import graphs_s, stream_paths
from scaleacross_milp.gcpause import collect_if_grown, collect_left_cycles, paused_cycle_collection
from scaleacross_milp.milp.bounds import cycle_floor_s, first_stage_lower_bound_s, held_rate_floor_usd_s
from scaleacross_milp.milp.context import Pair, ShapeContext
from scaleacross_milp.milp.extract import extract_plan
from scaleacross_milp.milp.formulation.build import LAYOUT_DECISIONS, Floors, build_model, held_layout
from scaleacross_milp.milp.formulation.cost import link_sends, priced_rows_needed
from scaleacross_milp.milp.formulation.pipeline import stream_path_arguments
from scaleacross_milp.milp.highs import (
    ABS_GAP,
    HighsModel,
    MILPOutcome,
    MILPStatus,
    SolverFailure,
    model_size,
    polish,
    restore,
    snapshot,
    solve_milp,
)
from scaleacross_milp.milp.path_cuts import cut_critical_path, solve_with_cuts
from scaleacross_milp.milp.patterns import (
    Cells,
    Pattern,
    Restriction,
    fixed_cells,
    holders,
    holding_pairs,
    pattern_cells,
    restrictions,
    spans_all,
    speed_layers,
)
from scaleacross_milp.milp.price import PRICE_LIMIT_S, fixed_layout_model
from scaleacross_milp.milp.progress import Phase, ProgressHook, SearchProgress
from scaleacross_milp.milp.routes import RouteTable, route_table
from scaleacross_milp.milp.scaled import SCALED_PER_KIND, dp_out, fixed_decisions, pp_out
from scaleacross_milp.milp.screen import Candidate, Screening, screen
from scaleacross_milp.milp.shapes import per_requested
from scaleacross_milp.milp.work import (
    CROSSING_S,
    PRICE_S,
    SHARPEN_S,
    WALL_GRACE,
    WorkClock,
    build_s,
    extent,
    path_s,
)
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Plan, Shape, SolveStats
from scaleacross_milp.spec.search import Objective

PATTERN_NODES = 200
"""Branch-and-bound nodes of one pattern or restriction solve: with the placement fixed the MILP is small and most
close at the root."""
PATTERN_SHARE = 0.1
"""... and its wall-clock cap, as a share of the limit: a node budget does not bound the root node, whose cuts and
heuristics can take seconds on a restriction of a few buildings (a 6-building restriction of generated seed 32:
47,000 LP iterations at the root, unfinished after 10 s), and one such solve would end the search."""
FIRST_NODES = 200
"""Node budget of every open shape's full MILP in the first round; each later round multiplies it by NODE_GROWTH.
Budgets count solver work, not seconds, so these rounds take the same steps whatever the machine's load. What stays
wall-clock (screening's share, PATTERN_SHARE, the build prediction of `ShapeSearch.fits`) can make two runs under
different load differ, and a longer limit is not always a better plan (README, time limits)."""
NODE_GROWTH = 4
MAX_BUILDINGS = 64
"""The most buildings a solve accepts: the route table and the traffic rows grow with the building pairs times their
route lengths, and at 64 buildings one shape's model already has about 43,000 variables and 64,000 rows."""
POLISH_SOLVES = 3
"""Solves of the final polish, reserved from the limit once there is an incumbent: the incumbent's layout re-priced
with its derived variables free (`reprice`), then the two LP solves of `highs.polish`."""
POLISH_SHARE = 0.02
"""... reserved as this share of the limit: with every decision held each is a small LP (0.01-0.04 s on the 160-GPU
five-zone and the 131k-GPU instances); the polish runs within what is left (`highs.polish` skips a step that does
not finish)."""
SCREEN_SHARE = 0.5
"""Screening stops at this share of the time limit once some shape has passed, leaving the rest to the search."""
SETTLE_SHARE = 0.05
"""Share of the limit kept for `ShapeSearch.settle`, which prices and sharpens the shapes with the least bounds once
the search stops: pricing takes about 1.5 ms a shape on the 131k-GPU instances, and whether the last few were priced
moved the 131k-GPU Llama 3 405B's reported bound at 10 s between 2.07 s and 3.34 s from run to run."""
RESCUE_RESERVE = 0.25
"""While no plan is found, the search stops this share of the limit early and leaves it to the rescue
(`ShapeSearch.rescue`), which ends at the limit: the rescue's first model build cannot be interrupted, and a search
that ran to the limit before it overran a 0.5 s limit by 40-70 % (the 131k-GPU instances, metro)."""
RESCUE_FLOOR_S = 0.1
"""Each rescue solve gets at least this long, so a plan comes back even under a limit shorter than screening (its
models are restrictions with few pairs: 0.001-0.01 s solves on the 131k-GPU instances)."""
SEED_MIN_SECONDS = 0.5
"""The least the seed's solve gets (`SEED_SHARE`)."""
SEED_SHARE = 0.2
"""Share of the limit first spent solving the instance restricted to its strongest building (`seed_plan`), raised to
SEED_MIN_SECONDS (the least a solve needs to promise a plan within it) while that leaves the search at least as
long; skipped below (`seed_seconds`)."""
PATTERN_GAP = 0.1
"""A pattern solve's gap, as a fraction of the requested gap: with its placement fixed the MILP is small, and an
incumbent close to the pattern's optimum leaves the full MILPs (and the final gap) more room."""
NEIGHBOURS = 2
"""Shapes scaling the incumbent's shape out, per direction (`ShapeSearch.neighbours`), whose restrictions and
patterns are solved each time the incumbent moves to another shape (`ShapeSearch.climb`)."""
CLIMB_MARGIN = 0.05
"""A former incumbent priced within this fraction above the incumbent is still scaled out (`ShapeSearch.roots`):
about the spread of the MILP's prices around the replay's over many layouts (`benchmarks/agreement.py`, 90th
percentile 2 %), within which two plans' prices do not say which one scales out better."""
KEPT_MODELS = 4
"""Models of restrictions and scaled layouts kept for reuse, the most recently used (`ShapeSearch.narrowed_model`):
each climb from a new incumbent scales it out onto the same shapes and buildings again, and a build cannot be
interrupted (a profiled 20 s solve of the 131k-GPU Llama 3 405B built one such model over eight buildings twice,
2.6 s each)."""


class InfeasibleInstance(InputError):
    """No layout satisfies the instance; the message names the binding constraint."""


class NoPlanFound(RuntimeError):
    """The time limit ended before any feasible layout was found (the bound is still reported)."""


def infeasibility(instance: Instance, screening: Screening) -> InfeasibleInstance:
    training, search = instance.training, instance.search
    if screening.total == 0:
        return InfeasibleInstance(
            f"no shape divides the work: training.global batch of {training.batch_sequences} sequences must be a "
            f"multiple of DP x micro-batch (search.micro_batch_sizes {search.micro_batch_sizes}) or within "
            f"training.batch_tolerance of one under training.batch_rounding "
            f"'{training.batch_rounding.value}', and TP "
            f"(search.tp_degrees) must divide model.heads and fit the NVLink domain"
        )
    if screening.no_memory:
        need, shape = min(screening.no_memory, key=lambda item: item[0])
        against = (f"against {screening.hbm_gib:.1f} GiB usable HBM" if need > screening.hbm_gib else
                   f"at its average layer, but no split of its layers fits once each stage counts its MoE layers and "
                   f"sits on GPUs that hold it ({screening.hbm_gib:.1f} GiB usable HBM at most)")
        return InfeasibleInstance(
            f"memory: the model does not fit under any allowed shape; the smallest per-GPU need is {need:.1f} GiB "
            f"({shape.label()}) {against}. Allow more GPUs, larger search.tp_degrees / pp_degrees, FSDP/HSDP in "
            f"search.dp_modes, or training.recompute 'full'."
        )
    if screening.no_dp_variant and not screening.no_capacity and not screening.no_schedule:
        return InfeasibleInstance(
            f"search.dp_modes {[mode.value for mode in instance.search.dp_modes]}: no shape admits one; HSDP needs "
            f"2 or more replica groups (at most one per building) that divide the stage cells (DP / EP). Add "
            f"'fsdp' or 'ddp' to search.dp_modes, or allow DP degrees with such divisors"
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


@dataclass(frozen=True)
class Incumbent:
    """The best layout so far: its shape's model, and the variable values kept apart from that model (later solves
    on the same model, with other patterns fixed, overwrite the values it holds)."""

    objective: float
    """T (or the iteration's cost under search.objective `cost`) x B_requested / B_run (`per_requested`): comparable
    across shapes that run different batches."""
    index: int
    """The shape's index among the search's candidates (-1: the seed, `seed_incumbent`)."""
    model: HighsModel
    ctx: ShapeContext
    size: dict[str, int]
    values: list[float | None]
    proven_alone: bool = False
    """A seed's: its own search proved it within the gap over its buildings alone (`ShapeSearch.resolve_seed`)."""


def narrowed(ctx: ShapeContext, buildings: list[str], pairs: list[Pair]) -> ShapeContext:
    """ctx over `buildings` only, its model holding only `pairs` of (schedule option, DP variant): a restriction
    or a scaled layout looks for an incumbent, which any part of the searched space gives."""
    return replace(ctx, routes=ctx.routes.among(buildings), options=list(dict.fromkeys(o for o, _ in pairs)),
                   variants=list(dict.fromkeys(v for _, v in pairs)), screened_pairs=tuple(pairs))


def degrees(shape: Shape) -> tuple[int, int, int, int, int, int]:
    """(TP, CP, EP, micro-batch, PP, DP): what tells shapes apart (the microbatch count follows from DP)."""
    return shape.tp, shape.cp, shape.ep, shape.micro_batch, shape.pp, shape.dp


BUILD_SHARE = 0.5
"""Once there is a plan, a model is built only when its predicted build takes at most this share of the time left
(`ShapeSearch.fits`): the rest is for solving it. Generated medium seed 2's PP 32 model over 13 buildings, predicted
to fit the 3.5 s left, built in 1.7 s and its pattern solve found nothing in the 0.9 s after it, while a PP 21 model
over 10 buildings (0.7 s) gives a plan twice as fast."""


def span(instance: Instance, shape: Shape) -> int:
    """The fewest buildings (largest first) whose stage cells hold the shape's GPUs."""
    need, held = shape.pp * shape.cells_per_stage, 0
    rooms = sorted((b.gpus // shape.cell_gpus for b in instance.topology.buildings), reverse=True)
    for count, room in enumerate(rooms, start=1):
        held += room
        if held >= need:
            return count
    return len(rooms)


@dataclass
class ShapeSearch:
    """Best-first branch and bound over shapes. A shape's bound starts as its compute floor; when it reaches the front
    of the queue it takes what crossing buildings costs it at least (`Screening.crossing_floor_s`), when it reaches
    the front again the shape is priced and takes its screening bound (`bounds.lower_bound_s`), and then that bound is
    sharpened (`first_stage_lower_bound_s`). Each step only raises the bound, so shapes are taken in order of
    sharpened bound while only the few near the front pay for pricing and sharpening.

    Before phase 1, the seed's shape is solved again over the seed's building unless the seed's own search proved it
    (`resolve_seed`). Phase 1 takes the front shape, and the front shape of every span (the fewest buildings a shape's
    GPUs need), so shapes that fit in fewer buildings are not starved by the optimistic bounds of the shapes that use
    the whole cluster; it solves each one's restrictions (`patterns.restrictions`, small models) with their patterns'
    cells fixed, climbing from each new plan (`climb`), then each one's named patterns on its full model where that
    model is affordable, then the restrictions tried so far with their placement free (`free_placements`, again after
    every round of phase 2). Phase 2 runs rounds
    (`solve_round`): each round solves the full MILP of every open shape that can still beat the incumbent by more than
    the gap, one (schedule option, DP variant) pair at a time (`solve_pair`), pairs in bound order across shapes, within
    a node budget that grows by NODE_GROWTH per round (a shape's restrictions and patterns first, if phase 1 did not
    reach it); a shape is closed once every pair is. Every step is charged to the work clock (`milp.work`), and every
    decision reads it: the pattern solves' caps, whether a model's build fits the time left (`affordable`), when the
    search stops; the wall clock only ends the sequence where it runs out first."""

    screening: Screening
    clock: WorkClock
    limit: float
    gap: float
    threads: int | None
    best: Incumbent | None = None
    bounds: list[float] = field(init=False)
    """Each shape's bound on the objective per requested batch (`lift`)."""
    floors: list[float] = field(init=False)
    """Each shape's time bound per requested batch, what its model's shape_floor row takes under the cost
    objective (`floor_s`)."""
    crossed: set[int] = field(default_factory=set)
    """Shapes whose floor took its crossing term (`Screening.crossing_floor_s`)."""
    sharpened: set[int] = field(default_factory=set)
    closed: set[int] = field(default_factory=set)
    patterns_tried: set[int] = field(default_factory=set)
    restrictions_tried: set[int] = field(default_factory=set)
    restriction_sets: dict[int, list[Restriction]] = field(default_factory=dict)
    """Shape i's `patterns.restrictions`, found once (PP-out's block order weighs O(B^3) swaps; `restriction_extent`
    sorts by them)."""
    placements_deferred: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    """Restrictions (shape, buildings) whose free-placement solve waits for `free_placements`."""
    climbed: set[tuple[int, int, int, int, int, int]] = field(default_factory=set)
    """Degrees (`degrees`) of the incumbent shapes whose neighbours were tried (`climb`)."""
    superseded: list[Incumbent] = field(default_factory=list)
    """Every former incumbent, each a root the climb may still scale out (`roots`)."""
    out_of_time: bool = False
    stopped_early: str | None = None
    """Why phase 2 stopped building models before the limit (`SolveStats.stopped_early`)."""
    build_s: float = 0.0
    solver_s: float = 0.0
    """Wall seconds spent screening and building models, and inside HiGHS (reported, never decided on)."""
    paths_charged: set[tuple] = field(default_factory=set)
    """Stream-path arguments whose graphs the clock was charged for (`build_s_predicted`)."""
    models: dict[int, HighsModel] = field(default_factory=dict)
    pair_bounds: dict[int, dict[Pair, float]] = field(default_factory=dict)
    """Per shape whose full MILP is solved pair by pair, each admissible (schedule option, DP variant) pair's bound
    on the objective per requested batch (`open_pairs`, `solve_pair`)."""
    closed_pairs: dict[int, set[Pair]] = field(default_factory=dict)
    kept: OrderedDict[tuple[int, tuple[str, ...], tuple[Pair, ...]], tuple[HighsModel, ShapeContext]] = field(
        default_factory=OrderedDict)
    """Models of restrictions and scaled layouts with their contexts, by (shape, buildings, pairs)."""
    progress: ProgressHook | None = None
    phase: Phase = Phase.patterns

    def __post_init__(self) -> None:
        self.floors = [candidate.floor_s for candidate in self.candidates]
        self.bounds = [self.lift(i, candidate.floor_s) for i, candidate in enumerate(self.candidates)]

    @property
    def costed(self) -> bool:
        return self.screening.instance.search.objective is Objective.cost

    def lift(self, i: int, time_s: float) -> float:
        """Shape i's bound on the objective from a bound `time_s` on its time per requested batch: `time_s` itself,
        or time_s R under the cost objective (R: `bounds.held_rate_floor_usd_s`); infinite when its own iteration,
        at least T = time_s B_run / B_requested long, misses search.min_tokens_per_s (B_run seq_len / T below it) or
        search.max_cost_per_iteration (R T above it)."""
        instance = self.screening.instance
        search = instance.search
        if not priced_rows_needed(search):
            return time_s
        shape = self.candidates[i].shape
        own = time_s / shape.batch_factor(instance.training.batch_sequences)
        rate = held_rate_floor_usd_s(instance, shape, self.screening.routes.buildings)
        tokens = shape.batch_sequences * instance.training.seq_len
        if (search.min_tokens_per_s and tokens < search.min_tokens_per_s * own) or (
                search.max_cost_per_iteration and rate * own > search.max_cost_per_iteration):
            return math.inf
        return time_s * rate if self.costed else time_s

    def raise_time_bound(self, i: int, time_s: float) -> None:
        """Shape i's time bound rises to `time_s` (per requested batch), its objective bound to `lift` of it."""
        self.floors[i] = max(self.floors[i], time_s)
        self.bounds[i] = max(self.bounds[i], self.lift(i, time_s))

    def floor_s(self, i: int) -> float:
        """Shape i's time bound per requested batch for its model's shape_floor row: `bounds` (time, or an earlier
        solve's bound) under the time objective, `floors` under the cost objective."""
        return self.floors[i] if self.costed else self.bounds[i]

    @property
    def candidates(self) -> list[Candidate]:
        return self.screening.candidates

    @property
    def incumbent(self) -> float:
        return math.inf if self.best is None else self.best.objective

    def elapsed(self) -> float:
        """Work seconds charged so far (`milp.work`)."""
        return self.clock.spent_s

    def remaining(self) -> float:
        """Work seconds left for the search before its `tail_s`: what every decision reads (the caps of solves,
        whether a build fits), so that the steps never depend on the wall clock."""
        return self.clock.work_left_s(self.tail_s())

    def exhausted(self) -> bool:
        """Whether the search must stop: no work left (`remaining`), or the wall clock past the same point of its
        own limit (`WorkClock.left_s`), the outer promise; a wall-clock stop cuts the same steps short."""
        return self.clock.left_s(self.tail_s()) <= 0

    def tail_s(self) -> float:
        """The end of the limit the search leaves: what polishing the incumbent will take (`polish_s`) and
        SETTLE_SHARE of the limit (`settle`), and while there is no plan RESCUE_RESERVE of it (`rescue`); none in the
        rescue, which ends at the limit."""
        if self.phase is Phase.rescue:
            return 0.0
        return self.limit * (SETTLE_SHARE + (RESCUE_RESERVE if self.best is None else 0.0)) + self.polish_s

    def settle(self) -> None:
        """Raise the bound over the searched space in the time kept for it (SETTLE_SHARE): price, then sharpen,
        the shape with the least bound until that shape is sharpened (`best_first`'s steps, no solve)."""
        next(self.best_first(until_s=self.limit - self.polish_s, tail_s=self.polish_s), None)

    @property
    def polish_s(self) -> float:
        """What the final polish is kept once there is a plan: POLISH_SHARE of the limit."""
        return 0.0 if self.best is None else POLISH_SHARE * self.limit

    @property
    def bound(self) -> float:
        """The bound over the whole searched space so far: the least over the shapes' bounds, the unscreened
        shapes' floor and the incumbent."""
        unscreened = self.screening.unscreened_bound_s
        if self.costed and not math.isinf(unscreened):  # every layout holds at least one whole building
            instance = self.screening.instance
            unscreened *= min(held_usd_per_s(instance, b.name) for b in instance.topology.buildings)
        return min(min(self.bounds, default=math.inf), unscreened, self.incumbent)

    def report(self, phase: Phase | None = None) -> None:
        """Tell `progress` where the search is (entering `phase` when given)."""
        self.phase = phase or self.phase
        if self.progress is not None:
            self.progress(SearchProgress(self.phase, self.clock.wall_s, len(self.closed),
                                         len(self.candidates) - len(self.closed),
                                         None if math.isinf(self.incumbent) else self.incumbent, self.bound))

    def promising(self, lower: float) -> bool:
        return lower < self.incumbent * (1 - self.gap)

    def ctx(self, i: int) -> ShapeContext:
        """Shape i's context, priced on first use."""
        return self.screening.context(self.candidates[i])

    def key(self, i: int) -> tuple[float, float, int]:
        """Queue order of shape i: its bound, then its screening bound (-inf before it is priced), then enumeration
        order; no step lowers a shape's key, so shapes leave the queue in order of their final keys."""
        candidate = self.candidates[i]
        return self.bounds[i], -math.inf if candidate.ctx is None else candidate.bound_s, candidate.index

    def best_first(self, members: list[int] | None = None, until_s: float | None = None,
                   tail_s: float | None = None) -> Iterator[int]:
        """`members` (every candidate when None) not yet closed, in order of sharpened bound while they are promising
        and time is left (until `until_s` work seconds into the solve when given, and the wall time that work may
        take, `WorkClock.step_wall_s`, before the last `tail_s` of the limit; else while `remaining`); a shape's
        floor takes its crossing term, then it is priced, then sharpened, each when its current key is the smallest
        left (`key`), each step charged (`milp.work`)."""
        queue = [(*self.key(i), i) for i in (range(len(self.candidates)) if members is None else members)
                 if i not in self.closed]
        heapq.heapify(queue)
        wall_until_s = None if until_s is None else self.clock.wall_s + self.clock.step_wall_s(
            until_s - self.elapsed(), tail_s or 0.0)
        while queue and self.promising(queue[0][0]):
            if self.exhausted() if wall_until_s is None else (
                    self.elapsed() >= until_s or self.clock.wall_s >= wall_until_s):
                if self.exhausted():  # the limit stopped it, not a budget of its own (`front_first`)
                    self.out_of_time = True
                return
            *_, i = heapq.heappop(queue)
            if i in self.sharpened:
                yield i
                continue
            if i not in self.crossed:
                self.crossed.add(i)
                self.clock.charge(CROSSING_S)
                self.raise_time_bound(i, self.screening.crossing_floor_s(self.candidates[i]))
            elif self.candidates[i].ctx is None:
                self.price(i)
            else:
                ctx = self.ctx(i)
                self.clock.charge(SHARPEN_S)
                self.raise_time_bound(i, first_stage_lower_bound_s(ctx, ctx.pairs) * per_requested(ctx))
                self.sharpened.add(i)
            heapq.heappush(queue, (*self.key(i), i))

    def price(self, i: int) -> None:
        """Price shape i (charged PRICE_S the first time); its bound rises to its screening bound."""
        candidate = self.candidates[i]
        if candidate.ctx is None:
            self.clock.charge(PRICE_S)
        self.screening.context(candidate)
        self.raise_time_bound(i, candidate.bound_s)

    def affordable(self, i: int) -> bool:
        """Whether shape i's model can still be built and translated before the limit (`fits`). A build cannot be
        interrupted, so this is what keeps the wall time within the limit once a plan is in hand."""
        return i in self.models or self.fits(self.ctx(i))

    def fits(self, ctx: ShapeContext) -> bool:
        """Whether ctx's model can be built and translated within BUILD_SHARE of the time left
        (`build_s_predicted`): of the work left, and of the wall seconds left at the solve's pace
        (`WorkClock.wall_allows`); always while there is no plan."""
        if math.isinf(self.incumbent):
            return True
        work = self.build_s_predicted(ctx)
        return work <= BUILD_SHARE * self.remaining() and self.clock.wall_allows(work, BUILD_SHARE, self.tail_s())

    def build_s_predicted(self, ctx: ShapeContext) -> float:
        """Work of building and translating ctx's model (`work.build_s`) and of the stream paths this solve has not
        run yet (`stream_paths.graphs_s`): what `build` charges."""
        return build_s(ctx) + sum(graphs_s(*args) for args in self.new_paths(ctx))

    def new_paths(self, ctx: ShapeContext) -> list[tuple]:
        """ctx's stream-path arguments the clock was not charged for yet (one charge per solve, however many are
        kept from earlier solves in this process)."""
        return [args[:4] for args in stream_path_arguments(ctx) if args[:4] not in self.paths_charged]

    def build(self, i: int, ctx: ShapeContext) -> HighsModel:
        """Shape i's model over ctx's buildings, translated to HiGHS, its stream paths run first; charged
        `build_s_predicted`."""
        collect_if_grown()
        charged = self.build_s_predicted(ctx)
        self.clock.charge(charged)
        self.paths_charged.update(self.new_paths(ctx))
        start = time.perf_counter()
        for args in stream_path_arguments(ctx):
            stream_paths(*args)
        instance = self.screening.instance
        floors = Floors(self.floor_s(i) / per_requested(ctx), cycle_floor_s(ctx),
                        held_rate_floor_usd_s(instance, ctx.shape, ctx.buildings) if priced_rows_needed(
                            instance.search) else 0.0)
        model = HighsModel(build_model(ctx, floors))
        took_s = time.perf_counter() - start
        self.build_s += took_s
        self.clock.record_build(charged, took_s)
        return model

    def narrowed_model(self, i: int, buildings: list[str], pairs: list[Pair],
                       check_fit: bool = True) -> tuple[HighsModel, ShapeContext] | None:
        """Shape i's model over `buildings` holding only `pairs` (`narrowed`), with its context: one of the
        KEPT_MODELS most recently used, or built now (`build`); None when it must be built and, with `check_fit`, its
        build does not fit the time left."""
        key = (i, tuple(buildings), tuple(pairs))
        if key in self.kept:
            self.kept.move_to_end(key)
            return self.kept[key]
        ctx = self.ctx(i)
        sub = narrowed(ctx, buildings, pairs)
        if check_fit and not self.fits(sub):
            return None
        self.kept[key] = self.build(i, sub), sub
        if len(self.kept) > KEPT_MODELS:
            self.kept.popitem(last=False)
        return self.kept[key]

    def model(self, i: int) -> HighsModel:
        """Shape i's MILP, built and translated to HiGHS once, dropped after its full solve (`best` keeps the
        incumbent's)."""
        if i not in self.models:
            self.models[i] = self.build(i, self.ctx(i))
        return self.models[i]

    def solve(self, i: int, nodes: int, rel_gap: float, work_limit_s: float | None = None,
              restricted: tuple[HighsModel, ShapeContext] | None = None, beat_by_gap: bool = False):
        """One HiGHS solve of shape i's model (as currently fixed; or of its `restricted` model and context) within
        `nodes` and `work_limit_s` of work (and the wall time that may take, `WorkClock.step_wall_s`; `remaining`
        and the wall time left when None), its critical paths cut
        (`path_cuts.solve_with_cuts`), its work charged; keeps the best incumbent. Its cutoff is the incumbent, or
        with `beat_by_gap` the incumbent less the search's gap: a proof then needs only that nothing beats the
        incumbent by more than the gap, which is what the search asks of a shape (`promising`)."""
        model, ctx = restricted or (self.model(i), self.ctx(i))
        factor = per_requested(ctx)
        cutoff = self.incumbent * (1 - self.gap if beat_by_gap else 1.0) / factor
        start = time.perf_counter()
        wall_s = self.clock.wall_left_s(self.tail_s()) if work_limit_s is None else self.clock.step_wall_s(
            work_limit_s, self.tail_s())
        try:
            outcome = solve_with_cuts(model, ctx, rel_gap=rel_gap, threads=self.threads, max_nodes=nodes,
                                      time_limit_s=wall_s,
                                      work_limit_s=max(self.remaining() if work_limit_s is None else work_limit_s,
                                                       0.0),
                                      cutoff=None if math.isinf(cutoff) else cutoff)
        except SolverFailure:  # one model's internal error proves nothing and ends nothing but this solve
            outcome = MILPOutcome(MILPStatus.failed, None, 0.0, time.perf_counter() - start)
        self.solver_s += outcome.wall_s
        self.clock.charge(outcome.work_s)
        self.clock.wall_bound |= outcome.status is MILPStatus.time_limit
        if outcome.incumbent is not None and outcome.incumbent * factor < self.incumbent:
            if self.best is not None:
                self.superseded.append(self.best)
            self.best = Incumbent(outcome.incumbent * factor, i, model, ctx, model_size(model.model),
                                  snapshot(model.model))
        self.report()
        return outcome

    def solve_cells(self, i: int, cells: Cells | None, work_limit_s: float,
                    restricted: tuple[HighsModel, ShapeContext] | None = None, option: int | None = None,
                    variant: int | None = None, layers: list[int] | None = None) -> None:
        """Shape i's model (or its `restricted` one) with `cells` fixed, and the option, variant and layers, each
        unless None, in one pattern solve (`solve`: PATTERN_NODES, `work_limit_s`). With the layers left free, first
        at the cells' speed split (`patterns.speed_layers`, in the least layer granularity of the model's options),
        which the node budget may not reach, then free with that point as its cutoff. At the split the schedule
        option and DP variant are those of the pair of least bound that holds it in HBM (`patterns.holding_pairs`),
        unless given: with the pair free HiGHS may not find any point of the split within the nodes (generated
        medium seed 84: PP 18 over six buildings, 200 nodes and no plan in 1.2 s; each pair fixed, a plan in 0.25-0.5
        s)."""
        model, ctx = restricted or (self.model(i), self.ctx(i))
        grain = min(o.layer_granularity for o in ([ctx.options[option]] if option is not None else ctx.options))
        split = speed_layers(ctx, cells, grain) if cells is not None and layers is None else None
        steps = [(layers, option, variant)]
        if split is not None:
            steps.insert(0, (split, *self.split_pair(i, ctx, cells, split)) if option is None and variant is None
                         else (split, option, variant))
        with fixed_cells(model.model, cells):
            for fixed, o, v in steps:
                if self.exhausted() and self.best is not None:
                    return
                with fixed_decisions(model.model, o, v, fixed):
                    self.solve(i, PATTERN_NODES, self.gap * PATTERN_GAP, work_limit_s, restricted=restricted)

    def split_pair(self, i: int, ctx: ShapeContext, cells: Cells, split: list[int]) -> tuple[int | None, int | None]:
        """The indices in ctx (shape i's context or a restriction's) of the option and variant of shape i's open pair
        of least bound (`open_pairs`) that holds `split` over `cells` in HBM; (None, None) when none does."""
        bounds = {pair: bound for bound, pair in self.open_pairs(i)}
        held = [pair for pair in holding_pairs(ctx, cells, split) if pair in bounds]
        if not held:
            return None, None
        option, variant = min(held, key=bounds.__getitem__)
        return ctx.options.index(option), ctx.variants.index(variant)

    def open_pairs(self, i: int) -> list[tuple[float, Pair]]:
        """Shape i's pairs that are open and promising, with their bounds on the objective per requested batch. A
        pair's bound starts at its sharpened bound (`first_stage_lower_bound_s`) and rises to what its solves prove
        (`solve_pair`)."""
        ctx = self.ctx(i)
        if i not in self.pair_bounds:
            self.clock.charge(SHARPEN_S * len(ctx.pairs))
            self.pair_bounds[i] = {pair: self.lift(i, first_stage_lower_bound_s(ctx, [pair]) * per_requested(ctx))
                                   for pair in ctx.pairs}
            self.closed_pairs[i] = set()
        return [(bound, pair) for pair, bound in self.pair_bounds[i].items()
                if pair not in self.closed_pairs[i] and self.promising(bound)]

    def solve_pair(self, i: int, pair: Pair, nodes: int) -> None:
        """Solve shape i's full MILP with the pair's schedule option u and DP variant w fixed
        (`scaled.fixed_decisions`) within `nodes`, its bound held as T's lower bound, cut off at the incumbent less
        the gap; the pair's bound rises to what the solve proves, the shape's to the least over its pairs, and the
        shape is closed once every pair is closed or cannot beat the incumbent by more than the gap (the incumbent
        only falls).

        Why pair by pair: the rows a choice switches on are big-M disjunctions, M (1 - u[o]) and M (1 - w[v]),
        and the relaxation mixes options and variants to switch off what each costs (a 629-column restriction of a
        160-GPU five-zone instance: root LP 0.492 s against 0.566 s with u and w fixed, optimum 0.585 s; 15.7 s to
        prove it in one solve, 8.9 s pair by pair, most pairs cut off at their root)."""
        ctx, factor = self.ctx(i), per_requested(self.ctx(i))
        bounds, closed, m = self.pair_bounds[i], self.closed_pairs[i], self.model(i).model
        option, variant = pair
        held_lb = m.T.lb
        m.T.setlb(max(held_lb or 0.0, first_stage_lower_bound_s(ctx, [pair]) if self.costed else bounds[pair] / factor))
        try:
            with fixed_decisions(m, ctx.options.index(option), ctx.variants.index(variant), None):
                outcome = self.solve(i, nodes, self.gap, beat_by_gap=True)
        finally:
            m.T.setlb(held_lb)
        bounds[pair] = max(bounds[pair], outcome.bound * factor)
        if outcome.finished:
            closed.add(pair)
        self.bounds[i] = max(self.bounds[i], min(bounds.values(), default=math.inf))
        if not self.open_pairs(i):
            self.closed.add(i)
            self.models.pop(i, None)

    def next_open(self, shapes: Iterator[int]) -> int | None:
        """The next shape of `shapes` (a `best_first` queue) whose model is built or fits the time left
        (`affordable`), its restrictions and patterns tried first if phase 1 did not reach it; None when none."""
        for i in shapes:
            if self.exhausted():
                self.out_of_time = True
                return None
            if not self.affordable(i):
                self.out_of_time = True  # this round still solves the models already built
                if self.stopped_early is None:
                    self.stopped_early = (f"stopped at {self.elapsed():.1f} s of work: the next shape's model "
                                          f"({self.ctx(i).shape.label()}) would take "
                                          f"{self.build_s_predicted(self.ctx(i)):.1f} s to build, more "
                                          f"than the {max(self.remaining(), 0.0):.1f} s left")
                continue
            if i not in self.patterns_tried:
                self.try_restriction(i)
                self.try_patterns(i)
                if not self.promising(self.bounds[i]):
                    continue
            return i
        return None

    def solve_round(self, nodes: int) -> bool:
        """One round of phase 2: every open, promising pair of every open shape, each solved once within `nodes`
        (`solve_pair`), in order of the pairs' bounds across shapes, so that a round stopped by the limit has
        raised the least bounds first; shapes join from the `best_first` queue as its front reaches the pairs'.
        True when some pair was solved."""
        shapes = self.best_first()
        queue: list[tuple[float, int, int, Pair]] = []
        ahead, progressed = self.next_open(shapes), False
        while ahead is not None or queue:
            if ahead is not None and (not queue or self.bounds[ahead] <= queue[0][0]):
                for bound, pair in self.open_pairs(ahead):
                    heapq.heappush(queue, (bound, ahead, self.ctx(ahead).pairs.index(pair), pair))
                ahead = self.next_open(shapes)
                continue
            bound, i, _, pair = heapq.heappop(queue)
            if self.exhausted():
                self.out_of_time = True
                break
            if i in self.closed or pair in self.closed_pairs[i] or not self.promising(self.pair_bounds[i][pair]):
                continue
            self.solve_pair(i, pair, nodes)
            progressed = True
        return progressed

    def restrictions(self, i: int) -> list[Restriction]:
        """Shape i's restrictions (`patterns.restrictions`), kept from their first use."""
        if i not in self.restriction_sets:
            self.restriction_sets[i] = restrictions(self.ctx(i))
        return self.restriction_sets[i]

    def restriction_extent(self, i: int) -> float:
        """`extent` of shape i's smallest restriction: p B'^2 (inf when it has none)."""
        sets = self.restrictions(i)
        return self.ctx(i).shape.pp * len(sets[0].buildings) ** 2 if sets else math.inf

    def pattern_s(self) -> float:
        """The work cap of one pattern or restriction solve in the search (PATTERN_SHARE)."""
        return min(self.remaining(), PATTERN_SHARE * self.limit)

    def restriction_pairs(self, i: int) -> list[Pair]:
        """Shape i's open pairs a restriction's model holds in the search: per schedule option and per DP variant,
        its open pair of least bound. A restriction only looks for an incumbent, and a model of so few pairs builds
        several times faster than one of every pair (generated speedup point 41, a 32-stage shape over three
        buildings: 0.4 s against 1.35 s); every option and every variant stays, since a pattern's cells may suit
        one option's layer granularity or one variant's memory and not another's (the one pair of least bound left
        generated medium seed 10 without any plan in 5 s)."""
        by_option: dict[ScheduleOption, Pair] = {}
        by_variant: dict[DPVariant, Pair] = {}
        for _, pair in sorted(self.open_pairs(i), key=lambda item: item[0]):
            by_option.setdefault(pair[0], pair)
            by_variant.setdefault(pair[1], pair)
        return list(dict.fromkeys([*by_option.values(), *by_variant.values()]))

    def try_restriction(self, i: int, work_limit_s: float | None = None, every_pair: bool = False) -> None:
        """Solve shape i's restrictions (`patterns.restrictions`: its MILP over the buildings DP-out fills, then over
        those PP-out uses) with their patterns' cells fixed, each solve within PATTERN_NODES and `pattern_s`; once
        per shape in the search, each restriction's free-placement solve deferred to `free_placements`, and again,
        within `work_limit_s`, in the rescue, there with the placement free after the patterns. Their bounds hold for
        the restrictions only, so only their incumbents are kept, and a restriction's model holds only
        `restriction_pairs` (every pair with `every_pair`: the rescue's last resort)."""
        rescue = work_limit_s is not None
        if not rescue:
            if i in self.restrictions_tried:
                return
            self.restrictions_tried.add(i)
        ctx = self.ctx(i)
        pairs = ctx.pairs if every_pair else self.restriction_pairs(i)
        for restriction in self.restrictions(i) if pairs else []:
            held = ctx.held_pairs(restriction.buildings, pairs)
            if not held:
                continue
            restricted = self.narrowed_model(i, restriction.buildings, held, check_fit=not rescue)
            if restricted is None:
                return
            if not rescue:
                self.placements_deferred.append((i, tuple(restriction.buildings)))
            for cells in [*restriction.patterns, *([None] if rescue else [])]:
                if self.best is not None if rescue else self.exhausted():
                    return  # out of time; in the rescue, a plan is all it needs
                self.solve_cells(i, cells, work_limit_s or self.pattern_s(), restricted)

    def free_placements(self) -> None:
        """The deferred free-placement solves of the restrictions tried (`try_restriction`), in the order they were
        deferred, each within PATTERN_NODES and `pattern_s`, climbing from each new plan. They come after the steps
        with a placement fixed: solved at once, within `try_restriction`, they took 39 s of 60 generated medium 5 s
        solves (seeds 0-59, two at a time) and found a better plan twice in 134 solves, while the climb's scaled
        layouts waited (seed 14: its TP 8 PP 16 plan was never scaled out to PP 24, 31 % faster); deferred, 60 of them
        ran in 17 s. The incumbent's own shape's solved within the climb, before its neighbours' steps, took back the
        time the scaled layouts need (seeds 14, 18 and 20 lost the 15-31 % their deferred plans gain); taken first
        here, the 200-instance suite's plans were 1.3-1.6 % slower in geometric mean."""
        while self.placements_deferred and not self.exhausted():
            i, buildings = self.placements_deferred.pop(0)
            if i in self.closed or not self.promising(self.bounds[i]):
                continue
            held = self.ctx(i).held_pairs(list(buildings), self.restriction_pairs(i))
            restricted = self.narrowed_model(i, list(buildings), held) if held else None
            if restricted is not None and not self.exhausted():
                best = self.best
                self.solve_cells(i, None, self.pattern_s(), restricted)
                if self.best is not best:
                    self.climb()

    def try_patterns(self, i: int, work_limit_s: float | None = None) -> None:
        """Solve shape i's named patterns that use every building (the others are solved in its restrictions) on its
        full model, each within PATTERN_NODES and `pattern_s`; in the rescue (`work_limit_s` given, each solve
        within it) on a model of its `restriction_pairs` only, which builds several times faster."""
        self.patterns_tried.add(i)
        ctx = self.ctx(i)
        fixings = [cells for cells in (pattern_cells(ctx, pattern) for pattern in Pattern)
                   if cells is not None and spans_all(ctx, cells)]
        if not fixings:
            return
        restricted = None
        if work_limit_s is not None:
            restricted = self.narrowed_model(i, ctx.buildings, self.restriction_pairs(i) or list(ctx.pairs),
                                             check_fit=False)
        for cells in fixings:
            if (self.exhausted()) if work_limit_s is None else self.best is not None:
                return
            self.solve_cells(i, cells, work_limit_s or self.pattern_s(), restricted)

    def scaling_out(self, shape: Shape) -> list[int]:
        """Open, promising candidates with the same TP, CP, EP and micro-batch as `shape` over more GPUs, in queue
        order (`key`)."""
        return sorted((i for i, candidate in enumerate(self.candidates)
                       if degrees(candidate.shape)[:4] == degrees(shape)[:4] and candidate.shape.gpus > shape.gpus
                       and i not in self.closed and self.promising(self.bounds[i])), key=self.key)

    def neighbours(self, shape: Shape) -> list[int]:
        """Open, promising candidates whose restrictions were not tried and that scale `shape` out: the same TP, CP,
        EP and micro-batch over more GPUs. In queue order (`key`), the NEIGHBOURS first of those with the same PP
        (more pipelines, as DP-out adds them), of those with the same DP (deeper pipelines, as PP-out builds them)
        and of all of them, once each."""
        grown = [i for i in self.scaling_out(shape) if i not in self.restrictions_tried]
        wider = [i for i in grown if self.candidates[i].shape.pp == shape.pp]
        deeper = [i for i in grown if self.candidates[i].shape.dp == shape.dp]
        return list(dict.fromkeys(wider[:NEIGHBOURS] + deeper[:NEIGHBOURS] + grown[:NEIGHBOURS]))

    def scale_out(self, root: Incumbent) -> None:
        """Price the DP-out and PP-out layouts (`scaled`) of plan `root` on the promising shapes that scale its
        shape out (same TP, CP, EP and micro-batch, more GPUs): DP-out onto more pipelines, PP-out onto deeper ones,
        then PP-out onto more pipelines, up to SCALED_PER_KIND of each kind whose model is kept or fits the time
        left, in `climbing_order`: each in its MILP over the buildings it uses, with its cells, DP-out's layers
        (root's) and root's schedule option and DP variant (where the shape offers them) fixed, the model holding
        only the pairs that agree with them (`narrowed`)."""
        m = root.model.model
        restore(m, root.values)
        option = root.ctx.options[next(o for o in m.O if m.u[o].value > 0.5)]
        variant = root.ctx.variants[next(v for v in m.V if m.w[v].value > 0.5)]
        layers = [round(m.n[j].value) for j in m.J]
        shape = root.ctx.shape
        grown = self.scaling_out(shape)
        for same, make in [(lambda s: s.pp == shape.pp, lambda ctx: dp_out(ctx, layers)),
                           (lambda s: s.dp == shape.dp, pp_out),
                           (lambda s: s.pp == shape.pp, pp_out)]:
            tried = 0
            for i in climbing_order([i for i in grown if same(self.candidates[i].shape)],
                                    lambda i: self.candidates[i].shape.gpus):
                if tried == SCALED_PER_KIND or self.exhausted():
                    break
                ctx = self.ctx(i)
                scaled = make(ctx)
                if scaled is None or not self.promising(self.bounds[i]):
                    continue
                buildings = [k for k in ctx.buildings if k in holders(scaled.cells)]
                agree = [(o, v) for o, v in ctx.pairs if (option not in ctx.options or o == option)
                         and (variant not in ctx.variants or v == variant)]
                pairs = ctx.held_pairs(buildings, agree)
                restricted = self.narrowed_model(i, buildings, pairs) if pairs else None
                if restricted is None:
                    continue
                if self.exhausted():  # the build took what was left
                    return
                tried += 1
                sub = restricted[1]
                self.solve_cells(i, scaled.cells, self.pattern_s(), restricted,
                                 sub.options.index(option) if option in sub.options else None,
                                 sub.variants.index(variant) if variant in sub.variants else None, scaled.layers)

    def roots(self) -> Iterator[Incumbent]:
        """Plans the climb has not scaled out yet, least objective first: the incumbent, then every former
        incumbent within CLIMB_MARGIN of it. A plan priced a little above the incumbent may scale out to a much
        better one: generated medium seed 102's DP-out of the seed's ZB-V pipelines onto a second B200 hall
        (TP 2 PP 4 DP 91, 0.505 s) was superseded within the same scale-out by a ZB-H1 PP 8 DP 56 plan (0.501 s),
        and DP 104 over the same two halls, 8 % faster than either, was never tried."""
        while self.best is not None:
            near = [plan for plan in [self.best, *self.superseded] if degrees(plan.ctx.shape) not in self.climbed
                    and plan.objective <= self.best.objective * (1 + CLIMB_MARGIN)]
            if not near:
                return
            yield min(near, key=lambda plan: plan.objective)

    def climb(self) -> None:
        """Hill-climb from the incumbent: price its scaled-out layouts (`scale_out`) and climb from each one that
        wins; where none wins, solve the incumbent's shape's restrictions (its patterns' cells) and, when they win,
        climb from that plan; then solve the restrictions and patterns of the shapes that scale its shape out
        (`neighbours`), then those of each better incumbent's shape, while time is left; then price the scaled-out
        layouts of the former incumbents near it (`roots`). A plan on a few buildings (the seed's, a restriction's)
        thus reaches the same pipelines over more buildings early, whatever its shape's place in the bound order.
        A scaled plan's restrictions wait until its own scale-out has been priced: solved at once they took 1-1.8 s
        of a 5 s search that then ended before the next step out (generated medium seed 111: its TP 8 PP 14 DP 6
        plan's restriction took 1.5 s, and PP 21 DP 6, a third faster, was never priced)."""
        for root in self.roots():
            if self.exhausted():
                return
            shape, best = root.ctx.shape, self.best
            self.climbed.add(degrees(shape))
            self.scale_out(root)
            if self.best is not best:
                continue  # climb on from the scaled plan
            if root is not best:
                continue  # a former incumbent's own neighbours had their turn when it led
            if root.index >= 0 and root.index not in self.restrictions_tried:
                self.try_restriction(root.index)
                if self.best is not best:
                    self.climbed.discard(degrees(shape))  # climb again from the placement the restriction found
                    continue
            for i in self.neighbours(shape):
                if self.exhausted():
                    return
                self.try_restriction(i)
                if i not in self.patterns_tried and self.affordable(i):
                    self.try_patterns(i)

    def spans(self) -> list[Iterator[int]]:
        """One best-first queue per span, fewest buildings first."""
        groups: dict[int, list[int]] = {}
        for i, candidate in enumerate(self.candidates):
            groups.setdefault(span(self.screening.instance, candidate.shape), []).append(i)
        return [self.best_first(groups[key]) for key in sorted(groups)]

    def front_first(self) -> None:
        """Solve the restrictions of the shape of least sharpened bound (the front of `best_first`) when pricing the
        shapes whose floors lie below it fits one pattern solve's time (`pattern_s`): the climb from the seed scales
        the strongest building's plan out shape by shape, while the front is the shape that can beat it most (the
        131,072-GPU DeepSeek-V3 instance reached its 1.17 s plan at 10 s from its front, 1.61 s by the climb
        alone). Where many shapes lie below the front (0.6 s of pricing each hundred shapes on 13-15 buildings), the
        search goes on without it; the shapes priced meanwhile stay priced."""
        front = next(self.best_first(until_s=self.elapsed() + self.pattern_s(), tail_s=self.tail_s()), None)
        if front is not None:
            self.try_restriction(front)

    def resolve_seed(self) -> None:
        """Solve the seed's shape again over the seed's buildings with its placement free, within PATTERN_NODES and
        `pattern_s` (the incumbent its cutoff), unless the seed's own search proved it: that search gave each of its
        solves a tenth of its share of the limit (generated medium seed 19: a GPipe plan from 0.1 s solves, where
        ZB-H1 on the same shape is 12 % faster), and no later step solves a shape over a building set the patterns
        do not pick."""
        seed = self.best
        if seed is None or seed.index >= 0 or seed.proven_alone or self.exhausted():
            return
        i = next((i for i, candidate in enumerate(self.candidates) if candidate.shape == seed.ctx.shape), None)
        if i is None or i in self.closed:
            return
        self.price(i)  # its screening bound may already say it cannot beat the seed by the gap
        if not self.promising(self.bounds[i]):
            return
        pairs = self.ctx(i).held_pairs(seed.ctx.buildings, self.restriction_pairs(i))
        restricted = self.narrowed_model(i, seed.ctx.buildings, pairs) if pairs else None
        if restricted is not None and not self.exhausted():
            self.solve(i, PATTERN_NODES, self.gap * PATTERN_GAP, self.pattern_s(), restricted=restricted)

    def run(self) -> None:
        self.report(Phase.patterns)
        self.resolve_seed()
        self.front_first()
        self.climb()  # from the seed, or the front's plan: over more buildings
        fronts: list[int] = []
        for queue in [self.best_first(), *self.spans()]:
            if self.exhausted():
                self.out_of_time = True
                break
            i = next(queue, None)
            if i is not None and i not in fronts:
                fronts.append(i)
        # Without a plan, smallest models first (an early, cheap incumbent); with one, least bound first: the shape
        # that can beat it most (the 131k-GPU Llama 3 405B instance reached its plan of 3.49 s after 27-47 s in
        # extent order, 14-17 s in bound order).
        for i in sorted(fronts, key=self.restriction_extent if self.best is None else self.key):
            if not self.exhausted():
                self.try_restriction(i)
                self.climb()
        for i in fronts:
            if not self.exhausted() and self.affordable(i):
                self.try_patterns(i)
                self.climb()
        self.free_placements()
        nodes, progressed = FIRST_NODES, True
        self.report(Phase.shapes)
        while progressed and not self.out_of_time:
            progressed = self.solve_round(nodes)
            self.climb()
            self.free_placements()
            nodes *= NODE_GROWTH
        if math.isinf(self.incumbent) and self.out_of_time:
            self.rescue()
        self.settle()
        self.models.clear()
        self.kept.clear()

    def rescue(self) -> None:
        """The search ended without a plan (screening ate the time, or no restriction or pattern tried had one): the
        restrictions of the shapes already priced (smallest models first), then the restrictions and patterns of the
        shapes in bound order (each priced when it reaches the front), until one gives a plan, while the limit lasts
        (each solve at least RESCUE_FLOOR_S), and at least one shape whose patterns fit its buildings: past the limit
        the shapes already priced first, in bound order, then the others as each is priced, none put back in bound
        order (which priced shapes 3.3 s past the limit in the single-building seed of generated medium seed 148 and
        4.6 s past a 0.5 s limit on the 131,072-GPU Llama 3 405B, on a machine 2.5 times slower). Each model holds
        only the shape's `restriction_pairs` (it builds several times faster), and a restriction is solved over every
        pair when those give no plan."""
        self.report(Phase.rescue)

        def left() -> float:
            return max(RESCUE_FLOOR_S, self.clock.left_s())

        def restricted(i: int) -> None:
            self.try_restriction(i, left())
            if self.best is None and len(self.restriction_pairs(i)) < len(self.ctx(i).pairs):
                self.try_restriction(i, left(), every_pair=True)

        def attempt(i: int) -> bool:
            """Try shape i's restrictions, then its patterns; False when it has no finite bound or no pattern."""
            if math.isinf(self.bounds[i]) or not any(pattern_cells(self.ctx(i), pattern) for pattern in Pattern):
                return False
            restricted(i)
            if self.best is None:
                self.try_patterns(i, left())
            return True

        priced = [i for i, candidate in enumerate(self.candidates) if candidate.ctx is not None
                  and i not in self.closed and not math.isinf(self.bounds[i])
                  and self.restriction_extent(i) < extent(candidate.ctx)]
        for i in sorted(priced, key=lambda i: (self.restriction_extent(i), self.key(i))):  # smallest models first
            restricted(i)
            if self.best is not None or self.clock.left_s() <= 0:
                return
        queue = [(*self.key(i), i) for i, b in enumerate(self.bounds) if i not in self.closed and not math.isinf(b)]
        heapq.heapify(queue)
        tried = False
        while queue and self.clock.left_s() > 0:
            *_, i = heapq.heappop(queue)
            if self.candidates[i].ctx is None:
                self.price(i)
                if not math.isinf(self.bounds[i]):
                    heapq.heappush(queue, (*self.key(i), i))
                continue
            tried |= attempt(i)
            if self.best is not None:
                return
        if tried:
            return
        for *_, i in sorted(queue, key=lambda item: (self.candidates[item[-1]].ctx is None, item)):
            self.price(i)
            if attempt(i):
                return


def climbing_order(grown: list[int], gpus: Callable[[int], int]) -> list[int]:
    """Shapes `grown` (in queue order) in the order a plan is scaled out onto them (`ShapeSearch.scale_out`): the one
    of least bound, then the nearest (fewest `gpus`), then the others by bound. The least bound is the widest, whose
    model may span every building, slow ones included, and not fit the time left; the nearest spans the fewest
    buildings, so its model is small and a climb from it reaches the wider ones step by step (generated medium seed
    6: from TP 2 PP 32 DP 2, DP 22 and 16 over 12-14 buildings were never built within 10 s, while DP 4 over the
    three B200 buildings replays 26 % faster than the plan)."""
    nearest = [min(grown, key=gpus)] if grown else []
    return list(dict.fromkeys([*grown[:1], *nearest, *grown]))


def solve_instance(
    instance: Instance,
    *,
    time_limit_s: float | None = None,
    rel_gap: float | None = None,
    threads: int | None = None,
    progress: ProgressHook | None = None,
) -> Plan:
    """Search shapes and solve each shape's placement MILP; arguments override instance.search when given;
    `progress` hears of every phase and solve (`milp.progress`).

    The limit covers the whole solve: screening stops at SCREEN_SHARE of it (once a shape has passed), the search
    at the limit, and the bound stays valid over the shapes left unscreened (`Screening.unscreened_bound_s`). What
    earlier work in this process left to the cyclic collector is collected before the clock starts
    (`gcpause.collect_left_cycles`), and the solve runs with the collector paused (`search_instance`), so the steps
    the search reaches within the limit depend on neither."""
    collect_left_cycles()
    with paused_cycle_collection():
        return search_instance(instance, time_limit_s, rel_gap, threads, progress)


def search_instance(instance: Instance, time_limit_s: float | None, rel_gap: float | None, threads: int | None,
                    progress: ProgressHook | None, clock: WorkClock | None = None) -> Plan:
    """`solve_instance`'s work, run with the cyclic collector paused: its automatic collections rescan every object
    alive, the models the search keeps included, and took 0.5-1.3 s of 5 s solves of generated medium instances
    (0.1-0.5 s each, several per solve, at points that moved with the machine's load: a price or a solve past the
    limit). Reference counting frees what the search drops; the few cycles it leaves (about 90 bytes each, 1.4
    million after 30 s of generated medium seed 31: 126 MB) are collected once they pass
    `gcpause.GROWN_OBJECTS` (`ShapeSearch.build`) and after the solve.

    The limit is a budget of work (`milp.work`) and, WALL_GRACE past it, a wall-clock limit, unless `clock` is given
    (whose wall limit then holds)."""
    limit = time_limit_s if time_limit_s is not None else instance.search.time_limit_s
    clock = clock or WorkClock(limit, limit * (1 + WALL_GRACE))
    gap = rel_gap if rel_gap is not None else instance.search.rel_gap
    threads = threads if threads is not None else instance.search.threads
    buildings = len(instance.topology.buildings)
    if buildings > MAX_BUILDINGS:
        raise InputError(f"topology.buildings: {buildings:,} buildings; the solver supports at most {MAX_BUILDINGS} "
                         f"(group buildings of one site into one, or solve regions apart)")
    if progress is not None:
        progress(SearchProgress(Phase.routes, 0.0, 0, 0, None, math.inf))
    routes = route_table(instance.topology)
    seed = None
    if buildings > 1 and seed_seconds(limit):
        if progress is not None:
            progress(SearchProgress(Phase.seed, clock.wall_s, 0, 0, None, math.inf))
        seed = seed_incumbent(instance, routes, clock, seed_seconds(limit), gap, threads)
    searched_from = time.perf_counter()  # the seed's own solve counts in wall_s only
    if progress is not None:
        known = None if seed is None else seed.objective  # the bound is capped by the incumbent (`ShapeSearch.bound`)
        progress(SearchProgress(Phase.screening, clock.wall_s, 0, 0, known, math.inf if known is None else known))
    screening = screen(instance, routes, clock, (1 - SCREEN_SHARE) * max(0.0, limit - clock.spent_s))
    if not screening.candidates and not screening.unscreened:
        raise infeasibility(instance, screening)
    search = ShapeSearch(screening, clock, limit, gap, threads, best=seed,
                         build_s=time.perf_counter() - searched_from, progress=progress)
    search.run()

    best, bound = search.best, search.bound
    if best is None:
        if math.isinf(bound) and (instance.search.max_cost_per_iteration or instance.search.min_tokens_per_s):
            raise InfeasibleInstance(limits_infeasibility(instance))
        if math.isinf(bound):
            raise InfeasibleInstance(
                "placement: no shape admits a placement satisfying memory, building capacity and layer "
                "divisibility together"
            )
        raise NoPlanFound(
            f"no feasible layout found within the {limit:g} s time limit (best bound "
            f"{f'${bound:.4g}' if search.costed else f'{bound:.3f} s'}); "
            f"raise --time-limit"
        )
    highs, ctx = best.model, best.ctx
    model = highs.model
    search.report(Phase.polish)
    restore(model, best.values)
    polish_left_s = search.polish_s * (POLISH_SOLVES - 1) / POLISH_SOLVES  # what the polish LPs after it keep
    reprice(highs, ctx, best.objective / per_requested(ctx), clock, polish_left_s, threads)
    incumbent = polish(highs, model.objective.expr, threads, max(0.1, clock.wall_left_s()))
    bound /= per_requested(ctx)
    wall = clock.wall_s
    rel = (incumbent - bound) / incumbent if incumbent > 0 else 0.0
    proven = rel <= gap + 1e-9 or incumbent - bound <= ABS_GAP  # HiGHS closes at either
    left_open = [i for i, b in enumerate(search.bounds) if i not in search.closed and search.promising(b)]
    figures = {"incumbent_s": incumbent, "bound_s": bound} if not search.costed else {
        "incumbent_s": model.T.value, "bound_s": None, "incumbent_usd": incumbent, "bound_usd": bound}
    stats = SolveStats(
        status="optimal" if proven else "time limit" if (
            search.out_of_time or screening.unscreened or clock.left_s() <= 0) else "gap open",
        rel_gap=max(rel, 0.0), wall_s=wall, work_s=clock.spent_s, wall_bound=clock.wall_bound, build_s=search.build_s,
        solver_s=search.solver_s, shapes_total=screening.total, shapes_solved=len(search.closed),
        shapes_pruned=len(screening.candidates) - len(search.closed) - len(left_open), shapes_open=len(left_open),
        stopped_early=None if proven else search.stopped_early,
        **best.size,
        objective=instance.search.objective, **figures,
    )
    plan = extract_plan(model, ctx, stats)
    if not priced(instance):
        return plan
    held = {k for stage in plan.stages for k in stage.cells_per_building}
    cost = iteration_cost(instance, held, plan.prediction.iteration_s, link_sends(model, ctx),
                          plan.shape.batch_sequences * instance.training.seq_len)
    return plan.model_copy(update={"prediction": plan.prediction.model_copy(update={"cost": cost})})


def reprice(highs: HighsModel, ctx: ShapeContext, objective: float, clock: WorkClock, tail_s: float,
            threads: int | None) -> None:
    """Re-solve the loaded incumbent's model with its layout held (`formulation.build.held_layout`) but its links'
    transports, and keep a better point: a solve stopped at its budget, or at its gap, may leave derived binaries (a
    link's price line, a split stage's indicator) where they over-price its own layout (generated seed 34: a plan
    priced 4.39 s that its layout's MILP price, and the replay, put at 2.4 s), and a transport that costs its layout
    time (under another search order the bundled lossy instance's plan, proven within 1 %, kept its pipeline on
    go-back-N at 2.439 s where sprayed selective repeat gives the same layout 2.427 s). Then the point's own longest
    path is cut (`path_cuts.cut_critical_path`), for `highs.polish`'s LP to price: the search cut the paths of the
    points it solved, and the plan's point (its transports moved, or restored from an earlier solve) can have another
    (the bundled pp-out's ZB-V plan of one search order was reported at 4.358 s, its layout's price 4.415 s, its replay
    4.506 s; generated medium seed 97's, its search's time spent, 7.2 % below its replay). It runs on `clock` up to
    the last `tail_s` of the limit (at least 0.1 s), and is charged."""
    with held_layout(highs.model, tuple(name for name in LAYOUT_DECISIONS if name != "z")):
        outcome = solve_milp(highs, time_limit_s=max(0.1, clock.wall_left_s(tail_s)), rel_gap=0.0, threads=threads,
                             cutoff=objective, work_limit_s=max(0.1, clock.left_s(tail_s)))
    clock.charge(outcome.work_s + path_s(ctx))
    cut_critical_path(highs, ctx)


def seed_seconds(limit_s: float) -> float:
    """The seed's budget (`SEED_SHARE`): max(SEED_SHARE limit, SEED_MIN_SECONDS) when that is at most half the
    limit, else 0 (no seed)."""
    seconds = max(SEED_SHARE * limit_s, SEED_MIN_SECONDS)
    return seconds if seconds <= limit_s / 2 else 0.0


def strongest_building(instance: Instance) -> str:
    """The building with the most dense compute: GPUs x their peak TFLOP/s in the training precision."""
    precision = instance.training.precision
    return max(instance.topology.buildings,
               key=lambda b: b.gpus * instance.gpu_type_of(b.name).peak_dense_tflops.get(precision, 0.0)).name


def seed_plan(instance: Instance, clock: WorkClock, gap: float, threads: int | None) -> Plan | None:
    """The plan of the instance restricted to its strongest building (its other buildings and every link left out),
    solved on `clock` (its limits); None when that building cannot run the job. A plan that leaves buildings unused
    is in the searched space, so it is an incumbent the cluster-wide search must beat (`seed_incumbent`): every shape
    that cannot is pruned, and the answer is never worse than this building alone."""
    strongest = strongest_building(instance)
    topology = instance.topology.model_copy(update={
        "buildings": [b for b in instance.topology.buildings if b.name == strongest], "links": []})
    try:
        return search_instance(instance.model_copy(update={"topology": topology}), clock.work_limit_s, gap, threads,
                               None, clock)
    except (InputError, NoPlanFound):
        return None


def seed_incumbent(instance: Instance, routes: RouteTable, clock: WorkClock, limit_s: float, gap: float,
                   threads: int | None) -> Incumbent | None:
    """`seed_plan`'s layout, solved within `limit_s` of work (and the wall time that may take, `step_wall_s`), as the
    search's first incumbent: priced in the whole instance by its MILP with every
    decision fixed (`price.fixed_layout_model`, with the whole instance's routes and cost tables), over the buildings
    it uses only (as `ShapeSearch.try_restriction` builds restrictions: a model of one building, not of the whole
    topology), its model kept for the final polish; None when HiGHS fails on it. `clock` is charged both."""
    own = WorkClock(limit_s, clock.step_wall_s(limit_s))
    plan = seed_plan(instance, own, gap, threads)
    clock.absorb(own)
    if plan is None:
        return None
    used = {k for stage in plan.stages for k in stage.cells_per_building}
    ctx, model = fixed_layout_model(instance, plan, routes.among([k for k in routes.buildings if k in used]))
    highs = HighsModel(model)
    try:
        outcome = solve_with_cuts(highs, ctx, time_limit_s=PRICE_LIMIT_S, rel_gap=0.0, threads=threads)
    except SolverFailure:
        return None  # the search goes on without a seed
    clock.charge(outcome.work_s)
    if outcome.incumbent is None:
        return None
    return Incumbent(outcome.incumbent * per_requested(ctx), -1, highs, ctx, model_size(model), snapshot(model),
                     proven_alone=plan.solve.status == "optimal")


def limits_infeasibility(instance: Instance) -> str:
    """Why no layout is left when the search's budget or throughput floor removed them all, naming the field."""
    search = instance.search
    limits = [f"search.max_cost_per_iteration (${search.max_cost_per_iteration:g}/iteration)"
              if search.max_cost_per_iteration is not None else "",
              f"search.min_tokens_per_s ({search.min_tokens_per_s:,.0f} tokens/s)"
              if search.min_tokens_per_s is not None else ""]
    named = " and ".join(limit for limit in limits if limit)
    return (f"{named}: no layout the search allows meets it (with memory, building capacity and layer "
            f"divisibility); raise the budget, lower the throughput floor or allow more shapes")
