"""The search's clock: seconds of work charged by what was done, not read off the wall.

Every step of the search is charged what it costs on the reference machine (2 cores, the project's CI box), from
figures that do not depend on the machine's load: a HiGHS run by its model's nonzeros, LP iterations and nodes
(`run_s`); a model's build by its size (`build_s`) and its stream paths by their graphs' ops
(`costmodel.stream_paths.graphs_s`); screening, pricing and sharpening a shape and finding a critical path by what
each costs on average there. The search's decisions read this clock: when screening stops, the seed's budget, each
pattern solve's cap (`checked_s`, held inside HiGHS by its interrupt callback), whether a model's build fits, when
the search stops. Two solves of one instance with the same options therefore take the same steps, and when their
work budget ends them they return the same plan, bound and gap whatever else the machine runs. The wall clock stays
the outer promise (`WorkClock.left_s`): where the machine is slower than the reference (or loaded), or a solve's
charges fall short of its wall time, the wall decides first (`SolveStats.wall_bound`), and the steps up to its
first decision are those of the unhurried search: each step keeps its share of the wall as well (`STEP_SLACK`), a
build must fit the wall left at the solve's pace (`WorkClock.wall_allows`), and the limit stops the search. The
shares above are shares of the limit, so a longer limit takes other steps.

The constants were fitted on 489 HiGHS runs and 1,500 shape pricings of 18 five-second solves (generated medium
instances and the bundled campus instance, session 50).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from scaleacross_milp.milp.context import ShapeContext

RUN_SETUP_S = 2.8e-3
"""Seconds of a HiGHS run before its first iteration (`run_s`)."""
RUN_S_PER_NONZERO = 6.9e-7
"""... per nonzero of its matrix (presolve and setup)."""
RUN_S_PER_ITERATION = 1.86e-6
ITERATION_ROWS_EXPONENT = 0.465
"""... per LP iteration, RUN_S_PER_ITERATION rows^ITERATION_ROWS_EXPONENT (every node's LP included): 26 us at
300 rows, 100 us at 5,000, 210 us at 25,000."""
RUN_S_PER_NODE = 4.9e-4
"""... per branch-and-bound node (separation, heuristics, bookkeeping)."""
CHECK_S = 4.2e-4
CHECK_ROWS_EXPONENT = 0.146
"""Seconds between two of HiGHS's limit checks in a MIP run (its interrupt callback: nodes, root separation rounds,
heuristics), CHECK_S rows^CHECK_ROWS_EXPONENT: what a run's cap counts while it runs (`checked_s`), since the callback
reports nodes but not LP iterations."""
WALL_GRACE = 0.03
"""How far past its work budget the wall clock may run (a share of the limit), within the promise of the limit plus
10 %: the work clock's charges are averages, and a solve whose charges fall a little short of its wall time still
ends on its work budget, the same whatever the load."""
STEP_SLACK = 2.0
"""A step given w seconds of work (the seed's solve, screening, a pattern solve) may run STEP_SLACK w wall seconds
(`WorkClock.step_wall_s`): above the spread of a solve's wall time per work on the reference machine (0.82-1.33,
5th-95th percentile, session 50), so there its work ends it, the same on any load (a single capped run whose charge
falls far short of its wall time, `checked_s`, may still end on the wall); on a machine more than STEP_SLACK times
slower (or as loaded) its wall time does, and each step keeps about its share of the limit. Held to their work
alone on a machine 2.5 times slower (session 51), generated medium seed 22's seed solve took half of a 5 s limit,
and the search, left no time, returned a 100 s plan where it finds a 3.3-4.2 s one."""
FLOOR_S_PER_SHAPE = 4e-5
"""Enumerating one shape and its compute floor (`screen.screen`, before screening)."""
SCREEN_S_PER_SHAPE = 8e-5
"""Screening one shape (its necessary conditions)."""
CROSSING_S = 1.5e-4
"""A shape's crossing floor (`screen.Screening.crossing_floor_s`)."""
PRICE_S = 2.3e-3
"""Pricing one shape (`screen.Screening.context`: its cost tables and screening bound)."""
SHARPEN_S = 1.6e-3
"""Sharpening one shape's bound (`bounds.first_stage_lower_bound_s`)."""
PATH_S_PER_OP = 2.0e-6
"""Finding a point's critical path (`path_cuts.cut_critical_path`), per operation of its pipeline's graph
(stages x microbatches x chunks x passes)."""


