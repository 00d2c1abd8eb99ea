"""Piecewise-linear lower bounds lhs >= f_c(x) for curves c given by breakpoints (HiGHS has no SOS constraints).

A curve applies when every condition b in [0, 1] it carries is 1, and may carry a term e_c >= 0 added to it (linear
in other variables, at most E_c); M_c = max_i f_c(x_i) + E_c (lhs >= 0, and the interpolant never exceeds its
largest breakpoint value on [x_0, x_S], the range x must stay in) relaxes it:
    R_c = M_c sum_b (1 - b),   and every row below reads f_c(x) + e_c for f_c(x)
Each curve's formulation is chosen from its breakpoints (`formulation`):
    affine (one segment)     lhs + R_c >= a + s x
    convex (slopes rise)     lhs + R_c >= a_i + s_i x           for every segment i (LP epigraph: the max of the
                                                                segment lines is the interpolant)
    otherwise                incremental, on the union grid u_0 < ... < u_S of the breakpoints of every such curve
                             of the same x (one system per x, shared by its curves):
                                 x = u_0 + sum_i delta_i (u_{i+1} - u_i),   0 <= delta_i <= 1,
                                 delta_{i+1} <= z_i <= delta_i,   z_i binary  (segments fill in order)
                                 lhs + R_c >= f_c(u_0) + sum_i delta_i (f_c(u_{i+1}) - f_c(u_i))
                             (f_c(u_i) is c's interpolant at u_i: exact, since c's breakpoints are among them)
Choice-free floor (only when every curve has conditions, so that one of them applies whatever is chosen):
    lhs >= h(x), h = the lower convex envelope of min_c f_c on the union U of all breakpoints (epigraph rows);
h <= f_c at every point of U and between them, since h is convex and f_c linear there. It keeps the LP
relaxation's bound informative; a curve equal to h on U is enforced by it alone and gets no rows of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pyomo.environ as pyo

from scaleacross_milp.calibration.piecewise import Breakpoints
from scaleacross_milp.milp.formulation.disjunction import add_rows

Formulation = Literal["affine", "epigraph", "incremental"]
SAME_REL = 1e-9


@dataclass(frozen=True)
class Curve:
    """lhs >= the interpolant of `points` at x, when every expression in `conditions` is 1 (each lies in [0, 1]:
    a binary, a sum of one-hot binaries, or a variable that such binaries force to 1)."""

    points: Breakpoints
    conditions: tuple = ()
    extra: object = 0.0
    """e_c: an expression >= 0 added to the curve's value."""
    extra_most: float = 0.0
    """E_c: the most `extra` reaches at a point the relaxed row must admit."""

    def at(self, grid: Sequence[float]) -> list[float]:
        return [self.points.value_at(u) for u in grid]

    def relaxation(self):
        """R_c = M_c sum_b (1 - b), less e_c (the rows read lhs + R_c >= f_c(x) + e_c)."""
        return (max(self.points.y) + self.extra_most) * sum(1 - b for b in self.conditions) - self.extra


def formulation(points: Breakpoints) -> Formulation:
    """affine for one segment, epigraph for a convex interpolant, incremental (binaries) otherwise."""
    if len(points.x) == 2:
        return "affine"
    return "epigraph" if points.convex else "incremental"


def lower_convex_envelope(x: Sequence[float], y: Sequence[float]) -> Breakpoints:
    """The largest convex function below the points (x strictly increasing): Andrew's monotone chain."""
    hull: list[tuple[float, float]] = []
    for point in zip(x, y, strict=True):
        while len(hull) >= 2 and _on_or_above_chord(hull[-2], hull[-1], point):
            hull.pop()
        hull.append(point)
    xs, ys = zip(*hull, strict=True)
    return Breakpoints(tuple(xs), tuple(ys), True)


def _on_or_above_chord(a: tuple[float, float], b: tuple[float, float], c: tuple[float, float]) -> bool:
    """b lies on or above the chord a-c (so it is not a vertex of the lower hull)."""
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]) <= 0


def _epigraph_rows(lhs, x, points: Breakpoints) -> list:
    return [lhs >= intercept + slope * x for slope, intercept in points.segments()]


def _same(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(abs(p - q) <= SAME_REL * max(abs(p), abs(q), 1e-30) for p, q in zip(a, b, strict=True))


def add_piecewise_lower_bounds(m: pyo.ConcreteModel, name: str, x, lhs, curves: Sequence[Curve]) -> None:
    """Constraints (module docstring) making `lhs` >= every applicable curve at `x`, a variable whose bounds lie
    within every curve's breakpoint range. Adds `{name}_rows` and, when a curve needs it, the incremental
    system `{name}_delta`, `{name}_z`, `{name}_fill`, `{name}_x`."""
    grid = sorted({u for c in curves for u in c.points.x})
    rows: list = []
    if all(c.conditions for c in curves):
        lowest = [min(values) for values in zip(*(c.at(grid) for c in curves), strict=True)]
        floor = lower_convex_envelope(grid, lowest)
        rows += _epigraph_rows(lhs, x, floor)
        curves = [c for c in curves if not (_same(c.at(grid), [floor.value_at(u) for u in grid]) and c.extra_most == 0)]
    incremental = [c for c in curves if formulation(c.points) == "incremental"]
    for c in curves:
        if formulation(c.points) != "incremental":
            rows += _epigraph_rows(lhs + c.relaxation(), x, c.points)
    if incremental:
        rows += _incremental_rows(m, name, x, lhs, incremental)
    add_rows(m, f"{name}_rows", rows)


def _incremental_rows(m: pyo.ConcreteModel, name: str, x, lhs, curves: Sequence[Curve]) -> list:
    """The shared (delta, z) system on the union grid of `curves`, and one row per curve."""
    grid = sorted({u for c in curves for u in c.points.x})
    segments = range(len(grid) - 1)
    delta = pyo.Var(segments, bounds=(0.0, 1.0))
    z = pyo.Var(range(len(grid) - 2), domain=pyo.Binary)
    setattr(m, f"{name}_delta", delta)
    setattr(m, f"{name}_z", z)
    fill = [row for i in z for row in (delta[i + 1] <= z[i], z[i] <= delta[i])]
    add_rows(m, f"{name}_fill", fill)
    setattr(m, f"{name}_x", pyo.Constraint(expr=x == grid[0] + sum(delta[i] * (grid[i + 1] - grid[i])
                                                                     for i in segments)))
    rows = []
    for c in curves:
        values = c.at(grid)
        value = values[0] + sum(delta[i] * (values[i + 1] - values[i]) for i in segments)
        rows.append(lhs + c.relaxation() >= value)
    return rows

