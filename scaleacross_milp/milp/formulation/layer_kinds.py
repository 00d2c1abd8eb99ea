"""MoE layers beyond the average share: each stage priced at the most MoE layers a stage of its size can hold, and
at the most dense layers where a dense layer costs more.

The cost tables price the average layer (a share s MoE); a stage whose n layers hold e MoE layers costs, in every
per-layer term, its average price plus x (e - s n), x what an MoE layer adds over a dense one to that term
(`ShapeContext.kind_excess`: compute, EP, DP sync, gathers, optimizer step, memory, DP traffic). The model does not
place layers by index, so e is the most a stage of its size can hold wherever it sits (`costmodel.layer_kinds.
MoEPattern`: at most ceil(w / k) in w consecutive layers); a rank of c chunks holds c runs of n / c layers, so at
most c ceil(n / g), g = c k:
    moe_layers[j] >= c ceil(n[j] / g) - L (1 - U_c)                    (moe_layers_rows; U_c the options with c
                                                                        chunks per rank, 1 for c = 1)
but for stage 0 under one chunk per rank, which holds the first n[0] layers: where the MoE layers are every k-th from
layer a on (`MoEPattern.first`), max(0, ceil((n[0] - a) / k)) of them (moe_first integer, k moe_first >= n[0] - a,
moe_layers[0] >= moe_first; valid under every option, the chunked rows adding theirs);
    moe_excess[j] >= moe_layers[j] - s n[j],   moe_excess[j] >= 0      (moe_excess_rows)
Where a dense layer costs more (y, what it adds over an MoE one: an HSDP gather of Llama 4 Maverick's dense layer,
since an MoE layer shards its experts over EP), the stage is priced at the fewest MoE layers it can hold. Every k-th
layer from a on, a run of w layers starting at layer i holds at least floor(w / k) - ceil(max(0, a - i) / k) of
them, and rank j's runs start at layer j or later:
    moe_fewest[j] <= c moe_floor[j,c] - ceil(max(0, a - j) / k) + L (1 - U_c),   g moe_floor[j,c] <= n[j]
                                                                       (moe_fewest_rows; moe_floor integer)
(any other pattern may leave a run without one: moe_fewest[j] <= 0), and its dense layers beyond their share:
    dense_excess[j] >= s n[j] - moe_fewest[j],   dense_excess[j] >= 0  (dense_excess_rows)
A fixed layout's own counts replace both (`price.fixed_layout_model`). With the most MoE layers on the dense side
too, a stage of one dense layer was priced as an MoE one: generated medium seed 25's ZB-H1 plan under HSDP (stages
10-13 one layer each, the dense ones gathering 30.2 ms per pass against the average's 24.5 ms) was chosen by the
search at 1.526 s, priced 1.832 s at its own counts and replayed at 1.767 s. Every row elsewhere written with
x moe_excess[j] reads y dense_excess[j] beside it (`excess_s`, `excess_terms`; one of x and y is 0,
`ShapeContext.kind_excess`).
ceil(n / g) is linear in the bits of n - 1 (`traffic`'s nbit) when g is a power of 2, (n - 1 - sum_{2^b < g} 2^b
nbit[j,b]) / g + 1; otherwise an integer moe_window[j,c] >= n[j] / g stands for it. (An integer count per stage,
whose LP relaxation sits at n / k, cost the 5 s searches their incumbents: generated medium seed 22's PP 8 shape
found none within its 200 nodes.) Every x and y is at least 0 and neither excess below 0, so no stage is priced below
its average price and every bound on the average layer (`milp.bounds`) stays a bound. Left at the average: the GB a
split stage's DP owners share across buildings (`traffic`'s n x cells products). Counting each stage's MoE layers
exactly from the layers before it (floor(N / k) of the first N for Llama 4's placement) was tried and dropped: its
integer rows cost the 5 s searches more than the exact counts gained (generated medium seeds 0, 19, 25 and 35
replayed 2.749, 1.297, 1.656 and 2.260 s against 1.819, 1.183, 1.325 and 2.185 s with the most).
"""

from __future__ import annotations

import math

import pyomo.environ as pyo

from scaleacross_milp.milp.context import KindExcess, ShapeContext
from scaleacross_milp.milp.formulation.disjunction import add_rows


