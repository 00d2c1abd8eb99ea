"""Pipeline timing: stage times, the steady-state cycle, crossing latency and the pipeline's makespan.

Per microbatch, stage j in building k takes  C[j,k] = n[j] tau_k + e[j,k]  (tau_k: one layer's forward +
backward on that GPU type incl. TP/CP/EP communication; e: embedding, LM head, intra-building sends).
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
Steady-state sends (1F1B, ZB-H1: `verify.actions`' orders). Rank b runs F(w_b + i), B(i) in steady state
(w_b = p - 1 - b warm-up forwards), rank b + 1 the same with w_b - 1; so F_b(x) -> send -> F_{b+1}(x) ->
B_{b+1}(x - w_b + 1) -> send -> B_b(x - w_b + 1) -> F_b(x + 2) is a chain over two microbatches that crosses
boundary b twice (ZB-H1: B_{b+1} is I_{b+1}, its W runs off the chain, while rank b's I, W run on it). Each
crossing takes one microbatch's transfer over the boundary's busiest arc, tx[b], plus its latency, so
    2 cycle_b >= Cst[b] + (1 - w_o) Cst[b+1] + 2 (lat[b] + tx[b])     (w_o: W's share of a layer, ZB-H1; else 0)
Its excess over the cycle recurs on every microbatch of that chain but the first and last w_b + w_{b+1} + 1 =
2 (p - 1 - b), which the fill / drain already price (K_b = max(0, m - 2 (p - 1 - b))):
    steady[b] >= sigma_o (Cst[b] + (1 - w_o) Cst[b+1]) / 2 + lat[b] + tx[b] - cycle   (sigma_o = 1, GPipe 0)
    Tpipe     >= m cycle + bubble + 2 (chi_o sum_b lat[b] + omega_o lat[wrap]) + fill + K_b steady[b]
    tx[b]     >= A sum_{(s,t): a in R(s,t)} (f[b,s,t] + f[b,t,s]) / (c_l eta[l,t]) - M (1 - z[l,t])   every arc a
(A: activation GB one cell sends per microbatch, as in `traffic`; components steady_xfer, steady_excess,
steady_makespan). Exact for p = 2 (the replay's makespan is (m + 1) C + m (lat + tx)); GPipe, interleaved and
ZB-V have no such two-rank chain (their loops through a boundary hide the transfer behind other chunks' work).
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.milp.bounds import cycle_floor_s
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.disjunction import add_rows, choice_lower_bounds
from scaleacross_milp.spec.search import Schedule

GB = 1e9


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
        per_layer, fixed = ctx.stage_time_terms(j, k)
        relax = 0 if ctx.homogeneous else stage_max(j, k) * (1 - m.y[j, k])
        return m.Cst[j] >= per_layer * m.n[j] + fixed - relax

    m.stage_time = pyo.Constraint(m.J, m.K, rule=stage_rule)
    if not ctx.homogeneous:
        def floor_rule(m, j):
            per_layer, fixed = zip(*(ctx.stage_time_terms(j, k) for k in ks), strict=True)
            return m.Cst[j] >= min(per_layer) * m.n[j] + min(fixed)

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
    add_steady_sends(m, ctx, regular, terms, big)

    steady = [2 * c if ctx.options[o].steady_state_latency_bound else 0 for o, c in zip(options, chi, strict=True)]
    rows = []
    for j in range(p - 1):
        downstream = sum(m.Cst[i] for i in range(j, p))
        ahead = sum(m.lat[b] for b in regular if b >= j)
        rows += choice_lower_bounds((p - j) * m.cycle, [([1] * len(options), downstream), (steady, ahead)],
                                    m.u, options, big)
    add_rows(m, "round_trip", rows)


def steady_weight_share(ctx: ShapeContext, o: int) -> float:
    """w_o: the share of a stage's time in W, which ZB-H1's rank b + 1 runs off the two-rank chain (else 0)."""
    layer = ctx.gpu(ctx.buildings[0]).layer
    return layer.backward_weight_s / layer.total_s if ctx.options[o].schedule is Schedule.zb_h1 else 0.0


def add_steady_sends(m: pyo.ConcreteModel, ctx: ShapeContext, regular: list[int], terms: list, big: float) -> None:
    """Vars tx[b], steady[b] and the rows steady_xfer, steady_excess, steady_makespan (module docstring)."""
    p, mb, links = ctx.shape.pp, ctx.shape.microbatches, ctx.routes.links
    options = list(m.O)
    chained = [ctx.options[o].schedule in (Schedule.one_f_one_b, Schedule.zb_h1) for o in options]
    if not regular or not any(chained):
        return
    act_gb = ctx.costs.p2p_bytes * ctx.shape.ep / GB
    m.tx = pyo.Var(regular, domain=pyo.NonNegativeReals)
    rows = []
    for i, link in enumerate(links):
        for d in (1, -1):
            pairs = ctx.routes.pairs_over((i, d))
            per_gb = [GB / (link.capacity_byte_s * ctx.efficiency[i, t]) for t in link.transports]
            for b in regular:
                load = act_gb * sum(m.f[b, s, t] + m.f[b, t, s] for s, t in pairs)
                rows += choice_lower_bounds(m.tx[b], [(per_gb, load)], m.z, [(i, t) for t in link.transports], big)
    add_rows(m, "steady_xfer", rows)
    m.steady = pyo.Var(regular, domain=pyo.NonNegativeReals)
    rows = []
    for b in regular:
        sigma = [1.0 if c else 0.0 for c in chained]
        weighted = [s * (1 - steady_weight_share(ctx, o)) for o, s in zip(options, sigma, strict=True)]
        rows += choice_lower_bounds(m.steady[b] + m.cycle, [
            ([s / 2 for s in sigma], m.Cst[b]), ([w / 2 for w in weighted], m.Cst[b + 1]),
            (sigma, m.lat[b] + m.tx[b]),
        ], m.u, options, big)
    add_rows(m, "steady_excess", rows)
    rows = []
    for b in regular:
        count = [max(0, mb - 2 * (p - 1 - b)) if c else 0 for c in chained]
        rows += choice_lower_bounds(m.Tpipe - mb * m.cycle - m.bubble - m.fill_sends,
                                    [*terms, (count, m.steady[b])], m.u, options, big)
    add_rows(m, "steady_makespan", rows)
