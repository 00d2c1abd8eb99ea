"""Lower bounds that depend on a one-hot choice, written so the LP relaxation stays informative.

For lhs >= sum_i c[o,i] E_i + d[o] with E_i >= 0, chosen option o (binary u[o], sum_o u[o] = 1):
    lhs >= sum_i min_o c[o,i] E_i + min_o d[o]                    holds whatever is chosen (no big-M)
    lhs >= sum_i c[o,i] E_i + d[o] - M (1 - u[o])                 only for options above that floor
The first row is what keeps the relaxation's bound away from zero when u is fractional.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyomo.environ as pyo


def choice_lower_bounds(
    lhs,
    terms: Sequence[tuple[Sequence[float], object]],
    choice,
    options: Sequence,
    big_m: float,
    constant: Sequence[float] | None = None,
) -> list:
    """Constraint expressions: `terms` pairs per-option coefficients (indexed like `options`) with an expression
    E_i >= 0; `choice[o]` is the binary of option o."""
    constant = constant or [0.0] * len(options)
    floor_coeffs = [min(coeffs) for coeffs, _ in terms]
    floor_const = min(constant)
    rows = [lhs >= sum(c * e for c, (_, e) in zip(floor_coeffs, terms, strict=True)) + floor_const]
    for n, o in enumerate(options):
        above = any(coeffs[n] > c for c, (coeffs, _) in zip(floor_coeffs, terms, strict=True))
        if above or constant[n] > floor_const:
            rhs = sum(coeffs[n] * e for coeffs, e in terms) + constant[n]
            rows.append(lhs >= rhs - big_m * (1 - choice[o]))
    return rows


def add_rows(m: pyo.ConcreteModel, name: str, rows: list) -> None:
    """Attach a flat list of constraint expressions to the model as one indexed constraint."""
    constraint = pyo.ConstraintList()
    setattr(m, name, constraint)
    for row in rows:
        constraint.add(row)
