"""Discrete options chosen inside the MILP: pipeline schedule, DP variant, transport per link.

    sum_o u[o] = 1          schedule option o (schedule with its chunks per rank)
    sum_v w[v] = 1          DP variant v (DDP, FSDP, FSDP without reshard, HSDP with r replica groups, zero1)
    sum_t z[l,t] = 1        transport t on link l
Layer granularity: with U_g = sum of u[o] over options needing multiples of g layers per rank,
    |n[j] - g q[j,g]| <= L (1 - U_g),  q integer.
Pairs that fail the memory screen (`ShapeContext.pairs`) are excluded:  u[o] + w[v] <= 1.
HSDP with r replicas keeps each shard group (D/r cells) inside one building:
    |x[j,k] - (D/r) s[j,k,r]| <= D (1 - w[hsdp r]),  s integer.
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.spec.search import DPMode


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

    groups = [
        (v, cells // var.replicas)
        for v, var in enumerate(ctx.variants)
        if var.mode is DPMode.hsdp and cells // var.replicas > 1
    ]
    index = [(j, k, v) for j in m.J for k in m.K for v, _ in groups]
    size = dict(groups)
    m.shard_groups = pyo.Var(index, domain=pyo.NonNegativeIntegers, bounds=(0, cells))
    m.hsdp_upper = pyo.Constraint(
        index, rule=lambda m, j, k, v: m.x[j, k] - size[v] * m.shard_groups[j, k, v] <= cells * (1 - m.w[v])
    )
    m.hsdp_lower = pyo.Constraint(
        index, rule=lambda m, j, k, v: m.x[j, k] - size[v] * m.shard_groups[j, k, v] >= -cells * (1 - m.w[v])
    )
