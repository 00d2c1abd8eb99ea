"""Pipeline timing: stage times, the steady-state cycle, crossing latency and the pipeline's makespan.

Per microbatch, stage j in building k takes  C[j,k] = n[j] tau_k + sum_o e[j,k,o] u[o]  (tau_k: one layer's
forward + backward on that GPU type incl. TP/CP/EP communication; e[j,k,o]: under schedule option o, the
intra-building sends rank j makes, the embedding on stage 0 and the LM head on the stage o runs it on,
`ShapeContext.stage_fixed_s`; `chosen.chosen_value`).
    Cst[j]  >= C[j,k] - M (1 - y[j,k])                        slowest copy of stage j
    cycle   >= Cst[j]                                         steady-state time per microbatch
    cycle   >= c0                                             the capacity-aware floor of `bounds.cycle_floor_s`
    lat[b]  >= lambda[k,k'] h[b,k,k']                          worst one-way route latency crossing b
For the chosen schedule o (bubble coefficient beta_o, crossings chi_o per boundary, omega_o per wrap), m
cycles plus the fill and drain: beta_o times the other stages' time, never negative (a link- or latency-bound
cycle can exceed sum_j Cst[j]):
    spread >= sum_j Cst[j] - cycle,   bubble >= beta_o spread
    Tpipe  >= m cycle + bubble + 2 (chi_o sum_b lat[b] + omega_o lat[wrap]) + fill   (fill: see `traffic`)
(choice-dependent rows as in `disjunction`; with spread >= 0 their choice-free floor uses min_o beta_o, which
keeps the relaxation's bound at the analytical one of `bounds.lower_bound_s`)
and, but for GPipe, rank j keeps only p - j microbatches in flight, so its round trip bounds the cycle:
    (p - j) cycle >= sum_{j' >= j} Cst[j'] + 2 chi_o sum_{b >= j} lat[b].
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.milp.bounds import cycle_floor_s
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.chosen import chosen_value
from scaleacross_milp.milp.formulation.disjunction import add_rows, choice_lower_bounds


def add_pipeline(m: pyo.ConcreteModel, ctx: ShapeContext, bounds: dict[str, float]) -> None:
    p, mb, layers, ks = ctx.shape.pp, ctx.shape.microbatches, ctx.instance.model_spec.layers, ctx.buildings
    wrap = p - 1 if (p - 1) in m.B else None
    regular = [b for b in m.B if b != wrap]

    def stage_max(j: int, k: str) -> float:
        per_layer, fixed = ctx.stage_time_terms(j, k)
        return (layers - p + 1) * per_layer + fixed

    m.Cst = pyo.Var(m.J, domain=pyo.NonNegativeReals)
    m.cycle = pyo.Var(domain=pyo.NonNegativeReals)
    m.lat = pyo.Var(m.B, domain=pyo.NonNegativeReals)
    m.Tpipe = pyo.Var(domain=pyo.NonNegativeReals)

    def stage_rule(m, j, k):
        fixed = chosen_value(m, [ctx.stage_fixed_s(j, k, o) for o in ctx.options])
        relax = 0 if ctx.homogeneous else stage_max(j, k) * (1 - m.y[j, k])
        return m.Cst[j] >= ctx.gpu(k).layer.total_s * m.n[j] + fixed - relax

    m.stage_time = pyo.Constraint(m.J, m.K, rule=stage_rule)
    if not ctx.homogeneous:
        def floor_rule(m, j):
            fixed = chosen_value(m, [min(ctx.stage_fixed_s(j, k, o) for k in ks) for o in ctx.options])
            return m.Cst[j] >= min(ctx.gpu(k).layer.total_s for k in ks) * m.n[j] + fixed

        m.stage_floor = pyo.Constraint(m.J, rule=floor_rule)
    m.cycle_bound = pyo.Constraint(m.J, rule=lambda m, j: m.cycle >= m.Cst[j])
    m.cycle_floor = pyo.Constraint(expr=m.cycle >= cycle_floor_s(ctx))
    lam = ctx.routes.latency_s
    m.crossing_latency = pyo.Constraint(
        m.cross_arcs, rule=lambda m, b, k, k2: m.lat[b] >= lam[k, k2] * m.h[b, k, k2]
    )

    big = bounds["pipeline"]
    options = list(m.O)
    layer = ctx.gpu(ctx.buildings[0]).layer
    beta = [ctx.options[o].bubble_coefficient(layer) for o in options]
    chi = [ctx.options[o].boundary_crossings for o in options]
    omega = [ctx.options[o].wrap_crossings for o in options]
    m.spread = pyo.Var(domain=pyo.NonNegativeReals)
    m.spread_def = pyo.Constraint(expr=m.spread >= sum(m.Cst[j] for j in m.J) - m.cycle)
    m.bubble = pyo.Var(domain=pyo.NonNegativeReals)
    add_rows(m, "bubble_bound", choice_lower_bounds(m.bubble, [(beta, m.spread)], m.u, options, big))
    latency = sum(m.lat[b] for b in regular)
    terms = [([2 * c for c in chi], latency)]
    if wrap is not None:
        terms.append(([2 * w for w in omega], m.lat[wrap]))
    m.fill_sends = pyo.Var(domain=pyo.NonNegativeReals)
    add_rows(m, "makespan", choice_lower_bounds(m.Tpipe - mb * m.cycle - m.bubble - m.fill_sends, terms, m.u,
                                                options, big))

    steady = [2 * c if ctx.options[o].steady_state_latency_bound else 0 for o, c in zip(options, chi, strict=True)]
    rows = []
    for j in range(p - 1):
        downstream = sum(m.Cst[i] for i in range(j, p))
        ahead = sum(m.lat[b] for b in regular if b >= j)
        rows += choice_lower_bounds((p - j) * m.cycle, [([1] * len(options), downstream), (steady, ahead)],
                                    m.u, options, big)
    add_rows(m, "round_trip", rows)
