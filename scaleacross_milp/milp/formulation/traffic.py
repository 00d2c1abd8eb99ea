"""Inter-building traffic: pipeline sends and DP synchronisation on every directed link (arc), transports.

Units: GB and seconds. A = activation GB one cell sends per microbatch across a boundary (ep pipelines).
Pipeline traffic per microbatch on arc a (routes R(s,t) are lowest-latency paths):
    pp[a] >= A sum_{(s,t): a in R(s,t)} sum_b c_o(b) (f[b,s,t] + f[b,t,s]) - M (1 - u[o])
    (forward activations s->t, and gradients s->t of pipelines running t->s; c_o = chi_o, or omega_o at the wrap)
DP synchronisation per step: building s owns the share x[j,s]/D of stage j's reduced state, so with
r[j,s,t] = x[j,s] y[j,t] (linearised, continuous):
    dp[a] >= sum_{(s,t): a in R(s,t)} sum_j S_j (G_v r[j,s,t] + Q_v r[j,t,s]) / D - M (1 - w[v])
    (gathers: s sends its share to every holder t; reductions: s sends t's share to owner t), S_j the stage's
    gradient GB per cell, G_v / Q_v the gather / reduce volumes of variant v in gradient-sized units.
With efficiency eta[l,t] of link l under transport t and capacity c_l (GB/s per direction):
    busy[a] >= (m pp[a] + dp[a]) / (c_l eta[l,t]) - M (1 - z[l,t])   the link carries one iteration's bytes
    xfer[a] >= pp[a] / (c_l eta[l,t]) - M (1 - z[l,t]),  cycle >= xfer[a]   ... and one microbatch per cycle
    fill    >= sum_a xfer[a]      the first microbatch's sends (forward arcs) and the last one's (backward arcs)
                                  are on the critical path of fill and drain
    dpx     >= dp[a] / (c_l eta[l,t]) - M (1 - z[l,t]),   dpx >= 2 lambda[s,t] (y[j,s] + y[j,t] - 1)
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.costmodel.dp import dp_cross_phases
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.disjunction import add_rows, choice_lower_bounds

GB = 1e9


def stage_grad_gb(ctx: ShapeContext, j: int) -> float:
    """Gradient GB one cell holds for stage j, at the average layers per stage (exact in total over stages)."""
    costs, p = ctx.costs, ctx.shape.pp
    layers = ctx.instance.model_spec.layers
    gb = layers / p * costs.grad_bytes_per_layer_per_cell
    if j == 0:
        gb += costs.grad_bytes_fixed_first
    if j == p - 1:
        gb += costs.grad_bytes_fixed_last
    return gb / GB


def cross_volumes(ctx: ShapeContext, v: int) -> tuple[float, float]:
    """(gather, reduce) volumes of DP variant v across buildings per step, in gradient-sized units."""
    training = ctx.instance.training
    phases = dp_cross_phases(
        ctx.variants[v], ctx.shape.microbatches, training.grad_bytes_per_param, training.bytes_per_element
    )
    return phases.gather_phases * phases.gather_bytes_per_grad_byte, float(phases.reduce_phases)


def add_traffic(m: pyo.ConcreteModel, ctx: ShapeContext, bounds: dict[str, float]) -> None:
    links, routes = ctx.routes.links, ctx.routes
    cells, mb = ctx.shape.cells_per_stage, ctx.shape.microbatches
    arcs = [(i, d) for i in range(len(links)) for d in (1, -1)]
    m.A = pyo.Set(initialize=arcs, dimen=2)
    wrap = ctx.shape.pp - 1 if (ctx.shape.pp - 1) in m.B else None
    pairs = [(s, t) for s in m.K for t in m.K if s != t]
    over = {a: routes.pairs_over(a) for a in arcs}
    act_gb = ctx.costs.p2p_bytes * ctx.shape.ep / GB

    m.pp = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["pp_arc"]))
    m.dp = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["dp_arc"]))
    m.busy = pyo.Var(m.A, domain=pyo.NonNegativeReals)
    m.xfer = pyo.Var(m.A, domain=pyo.NonNegativeReals)
    m.dpx = pyo.Var(domain=pyo.NonNegativeReals)

    # Per ordered pair (s, t): cell-crossings s->t at regular boundaries and at the wrap, summed over boundaries.
    m.cross = pyo.Var(pairs, domain=pyo.NonNegativeReals)
    m.cross_def = pyo.Constraint(pairs, rule=lambda m, s, t: m.cross[s, t] == sum(
        m.f[b, s, t] + m.f[b, t, s] for b in m.B if b != wrap))
    m.cross_wrap = pyo.Var(pairs, domain=pyo.NonNegativeReals)
    m.cross_wrap_def = pyo.Constraint(pairs, rule=lambda m, s, t: m.cross_wrap[s, t] == (
        m.f[wrap, s, t] + m.f[wrap, t, s] if wrap is not None else 0))
    options = list(m.O)
    chi = [act_gb * ctx.options[o].boundary_crossings for o in options]
    omega = [act_gb * ctx.options[o].wrap_crossings for o in options]
    rows = []
    for a in arcs:
        terms = [(chi, sum(m.cross[pair] for pair in over[a]))]
        if wrap is not None:
            terms.append((omega, sum(m.cross_wrap[pair] for pair in over[a])))
        rows += choice_lower_bounds(m.pp[a], terms, m.u, options, bounds["pp_arc"])
    add_rows(m, "pp_load", rows)

    m.r = pyo.Var(m.J, pairs, domain=pyo.NonNegativeReals)
    m.r_x = pyo.Constraint(m.J, pairs, rule=lambda m, j, s, t: m.r[j, s, t] <= m.x[j, s])
    m.r_y = pyo.Constraint(m.J, pairs, rule=lambda m, j, s, t: m.r[j, s, t] <= cells * m.y[j, t])
    m.r_xy = pyo.Constraint(
        m.J, pairs, rule=lambda m, j, s, t: m.r[j, s, t] >= m.x[j, s] - cells * (1 - m.y[j, t])
    )
    grad = {j: stage_grad_gb(ctx, j) for j in m.J}
    variants = list(m.V)
    gathers = [cross_volumes(ctx, v)[0] / cells for v in variants]
    reduces = [cross_volumes(ctx, v)[1] / cells for v in variants]
    # GB of stage state building s owns and t holds (gathers s->t), summed over stages.
    m.shared = pyo.Var(pairs, domain=pyo.NonNegativeReals)
    m.shared_def = pyo.Constraint(pairs, rule=lambda m, s, t: m.shared[s, t] == sum(
        grad[j] * m.r[j, s, t] for j in m.J))
    rows = []
    for a in arcs:
        owned = sum(m.shared[s, t] for s, t in over[a])
        owed = sum(m.shared[t, s] for s, t in over[a])
        rows += choice_lower_bounds(m.dp[a], [(gathers, owned), (reduces, owed)], m.w, variants, bounds["dp_arc"])
    add_rows(m, "dp_load", rows)

    def seconds(i, t) -> float:
        """Seconds per GB on link i under transport t."""
        return 1.0 / (links[i].capacity_byte_s / GB * ctx.efficiency[i, t])

    rows = []
    for i, d in arcs:
        transports = [(i, t) for t in links[i].transports]
        per_gb = [seconds(i, t) for t in links[i].transports]
        for lhs, load in ((m.busy[i, d], mb * m.pp[i, d] + m.dp[i, d]), (m.xfer[i, d], m.pp[i, d]),
                          (m.dpx, m.dp[i, d])):
            rows += choice_lower_bounds(lhs, [(per_gb, load)], m.z, transports, bounds["busy"])
    add_rows(m, "link_time", rows)
    m.link_cycle = pyo.Constraint(m.A, rule=lambda m, i, d: m.cycle >= m.xfer[i, d])
    m.fill_sends_bound = pyo.Constraint(expr=m.fill_sends >= sum(m.xfer[a] for a in arcs))
    lam = routes.latency_s
    m.dp_latency = pyo.Constraint(
        m.J, [(s, t) for s, t in pairs if s < t],
        rule=lambda m, j, s, t: m.dpx >= 2 * lam[s, t] * (m.y[j, s] + m.y[j, t] - 1),
    )