BUILD_OVERHEAD_S = 0.04
BUILD_S_PER_EXTENT = 8.4e-5
BUILD_S_PER_EXTENT_OPTION = 4.0e-5
BUILD_S_PER_EXTENT_VARIANT = 6.5e-5
BUILD_S_PER_STAGE_PAIR = 4.9e-5
"""A model's build and translation (`build_s`), a + `extent` (b + b_o O + b_v V) + c p^2 for a model holding O
schedule options and V DP variants among its pairs: most rows are per (stage, building) or per (stage boundary,
ordered building pair) and per option (the pipeline rows) or variant (the DP rows); rows per stage pair (interleaved
round trips, gather waits) make deep pipelines cost more than their extent says. Fitted by least squares (relative)
on the 186 builds over two buildings or more of 5 s solves of generated medium seeds 0-24 and small seeds 0-18 by 3
(2 cores, session 24): actual / this 0.67-1.82 (5-95 %), median 1.07."""
SINGLE_BUILDING_PACE = 0.5
"""A model over one building builds in about half what `build_s`'s fit over more buildings says (no cross-building
rows; actual / fit median 0.51 over 47 builds, session 24)."""


def extent(ctx: ShapeContext) -> int:
    """What a shape's model size grows with: its rows are mostly per (stage, building) and per (stage boundary,
    ordered building pair), so stages x buildings^2."""
    return ctx.shape.pp * len(ctx.buildings) ** 2


def build_s(ctx: ShapeContext) -> float:
    """Work of building and translating ctx's model: BUILD_OVERHEAD_S + `extent` x (BUILD_S_PER_EXTENT +
    BUILD_S_PER_EXTENT_OPTION O + BUILD_S_PER_EXTENT_VARIANT V) + BUILD_S_PER_STAGE_PAIR p^2, O and V the schedule
    options and DP variants among its pairs, times SINGLE_BUILDING_PACE over one building."""
    options, variants = len({o for o, _ in ctx.pairs}), len({v for _, v in ctx.pairs})
    seconds = (BUILD_OVERHEAD_S + extent(ctx) * (BUILD_S_PER_EXTENT + BUILD_S_PER_EXTENT_OPTION * options
                                                 + BUILD_S_PER_EXTENT_VARIANT * variants)
               + BUILD_S_PER_STAGE_PAIR * ctx.shape.pp ** 2)
    return seconds * (SINGLE_BUILDING_PACE if len(ctx.buildings) == 1 else 1.0)


def path_s(ctx: ShapeContext) -> float:
    """Work of finding one point's critical path: PATH_S_PER_OP x p x m x (the most chunks of ctx's options) x 3
    passes."""
    chunks = max((option.chunks for option in ctx.options), default=1)
    return PATH_S_PER_OP * ctx.shape.pp * ctx.shape.microbatches * chunks * 3


def run_s(rows: int, nonzeros: int, iterations: int, nodes: int) -> float:
    """A HiGHS run's work: RUN_SETUP_S + RUN_S_PER_NONZERO nnz + iterations RUN_S_PER_ITERATION
    rows^ITERATION_ROWS_EXPONENT + RUN_S_PER_NODE nodes. Within a factor 0.4-1.3 of a run's wall time (5th-95th
    percentile of the runs over 30 ms)."""
    per_iteration = RUN_S_PER_ITERATION * rows ** ITERATION_ROWS_EXPONENT
    return (RUN_SETUP_S + RUN_S_PER_NONZERO * nonzeros + max(iterations, 0) * per_iteration
            + RUN_S_PER_NODE * max(nodes, 0))


def checked_s(rows: int, nonzeros: int, checks: int) -> float:
    """A MIP run's work after `checks` limit checks, as its cap counts it: RUN_SETUP_S + RUN_S_PER_NONZERO nnz +
    checks CHECK_S rows^CHECK_ROWS_EXPONENT. Within a factor 0.3-1.8 of a run's wall time (as `run_s`)."""
    return RUN_SETUP_S + RUN_S_PER_NONZERO * nonzeros + checks * CHECK_S * rows ** CHECK_ROWS_EXPONENT