def declare_layer_kinds(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    """Vars moe_layers, moe_fewest, moe_excess, dense_excess (module docstring) for a model with both kinds of layer,
    before the rows that read them; their own rows come once the bits of n exist (`add_layer_kinds`)."""
    if ctx.moe_pattern is not None:
        m.moe_layers = pyo.Var(m.J, domain=pyo.NonNegativeReals)
        m.moe_fewest = pyo.Var(m.J, bounds=(-ctx.instance.model_spec.layers, None))
        m.moe_excess = pyo.Var(m.J, domain=pyo.NonNegativeReals)
        m.dense_excess = pyo.Var(m.J, domain=pyo.NonNegativeReals)


def add_layer_kinds(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    """moe_window, moe_first, moe_floor and the rows moe_layers_rows, moe_fewest_rows, moe_excess_rows,
    dense_excess_rows (module docstring)."""
    pattern = ctx.moe_pattern
    if pattern is None:
        return
    layers, k, s = ctx.instance.model_spec.layers, pattern.interval, pattern.share
    chunks = sorted({option.layer_granularity for option in ctx.options} | {1})
    windows = [(j, c) for j in m.J for c in chunks if (c * k) & (c * k - 1)]
    m.moe_window = pyo.Var(windows, domain=pyo.NonNegativeIntegers, bounds=(0, layers))

    def most(j: int, c: int):
        """c ceil(n[j] / (c k)) at integer points."""
        g = c * k
        if (j, c) in windows:
            return c * m.moe_window[j, c]
        return c * ((m.n[j] - 1 - sum(2**b * m.nbit[j, b] for b in m.NB if 2**b < g)) / g + 1)

    def off(c: int):
        return 0 if c == 1 else layers * (1 - sum(m.u[o] for o, option in enumerate(ctx.options)
                                                 if option.layer_granularity == c))

    first = pattern.first
    rows = [m.moe_layers[j] >= most(j, c) - off(c) for j in m.J for c in chunks if (j, c) != (0, 1) or first is None]
    if first is not None:  # stage 0 holds the first n[0] layers under one chunk per rank, fewer under more
        m.moe_first = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, layers))
        rows += [m.moe_layers[0] >= m.moe_first, k * m.moe_first >= m.n[0] - first]
    add_rows(m, "moe_layers_rows", [*rows, *(c * k * m.moe_window[j, c] >= m.n[j] for j, c in windows)])
    if first is None:
        add_rows(m, "moe_fewest_rows", [m.moe_fewest[j] <= 0 for j in m.J])
    else:
        m.moe_floor = pyo.Var(m.J, chunks, domain=pyo.NonNegativeIntegers, bounds=(0, layers))
        add_rows(m, "moe_fewest_rows", [
            *(m.moe_fewest[j] <= c * m.moe_floor[j, c] - math.ceil(max(0, first - j) / k) + off(c)
              for j in m.J for c in chunks),
            *(c * k * m.moe_floor[j, c] <= m.n[j] for j in m.J for c in chunks)])
    m.moe_excess_rows = pyo.Constraint(m.J, rule=lambda m, j: m.moe_excess[j] >= m.moe_layers[j] - s * m.n[j])
    m.dense_excess_rows = pyo.Constraint(m.J, rule=lambda m, j: m.dense_excess[j] >= s * m.n[j] - m.moe_fewest[j])


def excess_terms(m: pyo.ConcreteModel, j: int, coeffs: list[KindExcess]) -> list[tuple[list[float], object]]:
    """The `choice_lower_bounds` terms ([x...], moe_excess[j]) and ([y...], dense_excess[j]) of per-option
    `coeffs`, each where the model has it and a coefficient is not 0."""
    if not hasattr(m, "moe_excess"):
        return []
    moe, dense = [c.moe for c in coeffs], [c.dense for c in coeffs]
    return [(moe, m.moe_excess[j])] * any(moe) + [(dense, m.dense_excess[j])] * any(dense)


def excess_s(m: pyo.ConcreteModel, j: int, per_layer: KindExcess):
    """x moe_excess[j] + y dense_excess[j] of `per_layer` (0 for a model with one kind of layer)."""
    if not hasattr(m, "moe_excess") or not per_layer:
        return 0.0
    return ((per_layer.moe * m.moe_excess[j] if per_layer.moe else 0.0)
            + (per_layer.dense * m.dense_excess[j] if per_layer.dense else 0.0))
