"""Critical-path cuts: the pipeline's longest path at an incumbent's own stage and transfer times.

The stream_path rows (`formulation.pipeline`) hold the paths that are longest at equal stage times; at the uneven
stage times a plan really has, the longest path can be another, and the MILP then prices the plan below its replay
(the bundled pp-out-2b's ZB-V plan, p = 16 over stages of 2 to 6 layers and a 400 Gb/s link: Tpipe 4.226 s against a
longest path of 4.569 s, the plan 4.392 s against a 4.733 s replay). At an incumbent, `cut_critical_path` runs the
schedule's graph at its Cst and lat + tx (`costmodel.stream_paths.critical_path`) and, when that path is longer than
Tpipe, adds its row (`formulation.pipeline.critical_path_row`): a path of the graph, so it holds at every point of
the model, and later solves of the model keep it. The incumbent's own layout is priced again with it at once, every
layout decision held (a solve of derived variables only); re-solving the whole model instead made a generated small
instance (seed 26, PP 16 over two halls) lose its proof within 5 s and return a plan 7.8 % slower."""

from __future__ import annotations

import time
from dataclasses import replace

import pyomo.environ as pyo

from scaleacross_milp.costmodel.stream_paths import critical_path
from scaleacross_milp.milp import work
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.build import held_layout
from scaleacross_milp.milp.formulation.pipeline import critical_path_row, crossing_s
from scaleacross_milp.milp.highs import ABS_GAP, HighsModel, MILPOutcome, MILPStatus, solve_milp

CUT_TOLERANCE = 1e-4
"""A path longer than Tpipe by this share is cut (below it, the solve's own tolerances)."""
CUT_ROUNDS = 3
"""Paths cut at most per pricing of one point (`price_with_cuts`)."""


def cut_critical_path(highs: HighsModel, ctx: ShapeContext) -> bool:
    """Add the critical_path row of the point loaded in `highs`'s model when its longest path exceeds Tpipe by more
    than CUT_TOLERANCE; True when a row was added (to the Pyomo model and to HiGHS). Only at a point whose every stage
    sits in one building: every pipeline then runs at Cst and lat + tx, and the path is each one's. With a stage
    split, Cst[j] is its slowest copy's and tx[b] the busiest arc's, which no one pipeline may combine (the repro
    mixtral-3b-hetero-1792's ZB-H1 plan, stages 6 and 7 split over three buildings: cut, priced 1.245 s against a
    1.152 s replay, and the search turned to a plan replayed 5 % slower)."""
    m = highs.model
    if ctx.shape.pp < 2 or any(sum((m.y[j, k].value or 0) > 0.5 for k in m.K) > 1 for j in m.J):
        return False
    o = next(o for o in m.O if (m.u[o].value or 0) > 0.5)
    option = ctx.options[o]
    holders = [next(k for k in m.K if (m.y[j, k].value or 0) > 0.5) for j in m.J]
    transfer = [pyo.value(crossing_s(m, b), exception=False) or 0.0 for b in range(ctx.shape.pp - 1)]
    path = critical_path(option.schedule, ctx.shape.pp, ctx.shape.microbatches, option.chunks, option.merged,
                         [pyo.value(m.Cst[j]) for j in m.J], [ctx.layer_shares(k) for k in holders], transfer)
    if path is None or path.length_s <= pyo.value(m.Tpipe) * (1 + CUT_TOLERANCE):
        return False
    highs.add_row(m.critical_path.add(critical_path_row(m, ctx, o, path, holders)))
    return True


def price_with_cuts(highs: HighsModel, ctx: ShapeContext, *, time_limit_s: float,
                    threads: int | None) -> tuple[MILPOutcome | None, float]:
    """While the longest path at the point loaded in `highs`'s model exceeds Tpipe (`cut_critical_path`), cut it and
    price the point's layout again with every layout decision held (`formulation.build.held_layout`), at most
    CUT_ROUNDS times: a new point's stage and transfer times can make another path the longest. The first round runs
    even when `time_limit_s` is spent (a held solve of one layout takes milliseconds, and `solve_milp` gives it at
    least 0.1 s). Returns the last held solve's outcome (None when no path was cut) and the work of every path found
    and solve run (`work.path_s`, `MILPOutcome.work_s`)."""
    start, held, spent = time.perf_counter(), None, 0.0
    for _ in range(CUT_ROUNDS):
        left = time_limit_s - (time.perf_counter() - start)
        if held is not None and left <= 0:
            break
        spent += work.path_s(ctx)
        if not cut_critical_path(highs, ctx):
            break
        with held_layout(highs.model):
            held = solve_milp(highs, time_limit_s=left, rel_gap=0.0, threads=threads)
        spent += held.work_s
        if held.incumbent is None:
            break
    return held, spent


def solve_with_cuts(highs: HighsModel, ctx: ShapeContext, *, time_limit_s: float, rel_gap: float,
                    threads: int | None, **options) -> MILPOutcome:
    """`highs.solve_milp` within `time_limit_s` in all; when its point's longest path exceeds Tpipe, the point's layout
    is priced again with its paths cut (`price_with_cuts`) in the time left. The outcome keeps the first solve's bound
    (valid with the cuts too), is closed only if the repriced incumbent is still within the gap of it, and counts the
    work of both."""
    start = time.perf_counter()
    outcome = solve_milp(highs, time_limit_s=time_limit_s, rel_gap=rel_gap, threads=threads, **options)
    if outcome.incumbent is None:
        return outcome
    held, spent = price_with_cuts(highs, ctx, time_limit_s=time_limit_s - (time.perf_counter() - start),
                                  threads=threads)
    if held is None:
        return replace(outcome, work_s=outcome.work_s + spent)
    proven = held.incumbent is not None and held.incumbent - outcome.bound <= max(rel_gap * held.incumbent, ABS_GAP)
    status = outcome.status if proven or not outcome.finished else MILPStatus.node_limit
    return replace(outcome, status=status, incumbent=held.incumbent, wall_s=time.perf_counter() - start,
                   work_s=outcome.work_s + spent)
