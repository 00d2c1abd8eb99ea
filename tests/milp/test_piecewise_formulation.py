"""Piecewise-linear terms: the formulation chosen per curve, and what HiGHS makes of each at fixed x."""

from __future__ import annotations

import math

import pyomo.environ as pyo
import pytest

from scaleacross_milp.calibration.piecewise import Breakpoints, breakpoints
from scaleacross_milp.milp.formulation.piecewise import (
    Curve,
    add_piecewise_lower_bounds,
    formulation,
    lower_convex_envelope,
)
from scaleacross_milp.milp.highs import HighsModel, solve_milp

CURVES = {"affine": lambda n: 2.0 + 3.0 * n, "convex": lambda n: 1.0 + 0.05 * n * n, "concave": math.sqrt}
AFFINE = breakpoints(CURVES["affine"], 1, 20, integer=True)
CONVEX = breakpoints(CURVES["convex"], 1, 20, integer=True)
CONCAVE = breakpoints(CURVES["concave"], 1, 20, integer=True, rel_tol=0.001)


def _minimum(curves: list[Curve], x: int, relax_binaries: bool = False, extra: float = 0.0, **fixed: int) -> float:
    """min lhs s.t. the curves' rows, with x fixed (and the named condition binaries fixed); a curve whose
    extra_most is set adds `extra` (a fixed variable) to its value."""
    m = pyo.ConcreteModel(name="pwl")
    m.x = pyo.Var(domain=pyo.Integers, bounds=(1, 20))
    m.x.fix(x)
    m.lhs = pyo.Var(domain=pyo.NonNegativeReals)
    m.e = pyo.Var(domain=pyo.NonNegativeReals)
    m.e.fix(extra)
    m.b = pyo.Var(["a", "b"], domain=pyo.Binary)
    m.one = pyo.Constraint(expr=m.b["a"] + m.b["b"] == 1)
    for name, value in fixed.items():
        m.b[name].fix(value)
    conditioned = [Curve(c.points, tuple(m.b[b] for b in c.conditions), m.e if c.extra_most else 0.0, c.extra_most)
                   for c in curves]
    add_piecewise_lower_bounds(m, "t", m.x, m.lhs, conditioned)
    if relax_binaries:
        for var in m.t_z.values():
            var.domain = pyo.UnitInterval
    m.objective = pyo.Objective(expr=m.lhs)
    outcome = solve_milp(HighsModel(m), time_limit_s=10, rel_gap=0.0, threads=1)
    assert outcome.status == "optimal"
    return pyo.value(m.lhs)


def test_the_formulation_follows_the_curve():
    assert (len(AFFINE.x), formulation(AFFINE)) == (2, "affine")
    assert CONVEX.convex and formulation(CONVEX) == "epigraph"
    assert not CONCAVE.convex and formulation(CONCAVE) == "incremental"
    assert all(float(x).is_integer() for x in (*CONVEX.x, *CONCAVE.x))  # integer variables: integer breakpoints


@pytest.mark.parametrize("name, points", [("affine", AFFINE), ("convex", CONVEX), ("concave", CONCAVE)])
def test_highs_returns_the_interpolant(name, points):
    for x in (1, 2, 5, 7, 13, 20):
        assert _minimum([Curve(points)], x) == pytest.approx(points.value_at(x), rel=1e-7)
    for x in points.x:  # exact at the breakpoints
        assert _minimum([Curve(points)], int(x)) == pytest.approx(CURVES[name](x), rel=1e-7)


def test_a_concave_curve_needs_its_binaries():
    inside = next(x for x in range(2, 20) if x not in CONCAVE.x)
    exact = CONCAVE.value_at(inside)
    assert _minimum([Curve(CONCAVE)], inside) == pytest.approx(exact, rel=1e-7)
    relaxed = _minimum([Curve(CONCAVE)], inside, relax_binaries=True)
    assert relaxed < exact * (1 - 1e-3)  # the LP relaxation falls to a chord below the curve
    epigraph = max(a + s * inside for s, a in CONCAVE.segments())
    assert epigraph > exact * (1 + 1e-3)  # and an epigraph would overcharge: both differ from the curve


def test_conditions_and_the_choice_free_floor():
    curves = [Curve(CONCAVE, ("a",)), Curve(AFFINE, ("b",))]
    for x in (3, 8, 20):
        assert _minimum(curves, x, a=1) == pytest.approx(CONCAVE.value_at(x), rel=1e-7)
        assert _minimum(curves, x, b=1) == pytest.approx(AFFINE.value_at(x), rel=1e-7)
        # the LP relaxation of the choice still sees the convex envelope of the cheaper curve
        grid = sorted({*CONCAVE.x, *AFFINE.x})
        floor = lower_convex_envelope(grid, [min(CONCAVE.value_at(u), AFFINE.value_at(u)) for u in grid])
        assert floor.value_at(x) <= min(CONCAVE.value_at(x), AFFINE.value_at(x)) + 1e-12
        assert _minimum(curves, x) == pytest.approx(min(CONCAVE.value_at(x), AFFINE.value_at(x)), rel=1e-7)


def test_lower_convex_envelope_drops_points_above_the_chords():
    hull = lower_convex_envelope([0, 1, 2, 3, 4], [0, 2, 1, 3, 4])
    assert hull == Breakpoints((0, 2, 4), (0, 1, 4), True)


def test_a_curve_carries_its_added_term_only_while_it_applies():
    # The DP curve of a stage adds what its MoE layers beyond the average share cost (formulation.layer_kinds).
    curves = [Curve(CONCAVE, ("a",), extra_most=5.0), Curve(CONVEX, ("b",))]
    for x in (3, 8, 20):
        assert _minimum(curves, x, extra=2.5, a=1) == pytest.approx(CONCAVE.value_at(x) + 2.5, rel=1e-7)
        assert _minimum(curves, x, extra=5.0, b=1) == pytest.approx(CONVEX.value_at(x), rel=1e-7)
