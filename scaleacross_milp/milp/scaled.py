"""Layouts that scale a plan out over the fastest buildings, priced with every decision of the plan kept.

From a plan of shape (TP, CP, EP, micro-batch, PP, DP) with schedule option o, DP variant v and layers n[j]:
    DP-out   a shape with the same degrees and more pipelines, each building holding whole pipelines, fastest
             buildings first (`patterns.dp_out_cells`), the same layers per stage
    PP-out   a shape with the same DP and deeper pipelines, or the same PP and more pipelines, whole stages
             filling the fastest buildings in contiguous blocks (`patterns.pp_out_cells`), layers left to the MILP
             after a solve at the split by speed (`ShapeSearch.solve_cells`: the split alone ignores memory and the
             end stages' fixed work, generated seed 6's PP-out split by speed did not beat a 28.4 s incumbent, the
             MILP's split of the same cells priced 26.1 s; the MILP's node budget alone may not reach it). More
             pipelines in blocks is what a plan needs where the fast buildings hold stages but not whole pipelines:
             generated medium seed 99's TP2 EP4 PP32 DP4 on 384 B200s scales to DP 8 with 24 stages there and 8 in
             a 160-B200 hall (1.88 s against 2.75 s), where DP-out's second pipeline lands on H100s
Each is a layout of its shape; with its cells (and DP-out's layers), o and v fixed (each left to the MILP when the
scaled shape does not offer it), its MILP over the buildings it uses is small (flows and transports left, and PP-out's
layers), so the search prices it quickly and, when better, holds it as the incumbent: the plan a hill-climb from a
small layout reaches without HiGHS having to find it among every placement.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pyomo.environ as pyo

from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.patterns import Cells, dp_out_cells, holders, pp_out_cells

SCALED_PER_KIND = 2
"""Shapes tried per kind (DP-out, PP-out) from one plan: the first in `solve.climbing_order` (least bound, then the
nearest) whose model is kept or fits the time left (`ShapeSearch.scale_out`)."""


@dataclass(frozen=True)
class Scaled:
    """A layout of a scaled shape: its stage cells and layers per stage."""

    cells: Cells
    layers: list[int] | None
    """None: left to the MILP."""


def dp_out(ctx: ShapeContext, layers: list[int]) -> Scaled | None:
    """ctx's shape DP-out with the plan's `layers` (None when the buildings cannot hold its pipelines)."""
    cells = dp_out_cells(ctx)
    return None if cells is None else Scaled(cells, layers)


def pp_out(ctx: ShapeContext) -> Scaled | None:
    """ctx's shape PP-out over two buildings or more (None when it does not exist)."""
    cells = pp_out_cells(ctx)
    return None if cells is None or len(holders(cells)) < 2 else Scaled(cells, None)


@contextmanager
def fixed_decisions(m: pyo.ConcreteModel, option: int | None, variant: int | None,
                    layers: list[int] | None) -> Iterator[None]:
    """Fix the schedule option, DP variant and layers per stage (each unless None) inside the block; freed on
    exit."""
    fixed = []
    if option is not None:
        fixed += m.u.values()
        for o in m.O:
            m.u[o].fix(1 if o == option else 0)
    if variant is not None:
        fixed += m.w.values()
        for v in m.V:
            m.w[v].fix(1 if v == variant else 0)
    if layers is not None:
        fixed += m.n.values()
        for j in m.J:
            m.n[j].fix(layers[j])
    try:
        yield
    finally:
        for var in fixed:
            var.unfix()