@dataclass
class WorkClock:
    """Work charged so far against a budget of `work_limit_s` (seconds on the reference machine), and the wall clock
    since `wall_start` against `wall_limit_s`, the outer promise that no step passes."""

    work_limit_s: float
    wall_limit_s: float
    spent_s: float = 0.0
    wall_start: float = field(default_factory=time.perf_counter)
    wall_bound: bool = False
    """Whether the wall clock, before the work, ended some step: the steps taken then depend on the machine's speed
    and load."""
    built_work_s: float = 0.0
    built_wall_s: float = 0.0
    """Work charged for the model builds so far (`record_build`), and the wall seconds they took."""

    def charge(self, seconds: float) -> None:
        self.spent_s += seconds

    def absorb(self, other: WorkClock) -> None:
        """Take on what `other` (a sub-solve's clock) charged, its builds, and whether the wall clock ended one of its
        steps."""
        self.spent_s += other.spent_s
        self.wall_bound |= other.wall_bound
        self.built_work_s += other.built_work_s
        self.built_wall_s += other.built_wall_s

    def record_build(self, work_s: float, wall_s: float) -> None:
        """A model's build was charged `work_s` and took `wall_s`."""
        self.built_work_s += work_s
        self.built_wall_s += wall_s

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.wall_start

    def wall_left_s(self, tail_s: float = 0.0) -> float:
        """Wall seconds left before the last `tail_s` seconds of the wall limit."""
        return self.wall_limit_s - tail_s - self.wall_s

    def work_left_s(self, tail_s: float = 0.0) -> float:
        """Work seconds left before the last `tail_s` seconds of the work budget."""
        return self.work_limit_s - tail_s - self.spent_s

    def step_wall_s(self, work_s: float, tail_s: float = 0.0) -> float:
        """Wall seconds a step given `work_s` of work may run: STEP_SLACK work_s, within what is left before
        `tail_s`."""
        return min(STEP_SLACK * work_s, self.wall_left_s(tail_s))

    def pace(self) -> float:
        """Wall seconds per second of work charged so far, at least 1: how much slower than the reference machine this
        solve runs (a slower machine, or load)."""
        return max(1.0, self.wall_s / self.spent_s) if self.spent_s > 0 else 1.0

    def build_pace(self) -> float:
        """Wall seconds per second of work charged over the builds so far (`record_build`), at least 1."""
        return max(1.0, self.built_wall_s / self.built_work_s) if self.built_work_s > 0 else 1.0

    def wall_allows(self, work_s: float, share: float, tail_s: float = 0.0) -> bool:
        """Whether a model's build charged `work_s` (it cannot be interrupted) takes, at the larger of this solve's
        `pace` and its builds' (`build_pace`), at most `share` of the wall seconds left before `tail_s`; a step
        refused here is one the wall clock decided (`wall_bound`), and the search goes on with smaller ones. Charged
        at the reference's pace alone, the builds of generated medium seeds 2 and 81 fit the work left and ran
        2.4-2.8 s past a 5 s limit on a machine 2.5 times slower; ending the search at a refused build instead left a
        third of the limit unused (seed 2's plan 77.4 s against 37.3 s when the search goes on, session 51). Builds
        can run slower than the rest (session 53: the 131k-GPU Llama 3 405B's seed built a 32-stage model in 0.38 s
        charged 0.05 s, at a pace of 1.8 elsewhere), so their own pace counts once one is measured."""
        if work_s * max(self.pace(), self.build_pace()) <= share * self.wall_left_s(tail_s):
            return True
        self.wall_bound = True
        return False

    def left_s(self, tail_s: float = 0.0) -> float:
        """Seconds left before the last `tail_s` seconds of the limit: the least of the work's and the wall's
        (`wall_bound` records when the wall's ran out first)."""
        work, wall = self.work_left_s(tail_s), self.wall_left_s(tail_s)
        if wall <= 0 < work:
            self.wall_bound = True
        return min(work, wall)
