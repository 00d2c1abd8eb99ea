"""MoE layers beyond the average share: each stage priced at the MoE layers it holds, or the most it can hold.

The cost tables price the average layer (a share s MoE); a stage whose n layers hold e MoE layers costs, in every
per-layer term, its average price plus x (e - s n), x what an MoE layer adds over a dense one to that term
(`ShapeContext.moe_excess`: compute, EP, DP sync, gathers, optimizer step, memory, DP traffic). With one chunk per
rank and MoE layers every k-th from layer k - 1 (`MoEPattern.periodic`), the first N layers hold floor(N / k) of
them, so each stage's count is exact (moe_before[j]: the MoE layers before stage j; N_j = sum_{i<j} n[i]):
    k moe_before[j] <= N_j <= k moe_before[j] + k - 1                 (moe_before_rows; moe_before[0] = 0,
    moe_layers[j] >= moe_before[j+1] - moe_before[j] - L (1 - U_1)     moe_before[p] = the model's MoE layers)
Otherwise a stage is priced at the most a stage of its size can hold wherever it sits (`MoEPattern`: at most
ceil(w / k) in w consecutive layers; a rank of c chunks holds c runs of q[j,c] = n[j] / c):
    moe_layers[j] >= n[j] / k                                          (integer, so ceil; any option unless periodic)
    moe_layers[j] >= c moe_chunk[j,c] - L (1 - U_c),   k moe_chunk[j,c] >= q[j,c]    (c > 1 chunks)
(U_c, q[j,c]: `choices`' layer granularity, U_c the options with c chunks per rank; rows moe_layers_rows), and
    moe_excess[j] >= moe_layers[j] - s n[j],   moe_excess[j] >= 0      (moe_excess_rows)
Every x is at least 0 and moe_excess never below 0, so no stage is priced below its average price and every bound on
the average layer (`milp.bounds`) stays a bound. Left at the average: the GB a split stage's DP owners share across
buildings (`traffic`'s n x cells products). A fixed layout's own counts replace these rows (`price`).
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.disjunction import add_rows


def add_layer_kinds(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    """moe_layers, moe_before, moe_chunk, moe_excess and their rows (module docstring), for a model with both kinds
    of layer."""
    pattern = ctx.moe_pattern
    if pattern is None:
        return
    model, p = ctx.instance.model_spec, ctx.shape.pp
    layers, k, s = model.layers, pattern.interval, pattern.share

    def chosen(c: int):
        return sum(m.u[o] for o, option in enumerate(ctx.options) if option.layer_granularity == c)

    m.moe_layers = pyo.Var(m.J, domain=pyo.NonNegativeIntegers, bounds=(0, layers))
    m.moe_chunk = pyo.Var(m.J, m.G, domain=pyo.NonNegativeIntegers, bounds=(0, layers))
    m.moe_excess = pyo.Var(m.J, domain=pyo.NonNegativeReals)
    rows = [row for j in m.J for c in m.G for row in (
        m.moe_layers[j] >= c * m.moe_chunk[j, c] - layers * (1 - chosen(c)), k * m.moe_chunk[j, c] >= m.q[j, c])]
    single = [o for o, option in enumerate(ctx.options) if option.layer_granularity == 1]
    if pattern.periodic and single:
        m.moe_before = pyo.Var(range(p + 1), domain=pyo.NonNegativeIntegers, bounds=(0, layers))
        m.moe_before[0].fix(0)
        m.moe_before[p].fix(len(model.moe_layer_indices()))
        before = {j: sum(m.n[i] for i in range(j)) for j in range(1, p)}
        add_rows(m, "moe_before_rows", [row for j in range(1, p) for row in (
            k * m.moe_before[j] <= before[j], before[j] <= k * m.moe_before[j] + k - 1)])
        off = layers * (1 - sum(m.u[o] for o in single)) if len(single) < len(ctx.options) else 0
        rows += [m.moe_layers[j] >= m.moe_before[j + 1] - m.moe_before[j] - off for j in m.J]
    else:
        rows += [k * m.moe_layers[j] >= m.n[j] for j in m.J]
    add_rows(m, "moe_layers_rows", rows)
    m.moe_excess_rows = pyo.Constraint(m.J, rule=lambda m, j: m.moe_excess[j] >= m.moe_layers[j] - s * m.n[j])


def excess_terms(m: pyo.ConcreteModel, j: int, coeffs: list[float]) -> list[tuple[list[float], object]]:
    """The `choice_lower_bounds` term (coeffs, moe_excess[j]) when the model has one and a coefficient is not 0."""
    return [(coeffs, m.moe_excess[j])] if hasattr(m, "moe_excess") and any(coeffs) else []


def excess_s(m: pyo.ConcreteModel, j: int, per_layer: float):
    """per_layer x moe_excess[j] (0 for a model with one kind of layer)."""
    return per_layer * m.moe_excess[j] if hasattr(m, "moe_excess") and per_layer else 0.0
