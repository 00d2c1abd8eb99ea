"""Cost of an iteration (costmodel.price) inside the MILP, the budget and throughput rows, and the objective.

A building is held, with every GPU in it, once it holds any stage (used[k] in {0,1}); holding it for the iteration
costs r_k T, r_k = G_k p_k / 3600 ($/s, `price.held_usd_per_s`). The product with the binary is linearised against a
ceiling Tmax on the iteration time (`time_ceiling_s`; T <= Tmax is a row, valid for every layout whose T is the least
its rows allow):
    used[k]     >= y[j,k]                                 for every stage j            (used_def)
    held[k]     >= r_k (T - Tmax (1 - used[k])),  held >= 0                          (held_cost)
    sum_k held[k] >= R T                                  R: the caller's floor (`build.Floors`, the cheapest rate
                                                          of any set of buildings holding the p D cells,
                                                          `bounds.held_rate_floor_usd_s`) (held_floor)
    T           <= Tmax                                                                (time_ceiling)
Egress: the GB the plan sends over link l per iteration, both directions, from the traffic rows' loads (`traffic`: pp
per microbatch, dp per iteration), priced at e_l $/GB:
    cost = sum_k held[k] + sum_l e_l sum_d (m pp[l,d] + dp[l,d])                        (cost, an Expression)
Rows the search options add (`search`):
    cost <= max_cost_per_iteration                                                     (cost_budget)
    T    <= B_run seq_len / min_tokens_per_s                                           (throughput)
Objective: minimise T (`time`) or cost (`cost`). The loads and T are lower-bounded epigraph variables: minimising
cost puts them at their least values, and `highs.polish` does under the time objective, so cost is the plan's.
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.costmodel.price import held_usd_per_s
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.spec.search import Objective, SearchOptions

CEILING_MARGIN = 2.0
"""Tmax is this multiple of the sum of the terms' ceilings: only the relaxation of held_cost weakens with it."""


def priced_rows_needed(search: SearchOptions) -> bool:
    """Whether the model needs the cost rows: a cost objective, a budget or a throughput floor."""
    return (search.objective is Objective.cost or search.max_cost_per_iteration is not None
            or search.min_tokens_per_s is not None)


def time_ceiling_s(ctx: ShapeContext, bounds: dict[str, float]) -> float:
    """Tmax: CEILING_MARGIN x the sum of ceilings on every term of T's rows (`iteration`, `pipeline`, `traffic`),
    each from the largest stage time S (L - p + 1 layers, `big_m_bounds`), the slowest link's seconds per GB at
    the largest loads P (pipeline, per microbatch) and D (DP), and the longest route latency lambda:
        Tpipe <= m cycle + beta p S + 2 (chi p + omega) lambda + A P s + m (S + lambda + P s)   (fill, steady)
        dp_exposed <= dpi + 2 (D s + 2 lambda),   opt, gather0 <= L per-layer + fixed,   busy <= `busy`
    (cycle <= `cycle_most`, a column bound; beta the largest bubble coefficient, A the arcs, s seconds per GB)."""
    p, mb, layers = ctx.shape.pp, ctx.shape.microbatches, ctx.instance.model_spec.layers
    stage = max(per_layer * (layers - p + 1) + fixed for j in range(p) for k in ctx.buildings
                for per_layer, fixed in [ctx.stage_time_terms(j, k)])
    latency = max(ctx.routes.latency_s.values(), default=0.0)
    slowest = max(ctx.seconds_per_gb.values(), default=0.0)
    pp, dp = bounds["pp_arc"] * slowest, bounds["dp_arc"] * slowest
    layer = ctx.gpu(ctx.buildings[0]).layer
    beta = max(option.bubble_coefficient(layer) for option in ctx.options)
    chi = max(option.boundary_crossings + option.wrap_crossings for option in ctx.options)
    arcs = 2 * len(ctx.routes.links)
    pipeline = (mb * bounds["cycle_most"] + beta * p * stage + 2 * chi * p * latency + arcs * pp
                + mb * (stage + latency + pp))
    types = [ctx.gpu(key) for key in ctx.price_groups]
    dpi = max(max(ctx.dp_sync_curve(g, v, o.chunks).y) for g in ctx.price_groups for v in ctx.variants
              for o in ctx.options) + max(g.embedding_dp.dp_sync_s[v] + g.head_dp.dp_sync_s[v]
                                          for g in types for v in ctx.variants)
    per_layer = max(g.optimizer_s_per_layer[v] + 2 * g.gather_s_per_layer[v] for g in types for v in ctx.variants)
    fixed = max(sum(part.optimizer_s[v] + 2 * part.gather_s[v] for part in (g.embedding_dp, g.head_dp))
                for g in types for v in ctx.variants)
    step = layers * per_layer + fixed
    return CEILING_MARGIN * (pipeline + dpi + 2 * (dp + 2 * latency) + step + bounds["busy"])


