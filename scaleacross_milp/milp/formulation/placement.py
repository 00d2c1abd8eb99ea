"""Placement: stage cells per building, layers per stage, and pipelines chained across buildings as flows.

Sets: stages j in 0..p-1, buildings k, boundaries b (j -> j+1, plus interleaving's wrap p-1 -> 0).
    x[j,k] in Z+     stage cells of stage j in building k;  sum_k x[j,k] = D (cells per stage)
    y[j,k] in {0,1}  building k holds stage j:              y[j,k] <= x[j,k] <= X_k y[j,k]
    sum_j x[j,k] * cell_gpus <= GPUs_k                      (building capacity)
    n[j] in Z+       layers of stage j:                     sum_j n[j] = L, n[j] >= 1
    f[b,k,k'] in Z+  pipelines (in cells) whose stage from(b) is in k and stage to(b) in k':
                     sum_k' f[b,k,k'] = x[from(b),k],  sum_k f[b,k,k'] = x[to(b),k']   (flow conservation)
    h[b,k,k'] in {0,1} some pipeline crosses k -> k' at b:  f[b,k,k'] <= min(X_k, X_k') h[b,k,k']
Pipelines are interchangeable, so counts replace one binary per replica. The wrap flow pairs last-stage cells
with first-stage cells without tracking which pipeline each belongs to: exact whenever stage 0 or stage p-1
sits in a single building, optimistic for the wrap hop otherwise.
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.milp.context import ShapeContext


def boundaries(ctx: ShapeContext) -> dict[int, tuple[int, int]]:
    """Boundary index -> (from stage, to stage); index p-1 is the wrap p-1 -> 0 when a schedule wraps."""
    p = ctx.shape.pp
    ends = {b: (b, b + 1) for b in range(p - 1)}
    if p > 1 and any(o.wrap_crossings for o in ctx.options):
        ends[p - 1] = (p - 1, 0)
    return ends


def add_placement(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    p, cells, layers = ctx.shape.pp, ctx.shape.cells_per_stage, ctx.instance.model_spec.layers
    ks = ctx.buildings
    cap = {k: ctx.max_cells(k) for k in ks}
    m.J = pyo.Set(initialize=range(p))
    m.K = pyo.Set(initialize=ks)
    m.x = pyo.Var(m.J, m.K, domain=pyo.NonNegativeIntegers, bounds=lambda _, j, k: (0, cap[k]))
    m.y = pyo.Var(m.J, m.K, domain=pyo.Binary)
    m.n = pyo.Var(m.J, domain=pyo.PositiveIntegers, bounds=(1, layers - p + 1))

    m.all_cells = pyo.Constraint(m.J, rule=lambda m, j: sum(m.x[j, k] for k in ks) == cells)
    m.held_upper = pyo.Constraint(m.J, m.K, rule=lambda m, j, k: m.x[j, k] <= cap[k] * m.y[j, k])
    m.held_lower = pyo.Constraint(m.J, m.K, rule=lambda m, j, k: m.x[j, k] >= m.y[j, k])
    m.all_layers = pyo.Constraint(expr=sum(m.n[j] for j in m.J) == layers)
    m.capacity = pyo.Constraint(
        m.K,
        rule=lambda m, k: sum(m.x[j, k] for j in m.J) * ctx.shape.cell_gpus
        <= ctx.instance.topology.building(k).gpus,
    )

    ends = boundaries(ctx)
    m.B = pyo.Set(initialize=sorted(ends))
    arcs = [(b, k, k2) for b in ends for k in ks for k2 in ks]
    cross = [(b, k, k2) for b, k, k2 in arcs if k != k2]
    m.f = pyo.Var(arcs, domain=pyo.NonNegativeIntegers, bounds=lambda _, b, k, k2: (0, min(cap[k], cap[k2])))
    m.h = pyo.Var(cross, domain=pyo.Binary)
    m.flow_out = pyo.Constraint(
        m.B, m.K, rule=lambda m, b, k: sum(m.f[b, k, k2] for k2 in ks) == m.x[ends[b][0], k]
    )
    m.flow_in = pyo.Constraint(
        m.B, m.K, rule=lambda m, b, k2: sum(m.f[b, k, k2] for k in ks) == m.x[ends[b][1], k2]
    )
    m.crossing = pyo.Constraint(
        cross, rule=lambda m, b, k, k2: m.f[b, k, k2] <= min(cap[k], cap[k2]) * m.h[b, k, k2]
    )
    m.cross_arcs = cross
