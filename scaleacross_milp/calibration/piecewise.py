"""Piecewise-linear breakpoints of a time curve for a MILP (no Pyomo here: the MILP, its bounds and the verifier
can all use it). x is bytes for a collective curve, a layer count for a stage's DP synchronisation.

breakpoints(f, lo, hi, knots): start from lo, hi and the curve's own kinks inside (the measured sizes), then
split any segment [a, b] whose chord misses f at the geometric midpoint sqrt(a b) by more than rel_tol * f
(relative), until every chord is within rel_tol or max_points is reached. With `integer`, x is an integer
variable: lo, hi and the knots are integers and a segment is split at the integer nearest sqrt(a b) strictly
inside it (segments of length 1 are never split), so the interpolant is exact at every breakpoint.
Convex on the breakpoints iff the segment slopes never decrease: (y[i+1]-y[i])/(x[i+1]-x[i]) is non-decreasing
(up to slope_tol relative). Convex: t >= a_i + b_i x for every segment is an exact LP epigraph (`segments`);
otherwise the MILP needs an incremental (binary) formulation. HiGHS has no SOS constraints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scaleacross_milp.calibration.collective import Collective, CollectiveModel, Tier

SLOPE_TOL = 1e-9


@dataclass(frozen=True)
class Breakpoints:
    """x strictly increasing, y (seconds) = f(x), and whether the interpolant is convex."""

    x: tuple[float, ...]
    y: tuple[float, ...]
    convex: bool

    def slopes(self) -> list[float]:
        """Seconds per unit of x of each segment."""
        return slopes(self.x, self.y)

    def segments(self) -> list[tuple[float, float]]:
        """(slope, intercept s) of each segment: y = intercept + slope * x on it."""
        return [(b, y - b * x) for b, x, y in zip(self.slopes(), self.x, self.y, strict=False)]

    def value_at(self, x: float) -> float:
        """The piecewise-linear interpolant (clamped to the end segments)."""
        i = max(0, min(len(self.x) - 2, sum(xi <= x for xi in self.x) - 1))
        slope = (self.y[i + 1] - self.y[i]) / (self.x[i + 1] - self.x[i])
        return self.y[i] + slope * (x - self.x[i])


def slopes(x: Sequence[float], y: Sequence[float]) -> list[float]:
    return [(y[i + 1] - y[i]) / (x[i + 1] - x[i]) for i in range(len(x) - 1)]


def is_convex(x: Sequence[float], y: Sequence[float], slope_tol: float = SLOPE_TOL) -> bool:
    """Segment slopes non-decreasing, each allowed to fall by slope_tol of its predecessor's magnitude."""
    s = slopes(x, y)
    return all(b >= a - slope_tol * abs(a) for a, b in zip(s, s[1:], strict=False))


def _split_point(a: float, b: float, integer: bool) -> float | None:
    """Where [a, b] is split: sqrt(a b), or with `integer` the nearest integer strictly inside (None if none)."""
    mid = math.sqrt(a * b)
    if not integer:
        return mid
    return min(max(round(mid), a + 1), b - 1) if b - a >= 2 else None


def breakpoints(f: Callable[[float], float], lo: float, hi: float, knots: Sequence[float] = (),
                rel_tol: float = 0.01, max_points: int = 64, slope_tol: float = SLOPE_TOL,
                integer: bool = False) -> Breakpoints:
    """Breakpoints of f on [lo, hi] (0 < lo < hi) per the module docstring."""
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got {lo:g}, {hi:g}")
    xs = sorted({lo, hi, *(k for k in knots if lo < k < hi)})
    ys = [f(x) for x in xs]
    i = 0
    while i < len(xs) - 1 and len(xs) < max_points:
        a, b = xs[i], xs[i + 1]
        mid = _split_point(a, b, integer)
        if mid is not None:
            value = f(mid)
            chord = ys[i] + (ys[i + 1] - ys[i]) * (mid - a) / (b - a)
            if abs(chord - value) > rel_tol * abs(value):
                xs.insert(i + 1, mid)
                ys.insert(i + 1, value)
                continue
        i += 1
    return Breakpoints(tuple(xs), tuple(ys), is_convex(xs, ys, slope_tol))


def collective_breakpoints(model: CollectiveModel, collective: Collective, tier: Tier, ranks: int,
                           lo_bytes: float, hi_bytes: float, ranks_per_node: int | None = None,
                           rel_tol: float = 0.01, max_points: int = 64) -> Breakpoints:
    """Breakpoints of model.time_s(collective, tier, ranks, .) on [lo_bytes, hi_bytes]; a model with measured
    sizes (ProfileCollectiveModel.measured_bytes) contributes them as knots, so the table's kinks are kept."""
    measured = getattr(model, "measured_bytes", None)
    knots = measured(collective, tier, ranks, ranks_per_node) if measured else ()
    return breakpoints(lambda s: model.time_s(collective, tier, ranks, s, ranks_per_node), lo_bytes, hi_bytes,
                       knots, rel_tol, max_points)
