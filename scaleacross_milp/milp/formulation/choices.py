"""Discrete options chosen inside the MILP: pipeline schedule, DP variant, transport per link.

    sum_o u[o] = 1          schedule option o (schedule with its chunks per rank)
    sum_v w[v] = 1          DP variant v (DDP, FSDP, FSDP without reshard, HSDP with r replica groups, zero1)
    sum_t z[l,t] = 1        transport t on link l
Layer granularity: with U_g = sum of u[o] over options needing multiples of g layers per rank,
    |n[j] - g q[j,g]| <= L (1 - U_g),  q integer.
Pairs that fail the memory screen (`ShapeContext.pairs`) are excluded:  u[o] + w[v] <= 1.
HSDP with r replicas forms each stage's shard groups of g = D/r cells from its cells building by building (as the
replay does), so building k holds s whole groups and a cells of a group that straddles (model components
shard_groups, straddle, straddled, hsdp_upper / hsdp_lower, straddle_chosen, straddle_stage):
    |x[j,k] - g s[j,k,v] - a[j,k,v]| <= D (1 - w[v]),   0 <= a[j,k,v] <= (g - 1) w[v],   s, a integer
    a[j,k,v] <= (g - 1) t[j],   sum_k y[j,k] <= 2 + (K - 2) (1 - t[j])      (straddle_two_holders, t binary)
A straddling group is allowed only on a stage held by two buildings, where it is the one group with cells in both
(a_s + a_t = g) and its gathers are exact (`traffic`: straddle GB); on three or more, every group stays in one
building.
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.volumes import shard_group_cells


def add_choices(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    layers, cells = ctx.instance.model_spec.layers, ctx.shape.cells_per_stage
    m.O = pyo.Set(initialize=range(len(ctx.options)))
    m.V = pyo.Set(initialize=range(len(ctx.variants)))
    m.u = pyo.Var(m.O, domain=pyo.Binary)
    m.w = pyo.Var(m.V, domain=pyo.Binary)
    m.one_schedule = pyo.Constraint(expr=sum(m.u[o] for o in m.O) == 1)
    m.one_variant = pyo.Constraint(expr=sum(m.w[v] for v in m.V) == 1)

    admissible = ctx.pairs
    excluded = [(o, v) for o, opt in enumerate(ctx.options) for v, var in enumerate(ctx.variants)
                if (opt, var) not in admissible]
    m.excluded_pairs = pyo.Constraint(excluded, rule=lambda m, o, v: m.u[o] + m.w[v] <= 1)

    link_transports = [(i, t) for i, link in enumerate(ctx.routes.links) for t in link.transports]
    m.LT = pyo.Set(initialize=link_transports, dimen=2)
    m.z = pyo.Var(m.LT, domain=pyo.Binary)
    m.one_transport = pyo.Constraint(
        range(len(ctx.routes.links)),
        rule=lambda m, i: sum(m.z[i, t] for t in ctx.routes.links[i].transports) == 1,
    )

    grains = sorted({o.layer_granularity for o in ctx.options if o.layer_granularity > 1})
    m.G = pyo.Set(initialize=grains)
    m.q = pyo.Var(m.J, m.G, domain=pyo.NonNegativeIntegers, bounds=(0, layers))

    def chosen(g: int):
        return sum(m.u[o] for o, opt in enumerate(ctx.options) if opt.layer_granularity == g)

    m.grain_upper = pyo.Constraint(
        m.J, m.G, rule=lambda m, j, g: m.n[j] - g * m.q[j, g] <= layers * (1 - chosen(g))
    )
    m.grain_lower = pyo.Constraint(
        m.J, m.G, rule=lambda m, j, g: m.n[j] - g * m.q[j, g] >= -layers * (1 - chosen(g))
    )

    size = shard_group_cells(ctx)
    index = [(j, k, v) for j in m.J for k in m.K for v in size]
    m.shard_groups = pyo.Var(index, domain=pyo.NonNegativeIntegers, bounds=(0, cells))
    m.straddle = pyo.Var(index, domain=pyo.NonNegativeIntegers, bounds=lambda _, j, k, v: (0, size[v] - 1))
    m.straddled = pyo.Var(m.J, domain=pyo.Binary)
    if not size:
        m.straddled.fix(0)
    m.hsdp_upper = pyo.Constraint(index, rule=lambda m, j, k, v: m.x[j, k] - size[v] * m.shard_groups[j, k, v]
                                  - m.straddle[j, k, v] <= cells * (1 - m.w[v]))
    m.hsdp_lower = pyo.Constraint(index, rule=lambda m, j, k, v: m.x[j, k] - size[v] * m.shard_groups[j, k, v]
                                  - m.straddle[j, k, v] >= -cells * (1 - m.w[v]))
    m.straddle_chosen = pyo.Constraint(
        index, rule=lambda m, j, k, v: m.straddle[j, k, v] <= (size[v] - 1) * m.w[v])
    m.straddle_stage = pyo.Constraint(
        index, rule=lambda m, j, k, v: m.straddle[j, k, v] <= (size[v] - 1) * m.straddled[j])
    if len(ctx.buildings) > 2 and size:
        m.straddle_two_holders = pyo.Constraint(m.J, rule=lambda m, j: sum(m.y[j, k] for k in m.K)
                                                <= 2 + (len(ctx.buildings) - 2) * (1 - m.straddled[j]))


def straddle_share(m: pyo.ConcreteModel, ctx: ShapeContext, j: int, k: str):
    """sum_v straddle[j,k,v] / (D / r_v): the share of its straddling shard group that building k holds for stage j,
    in [0, 1) (0 when no group of j straddles, or the variant is not HSDP)."""
    return sum(m.straddle[j, k, v] / size for v, size in shard_group_cells(ctx).items())