def add_cost(m: pyo.ConcreteModel, ctx: ShapeContext, bounds: dict[str, float], held_rate_usd_s: float) -> None:
    """Vars used, held, Expression cost and the rows used_def, held_cost, held_floor, time_ceiling, cost_budget,
    throughput (module docstring)."""
    instance, search = ctx.instance, ctx.instance.search
    rate = {k: held_usd_per_s(instance, k) for k in ctx.buildings}
    ceiling = time_ceiling_s(ctx, bounds)
    if search.min_tokens_per_s is not None:
        tokens = ctx.shape.batch_sequences * instance.training.seq_len
        m.throughput = pyo.Constraint(expr=(None, m.T, tokens / search.min_tokens_per_s))
        ceiling = min(ceiling, tokens / search.min_tokens_per_s)
    m.time_ceiling = pyo.Constraint(expr=(None, m.T, ceiling))
    m.used = pyo.Var(m.K, domain=pyo.Binary)
    m.used_def = pyo.Constraint(m.J, m.K, rule=lambda m, j, k: m.used[k] >= m.y[j, k])
    m.held = pyo.Var(m.K, domain=pyo.NonNegativeReals)
    m.held_cost = pyo.Constraint(m.K, rule=lambda m, k: m.held[k] >= rate[k] * (m.T - ceiling * (1 - m.used[k])))
    m.held_floor = pyo.Constraint(expr=sum(m.held[k] for k in m.K) >= held_rate_usd_s * m.T)
    links, mb = ctx.routes.links, ctx.shape.microbatches
    m.cost = pyo.Expression(expr=sum(m.held[k] for k in m.K) + sum(
        link.egress_usd_per_gb * (mb * m.pp[i, d] + m.dp[i, d])
        for i, link in enumerate(links) for d in (1, -1) if link.egress_usd_per_gb))
    if search.max_cost_per_iteration is not None:
        m.cost_budget = pyo.Constraint(expr=m.cost <= search.max_cost_per_iteration)


def add_objective(m: pyo.ConcreteModel, ctx: ShapeContext, bounds: dict[str, float], held_rate_usd_s: float) -> None:
    """The cost rows when the search needs them (`priced_rows_needed`), and the objective: minimise T or cost."""
    if priced_rows_needed(ctx.instance.search):
        add_cost(m, ctx, bounds, held_rate_usd_s)
    cost = ctx.instance.search.objective is Objective.cost
    m.objective = pyo.Objective(expr=m.cost if cost else m.T, sense=pyo.minimize)


def link_sends(m: pyo.ConcreteModel, ctx: ShapeContext) -> list[tuple[str, str, float]]:
    """(from, to, GB) per link and direction of a solved model: m pp[l,d] + dp[l,d], the volume `cost` prices."""
    sends = []
    for i, link in enumerate(ctx.routes.links):
        for d, (a, b) in ((1, (link.a, link.b)), (-1, (link.b, link.a))):
            gb = ctx.shape.microbatches * pyo.value(m.pp[i, d]) + pyo.value(m.dp[i, d])
            sends.append((a, b, max(0.0, gb)))
    return sends
