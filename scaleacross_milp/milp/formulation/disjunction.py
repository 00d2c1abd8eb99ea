"""Lower bounds that depend on a one-hot choice, written so the LP relaxation stays informative.

For lhs >= sum_i c[o,i] E_i + d[o] with E_i >= 0, chosen option o (binary u[o], sum_o u[o] = 1):
    lhs >= sum_i min_o c[o,i] E_i + min_o d[o]                    holds whatever is chosen (no big-M)
    lhs >= sum_i c[o,i] E_i + d[o] - M (1 - sum_{o' ~ o} u[o'])  only for options above that floor
(o' ~ o: the options with o's coefficients, one row for all of them, which also holds the relaxation tighter than a
row each: sum_{o'} u[o'] >= u[o]). The first row is what keeps the relaxation's bound away from zero when u is
fractional.
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
    alike: dict[tuple[float, ...], list[int]] = {}
    for n in range(len(options)):
        alike.setdefault((*(coeffs[n] for coeffs, _ in terms), constant[n]), []).append(n)
    for (*coefficients, offset), members in alike.items():
        above = any(c > floor for c, floor in zip(coefficients, floor_coeffs, strict=True))
        if above or offset > floor_const:
            rhs = sum(c * e for c, (_, e) in zip(coefficients, terms, strict=True)) + offset
            rows.append(lhs >= rhs - big_m * (1 - sum(choice[options[n]] for n in members)))
    return rows


def add_rows(m: pyo.ConcreteModel, name: str, rows: list) -> None:
    """Attach a flat list of constraint expressions to the model as one indexed constraint."""
    constraint = pyo.ConstraintList()
    setattr(m, name, constraint)
    for row in rows:
        constraint.add(row)
