"""Pipeline timing: stage times, the steady-state cycle, crossing latency and the pipeline's makespan.

Per microbatch, stage j in building k takes  C[j,k] = n[j] tau_k + x_k moe_excess[j] + sum_o e[j,k,o] u[o]  (tau_k:
one average layer's forward + backward on that GPU type incl. TP/CP/EP communication; x_k moe_excess[j]: its MoE
layers beyond the average share, `layer_kinds`; e[j,k,o]: under schedule option o, the
intra-building sends rank j makes, the embedding on stage 0 and the LM head on the stage o runs it on,
`ShapeContext.stage_fixed_s`; `chosen.chosen_value`).
    Cst[j]  >= C[j,k] - M (1 - y[j,k])                        slowest copy of stage j
    cycle   >= Cst[j]                                         steady-state time per microbatch
    cycle   >= c0                                             the caller's floor (`build.Floors`: bounds.cycle_floor_s)
    lat[b]  >= lambda[k,k'] h[b,k,k']                          worst one-way route latency crossing b
For the chosen schedule o (crossings chi_o per boundary, omega_o per wrap), m cycles plus the fill and drain, the
bubble: under every schedule but ZB-H1, beta_o (`ScheduleOption.bubble_coefficient`) times the other stages' time,
never negative (a link- or latency-bound cycle can exceed sum_j Cst[j]):
    spread >= sum_j Cst[j] - cycle,   bubble >= beta_o spread                                   (bubble_bound)
Under ZB-H1 that formula, exact at equal stage times, over-prices uneven ones (a heavy stage 0 runs its
steady state while the others fill: generated medium seed 161, ZB-H1 over stages of 5, 4, ..., 4, 3 layers, bubble
49.9 ms against the replay's 34.0 ms, the plan 7.8 % above its replay). Its bubble comes from the longest paths
of ops alone (`ScheduleOption.rank_paths`: at equal stage times and when one rank is clearly the slowest), each a
row with the rank r it runs most ops on kept at the cycle's pace (`ShapeContext.bubble_rows`; a_j: the path's ops
on rank j as a multiple of Cst[j], g = m - a_r), so a cycle stretched by links or gathers stretches r's ops:
    bubble >= sum_{j != r} a_j Cst[j] - g cycle - M (1 - u[o])                                  (bubble_path)
(M: the right side at every stage's most time)
(m cycle + bubble is the path at cycle = Cst[r]; in bubble_bound such an option takes beta_o = F / C, rank p - 1's
path, whose other ranks run one forward each: implied by its bubble_path row, it keeps a choice-free floor.)
    Tpipe  >= m cycle + bubble + 2 (chi_o sum_b lat[b] + omega_o lat[wrap]) + fill + fill_gathers
(fill: see `traffic`; fill_gathers: the first microbatch's waits on later chunks' parameter gathers,
`iteration.add_chunk_gather_waits`)
(choice-dependent rows as in `disjunction`; `bounds` reads the floors these rows allow, `ShapeContext.bubble_lines`)
and, but for GPipe and interleaving, rank j keeps only K_j microbatches in flight, so its round trip bounds the
cycle (rows round_trip). Under 1F1B and ZB-H1, K_j = p - j and the round trip runs out to rank p - 1 and back:
    (p - j) cycle >= sum_{j' >= j} Cst[j'] + 2 chi_o sum_{b >= j} lat[b];
under ZB-V rank j runs K_j = 2p - j chunk-0 forwards before its first chunk-0 input backward, and a microbatch's
chunk 0 runs out to rank p - 1, its chunk 1 back to rank 0, and both backward: the boundaries at or beyond j are
crossed four times, the others twice (only the latencies are counted; the work on that path, at most about p of
2p - j stage times, stays below the cycle's own floor cycle >= Cst[j]):
    (2p - j) cycle >= 2 sum_{b >= j} lat[b] + 2 sum_b lat[b].
(With p - j under ZB-V, a 2,754 km boundary after stage 3 of 8 held a generated instance's cycle 11 % above its
slowest stage, the MILP 6.1 % above the replay.)
Interleaved 1F1B with v chunks (Megatron's order, `costmodel.actions`): rank j runs w_j = 2 (p - j - 1) + (v - 1) p
warm-up forwards, then pairs (F(k + w_j), B(k)) of chunk-ops, where forward k runs chunk c = (k // p) mod v and
backward k chunk v - 1 - c of the same microbatch. So B(k) starts w_j pairs and one chunk forward after F(k), and
between them the microbatch runs forward from virtual stage c p + j to the last, p v - 1, and backward down to
(v - 1 - c) p + j + 1, each hop a boundary crossing (rank p - 1 to 0: the wrap). With phi, beta the forward and
backward shares of a stage's time (one layer's F / C and (I + W) / C) and s mod p the rank of virtual stage s:
    (w_j / v) cycle + phi Cst[j] / v >= sum_{s = cp+j}^{pv-1} phi Cst[s mod p] / v
                                        + sum_{s = (v-1-c)p+j+1}^{pv-1} beta Cst[s mod p] / v + sum_hops lat
for every rank j and chunk c, under the interleaved option's u[o] (rows interleaved_round_trip; the hops: s -> s + 1
for s from cp + j to pv - 2 forward, and from (v - 1 - c)p + j to pv - 2 backward).
Steady-state sends (the orders of `costmodel.actions`). 1F1B: rank b runs F(w_b + i), B(i) in steady state (w_b =
p - 1 - b warm-up forwards), rank b + 1 the same with w_b - 1; so F_b(x) -> send -> F_{b+1}(x) ->
B_{b+1}(x - w_b + 1) -> send -> B_b(x - w_b + 1) -> F_b(x + 2) is a chain over two microbatches that crosses
boundary b twice. ZB-H1: the same with B = I, rank b + 1's W off the chain. ZB-V (rank r: F, I, W of chunk 0, then
of chunk 1): F0_b -> send -> F0, I0, W0, F1 on b + 1 -> send -> F1, I1, W1 on b, and I1_b -> send -> I1, W1, F0, I0
on b + 1 -> send -> I0, W0, F1 on b, each over two microbatches, leave out one chunk's I + W or F + W of the
four chunk-ops per rank. Each crossing takes one microbatch's transfer over the boundary's busiest arc, tx[b],
plus its latency; the chain's excess over the cycle is
    steady[b] >= a_o Cst[b] + c_o Cst[b+1] + lat[b] + txc[b] - cycle                      (steady_excess)
    1F1B a = c = 1/2;  ZB-H1 a = 1/2, c = (1 - W/C) / 2;  ZB-V a = c = (1 - (W + min(F, I)) / (2 C)) / 2
    (F, I, W, C = F + I + W: one layer's times); GPipe and interleaved: no rows (a = c = 0; GPipe's sends, one
    direction per phase, are priced per link by `traffic`'s gpipe_sends, and per boundary by the stream paths)
and it recurs on K_{o,b} microbatches (K = m - 2 ceil((p - 1 - b) / 2) for 1F1B / ZB-H1: every one but those in
the ranks' warm-up and cool-down, counted by replaying the orders with a delay per crossing; ZB-V K = m - 2):
    Tpipe >= m cycle + bubble + 2 (chi_o sum_b lat[b] + omega_o lat[wrap]) + fill + fill_gathers + K_{o,b} steady[b]
    tx[b] >= the time of A sum_{(s,t): a in R(s,t)} (f[b,s,t] + f[b,t,s]) GB on every arc a, priced by the line
             the arc's pipeline sends pick for each queue-pair class (`traffic.line_rows`, units of A GB, the
             intercept on only when some pipeline of the class crosses b over a: sum h[b,s,t] + h[b,t,s] >= 1)
(rows steady_makespan and steady_xfer; A: activation GB one cell sends per microbatch, as in `traffic`).
In the steady state every boundary sends each microbatch, and a transfer across b shares the arcs of its route with
the other boundaries' transfers over them (a pipeline that leaves a building and comes back, or routes through a
third): max-min fairness halves its rate while they overlap, so b's transfer, tx[b] alone, takes tx[b] + min(tx[b],
o) when the others' time o overlaps it whole. In the replay's steady state about half of it is overlapped (generated
medium seed 24: two boundaries' transfers of 0.126 and 0.129 s alone over one 100 Gb/s link take 0.18-0.20 s each;
seed 109: 6.9 ms alone, 11.3 ms each), so with CONTENTION = 1/2, X[s,t] the busiest arc of route R(s,t) and chi_o
b's own crossings per microbatch on it (ZB-V's two chunks cross b each microbatch and do not wait on each other:
with them counted, seed 142's ZB-V plan was priced 6 % above its replay):
    X[s,t]   >= xfer[a]                            for every arc a of R(s,t) (traffic's pipeline time per microbatch)
    txc[b]   >= tx[b]                                                                           (txc_own)
    txc[b]   >= tx[b] + CONTENTION (X[s,t] - chi_o tx[b]) - M (1 - h[b,s,t]) - M cap[b]       (steady_contended)
    txc[b]   >= (1 + CONTENTION) tx[b] - M (1 - cap[b])                                     (steady_contended_cap)
(rows route_xfer_bound first; binary cap[b] takes the lesser of the two; the steady_contended rows per value of
chi among the options, off unless the chosen option o has it; M: the cycle's bound). Without them the MILP priced
seed 24's ZB-H1 plan (20 stages over 6 buildings) 8.2 % and seed 109's 7.3 % below their replays.
Under Training.overlap_moe_expert_parallel_comm the makespan rows add ep_unpaired, what the warm-up forwards and
cool-down backwards expose of the EP all-to-alls the merged pairs hide (`add_ep_unpaired`).
Stream paths (`costmodel.stream_paths`): any path through the replay's dependency graph (each rank's ops in the
schedule's order, a forward after the previous stage's activation arrives, a backward after the next stage's
gradient, and a rank's sends to one peer one after another) bounds the makespan. For every schedule option, every
boundary b and each of a few weights of b's transfers (`stream_paths.WEIGHTS`: an eighth of a microbatch's compute
to a link a thousand times slower), the longest path
gives its counts n_F, n_I, n_W of each rank's ops and n_b of b-transfers, and with F, I, W, C one layer's times
and v_o the option's chunks per rank:
    Tpipe >= sum_j (n_F[j] F + n_I[j] I + n_W[j] W) / (C v_o) Cst[j] + n_b (lat[b] + tx[b])          (stream_path)
It covers what the steady chain leaves out: under 1F1B and ZB-H1 rank b + 1 runs p - 2 - b warm-up forwards before
its first backward, so p - 1 - b forwards cross b before the first gradient, then the m gradients one after another,
and while forwards remain every two microbatches add the forward and backward of ranks b and b + 1 (generated seed
27, ZB-H1 with a 100 Gb/s link at boundary 7 of 16: MILP 5.81 s against a 6.50 s replay, now 6.48 s); ZB-V's
warm-up and cool-down sends (generated small seed 13, Mixtral over a 100 Gb/s, 561 km boundary: 0.555 s against
0.672 s, now 0.673 s); GPipe's 2m sends in turn, each paying its latency (seed 12's 1,518 km boundary).
The paths are those of equal stage times; at uneven ones (a stage with the embedding and head, layers that differ
by a chunk, two GPU types) the longest path can be another. Critical paths (`milp.path_cuts`): at an incumbent, the
longest path of its schedule's graph at its own stage times Cst and transfer times lat + tx over every boundary is
a path too, and its row joins the model when Tpipe is below it:
    Tpipe >= sum_j (n_F[j] F + n_I[j] I + n_W[j] W) / (C v_o) Cst[j] + sum_b n_b (lat[b] + tx[b])  (critical_path)
"""

from __future__ import annotations

import math
from collections import Counter

import pyomo.environ as pyo

from scaleacross_milp.costmodel.stream_paths import CriticalPath, stream_paths
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.chosen import chosen_value
from scaleacross_milp.milp.formulation.disjunction import add_rows, choice_lower_bounds
from scaleacross_milp.milp.formulation.layer_kinds import excess_s, excess_terms
from scaleacross_milp.milp.formulation.traffic import add_line_choices, line_rows
from scaleacross_milp.spec.search import Schedule

GB = 1e9
CONTENTION = 0.5
"""The share of a steady transfer that the other boundaries' transfers over its arcs overlap (module docstring)."""


def add_pipeline(m: pyo.ConcreteModel, ctx: ShapeContext, bounds: dict[str, float], cycle_floor_s: float) -> None:
    """Vars Cst, cycle, lat, Tpipe and the pipeline rows (module docstring); `cycle_floor_s` is c0."""
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
        return m.Cst[j] >= ctx.gpu(k).layer.total_s * m.n[j] + excess_s(m, j, ctx.kind_layer_s(k)) + fixed - relax

    m.stage_time = pyo.Constraint(m.J, m.K, rule=stage_rule)
    if not ctx.homogeneous:
        def floor_rule(m, j):
            fixed = chosen_value(m, [min(ctx.stage_fixed_s(j, k, o) for k in ks) for o in ctx.options])
            return m.Cst[j] >= min(ctx.gpu(k).layer.total_s for k in ks) * m.n[j] + fixed

        m.stage_floor = pyo.Constraint(m.J, rule=floor_rule)
    m.cycle_bound = pyo.Constraint(m.J, rule=lambda m, j: m.cycle >= m.Cst[j])
    m.cycle_floor = pyo.Constraint(expr=m.cycle >= cycle_floor_s)
    lam = ctx.routes.latency_s
    m.crossing_latency = pyo.Constraint(
        m.cross_arcs, rule=lambda m, b, k, k2: m.lat[b] >= lam[k, k2] * m.h[b, k, k2]
    )

    big = bounds["pipeline"]
    m.path_big_m = pyo.Param(initialize=2 * big)
    m.critical_path = pyo.ConstraintList()  # filled by milp.path_cuts at incumbents
    options = list(m.O)
    layer = ctx.gpu(ctx.buildings[0]).layer
    beta = [ctx.op_shares[0] if ctx.options[o].has_rank_paths(p) else ctx.options[o].bubble_coefficient(layer)
            for o in options]
    chi = [ctx.options[o].boundary_crossings for o in options]
    omega = [ctx.options[o].wrap_crossings for o in options]
    m.spread = pyo.Var(domain=pyo.NonNegativeReals)
    m.spread_def = pyo.Constraint(expr=m.spread >= sum(m.Cst[j] for j in m.J) - m.cycle)
    m.bubble = pyo.Var(domain=pyo.NonNegativeReals)
    add_rows(m, "bubble_bound", choice_lower_bounds(m.bubble, [(beta, m.spread)], m.u, options, big))
    most = [max(stage_max(j, k) for k in ks) for j in m.J]
    add_rows(m, "bubble_path", [
        m.bubble >= sum(a * m.Cst[j] for j, a in enumerate(stage) if a and j != busiest) - slack * m.cycle
        - (sum(a * most[j] for j, a in enumerate(stage) if j != busiest) * (1 - m.u[o]) if len(options) > 1 else 0)
        for o in options for stage, busiest, slack in ctx.bubble_rows(ctx.options[o])])
    latency = sum(m.lat[b] for b in regular)
    terms = [([2 * c for c in chi], latency)]
    if wrap is not None:
        terms.append(([2 * w for w in omega], m.lat[wrap]))
    m.fill_sends = pyo.Var(domain=pyo.NonNegativeReals)
    m.fill_gathers = pyo.Var(domain=pyo.NonNegativeReals)  # rows in iteration.add_chunk_gather_waits
    unpaired = add_ep_unpaired(m, ctx, options)
    add_rows(m, "makespan", choice_lower_bounds(
        m.Tpipe - mb * m.cycle - m.bubble - m.fill_sends - m.fill_gathers - unpaired, terms, m.u, options, big))
    add_steady_sends(m, ctx, regular, terms, big, bounds["pp_arc"])

    v_shaped = [ctx.options[o].schedule is Schedule.zb_v for o in options]
    looped = [ctx.options[o].steady_state_latency_bound and ctx.options[o].schedule is not Schedule.interleaved
              and not v for o, v in zip(options, v_shaped, strict=True)]
    steady = [2 * c if loop else 0 for loop, c in zip(looped, chi, strict=True)]
    every = sum(m.lat[b] for b in regular)
    rows = []
    for j in range(p - 1):
        downstream = sum(m.Cst[i] for i in range(j, p))
        ahead = sum(m.lat[b] for b in regular if b >= j)
        rows += choice_lower_bounds((p - j) * m.cycle, [([1 if loop else 0 for loop in looped], downstream),
                                                        (steady, ahead)], m.u, options, big)
        if any(v_shaped):  # ZB-V's rows apart, 1F1B's kept as they are; [1:] drops the floor row, (2p - j) cycle >= 0
            rows += choice_lower_bounds((2 * p - j) * m.cycle, [([2 if v else 0 for v in v_shaped], ahead),
                                                                ([2 if v else 0 for v in v_shaped], every)],
                                        m.u, options, big)[1:]
    add_rows(m, "round_trip", rows)
    add_rows(m, "interleaved_round_trip", [row for o in options if ctx.options[o].schedule is Schedule.interleaved
                                           for row in interleaved_round_trips(m, ctx, o, wrap, big)])


def add_ep_unpaired(m: pyo.ConcreteModel, ctx: ShapeContext, options: list[int]):
    """Var ep_unpaired and rows ep_unpaired_bound (0 and none unless some building hides EP time): under
    Training.overlap_moe_expert_parallel_comm the layer times are the merged pairs', and the ops outside them expose
    what a pair hides, h_k per layer on building k's GPUs (GPUCosts.ep_hidden), U_o of a stage's h per microbatch on
    the makespan (`ScheduleOption.unpaired_pairs`):
        ep_unpaired >= U_o (h_k n[j] + h'_k moe_excess[j]) - M (1 - y[j,k]) - M (1 - u[o])
    (M (1 - y) only when GPU types differ; h'_k: an MoE layer's h beyond a dense one's, `layer_kinds`)"""
    hidden = {k: ctx.gpu(k).ep_hidden.total_s for k in ctx.buildings}
    if not any(hidden.values()):
        return 0.0
    hidden_excess = {k: ctx.kind_excess(lambda costs, k=k: costs.building(k).ep_hidden.total_s) for k in ctx.buildings}
    p, most = ctx.shape.pp, ctx.instance.model_spec.layers - ctx.shape.pp + 1
    share = [ctx.options[o].unpaired_pairs(p) for o in options]
    big = most * max(share) * max(hidden[k] + hidden_excess[k].most for k in ctx.buildings)
    m.ep_unpaired = pyo.Var(domain=pyo.NonNegativeReals)
    rows = []
    for j in m.J:
        for k in ctx.buildings[:1] if ctx.homogeneous else ctx.buildings:
            relax = 0 if ctx.homogeneous else big * (1 - m.y[j, k])
            terms = [([u * hidden[k] for u in share], m.n[j]),
                     *excess_terms(m, j, [u * hidden_excess[k] for u in share])]
            rows += choice_lower_bounds(m.ep_unpaired + relax, terms, m.u, options, big)
    add_rows(m, "ep_unpaired_bound", rows)
    return m.ep_unpaired


def interleaved_round_trips(m: pyo.ConcreteModel, ctx: ShapeContext, o: int, wrap: int | None, big: float) -> list:
    """Rows interleaved_round_trip of interleaved option o (module docstring), off unless u[o] = 1; each row's
    terms are gathered per rank and per boundary first (p v virtual stages fold onto p ranks)."""
    p, v = ctx.shape.pp, ctx.options[o].chunks
    layer = ctx.gpu(ctx.buildings[0]).layer
    phi, beta = layer.forward_s / layer.total_s, 1 - layer.forward_s / layer.total_s

    def hop(s: int):
        """Latency of the hop between virtual stages s and s + 1 (either direction)."""
        rank = s % p
        return m.lat[rank] if rank < p - 1 else m.lat[wrap]

    rows = []
    for j in range(p):
        warmup = 2 * (p - j - 1) + (v - 1) * p + ctx.options[o].merged
        for c in range(v):
            forward, backward = range(c * p + j, p * v), range((v - 1 - c) * p + j, p * v)
            stages: Counter[int] = Counter()
            hops: Counter[int] = Counter()
            for s in forward:
                stages[s % p] += phi / v
            for s in backward[1:]:
                stages[s % p] += beta / v
            for s in (*forward[:-1], *backward[:-1]):
                hops[s] += 1
            folded: Counter[int] = Counter()
            for s, count in hops.items():
                folded[s % p] += count
            need = sum(coef * m.Cst[i] for i, coef in stages.items()) + sum(
                count * hop(i) for i, count in folded.items())
            rows.append(warmup / v * m.cycle + phi * m.Cst[j] / v >= need - big * (1 - m.u[o]))
    return rows


def steady_chain(ctx: ShapeContext, o: int, b: int) -> tuple[float, float, int]:
    """(a_o, c_o, K_{o,b}) of the steady-send chain across boundary b under option o (module docstring)."""
    layer = ctx.gpu(ctx.buildings[0]).layer
    f, i, w = layer.forward_s, layer.backward_input_s, layer.backward_weight_s
    p, mb, schedule = ctx.shape.pp, ctx.shape.microbatches, ctx.options[o].schedule
    count = max(0, mb - 2 * math.ceil((p - 1 - b) / 2))
    if schedule is Schedule.one_f_one_b:
        return 0.5, 0.5, count
    if schedule is Schedule.zb_h1:
        return 0.5, (1 - w / layer.total_s) / 2, count
    if schedule is Schedule.zb_v:
        share = (1 - (w + min(f, i)) / (2 * layer.total_s)) / 2
        return share, share, max(0, mb - 2)
    return 0.0, 0.0, 0


def add_steady_sends(m: pyo.ConcreteModel, ctx: ShapeContext, regular: list[int], terms: list, big: float,
                     most_gb: float) -> None:
    """Vars tx[b], steady[b] and the rows steady_xfer, steady_excess, steady_makespan (module docstring); `most_gb`
    bounds an arc's pipeline GB per microbatch."""
    options = list(m.O)
    chains = {b: [steady_chain(ctx, o, b) for o in options] for b in regular}
    if not regular:
        return
    act_gb = ctx.costs.p2p_bytes * ctx.shape.ep / GB
    add_line_choices(m, ctx)
    m.tx = pyo.Var(regular, domain=pyo.NonNegativeReals)
    rows = []
    for i in range(len(ctx.routes.links)):
        for d in (1, -1):
            lanes = ctx.routes.lanes((i, d))
            for b in regular:
                loads = {q: (act_gb * sum(m.f[b, s, t] + m.f[b, t, s] for s, t in pairs),
                             sum(m.h[b, s, t] + m.h[b, t, s] for s, t in pairs)) for q, pairs in lanes.items()}
                rows += line_rows(m, ctx, "pp", (i, d), m.tx[b], loads, act_gb, most_gb,
                                  2 * max(map(len, lanes.values()), default=0))
    add_rows(m, "steady_xfer", rows)
    m.txc = pyo.Var(regular, domain=pyo.NonNegativeReals)  # its contention rows: `add_steady_contention`
    m.txc_own = pyo.Constraint(regular, rule=lambda m, b: m.txc[b] >= m.tx[b])
    m.steady = pyo.Var(regular, domain=pyo.NonNegativeReals)
    excess, makespan = [], []
    for b, chain in chains.items():
        a, c, count = zip(*chain, strict=True)
        on = [1.0 if k else 0.0 for k in count]
        excess += choice_lower_bounds(m.steady[b] + m.cycle, [
            (a, m.Cst[b]), (c, m.Cst[b + 1]), (on, m.lat[b] + m.txc[b])], m.u, options, big)
        makespan += choice_lower_bounds(
            m.Tpipe - ctx.shape.microbatches * m.cycle - m.bubble - m.fill_sends - m.fill_gathers,
            [*terms, (count, m.steady[b])], m.u, options, big)
    add_rows(m, "steady_excess", excess)
    add_rows(m, "steady_makespan", makespan)
    add_rows(m, "stream_path", stream_path_rows(m, ctx, regular))


def stream_path_arguments(ctx: ShapeContext) -> list[tuple[Schedule, int, int, int, bool]]:
    """The `costmodel.stream_paths` arguments of ctx's stream_path rows, one per schedule option; none in one
    building: no send crosses, and a path of ops alone longer than the bubble rows (stages a few per cent apart) is
    cut at the incumbent (`milp.path_cuts`)."""
    if len(ctx.buildings) < 2:
        return []
    return [(option.schedule, ctx.shape.pp, ctx.shape.microbatches, option.chunks, option.merged)
            for option in ctx.options]


def bubble_s(ctx: ShapeContext, o: int, stage_s: list[float], cycle_s: float) -> float:
    """The bubble the rows bubble_bound and bubble_path give option o at stage times `stage_s` (Cst) and cycle
    `cycle_s`: max(0, the largest right side of its rank paths' rows), or beta_o (sum_j Cst[j] - cycle)."""
    rows = ctx.bubble_rows(ctx.options[o])
    if rows:
        return max(0.0, *(sum(a * s for j, (a, s) in enumerate(zip(stage, stage_s, strict=True)) if j != busiest)
                          - slack * cycle_s for stage, busiest, slack in rows))
    return max(0.0, ctx.options[o].bubble_coefficient(ctx.gpu(ctx.buildings[0]).layer) * (sum(stage_s) - cycle_s))


def stream_path_rows(m: pyo.ConcreteModel, ctx: ShapeContext, regular: list[int]) -> list:
    """Rows stream_path (module docstring): per option o, boundary b and path of `costmodel.stream_paths`,
    Tpipe >= sum_j (n_F F + n_I I + n_W W) / (C v_o) Cst[j] + n_b (lat[b] + tx[b]), off unless u[o] = 1."""
    return [m.Tpipe >= path_ops_s(m, ctx, o, path.ops) + path.crossings * (m.lat[b] + m.tx[b]) - option_off(m, o)
            for o, arguments in enumerate(stream_path_arguments(ctx))
            for b in regular for path in stream_paths(*arguments)[b]]


def critical_path_row(m: pyo.ConcreteModel, ctx: ShapeContext, o: int, path: CriticalPath,
                      holders: list[str] | None = None):
    """Row critical_path (module docstring) for a path of option o's graph with its transfers over every boundary:
    Tpipe >= sum_j (n_F F + n_I I + n_W W) / (C v_o) Cst[j] + sum_b n_b (lat[b] + tx[b]), off unless u[o] = 1.
    With `holders` (stage j's one building at the point cut), each stage's ops at its own GPU type's shares of a
    layer (`ShapeContext.layer_shares`), off where a stage leaves its holder when the types' shares differ:
    - M sum_j (1 - y[j, holders[j]])."""
    transfers = sum(n * crossing_s(m, b) for b, n in enumerate(path.crossings) if n)
    shares = [ctx.layer_shares(k) for k in holders] if holders else None
    moved = (m.path_big_m * sum(1 - m.y[j, k] for j, k in enumerate(holders))
             if holders and len({ctx.layer_shares(k) for k in ctx.buildings}) > 1 else 0)
    return m.Tpipe >= path_ops_s(m, ctx, o, path.ops, shares) + transfers - option_off(m, o) - moved


def crossing_s(m: pyo.ConcreteModel, b: int):
    """lat[b] + tx[b]: one microbatch's crossing of boundary b (each term where the model has it; 0 for a boundary
    no building pair splits)."""
    latency = m.lat[b] if b in m.B else 0
    return latency + (m.tx[b] if hasattr(m, "tx") and b in m.tx else 0)


def path_ops_s(m: pyo.ConcreteModel, ctx: ShapeContext, o: int, ops: tuple[tuple[int, int, int], ...],
               shares: list[tuple[float, float, float]] | None = None):
    """sum_j (n_F F + n_I I + n_W W) / (C v_o) Cst[j]: a path's ops, each its share of its stage's time per
    microbatch over option o's chunks (`ShapeContext.path_multiples`; `shares` per stage, else `op_shares`)."""
    return sum(a * m.Cst[j] for j, a in enumerate(ctx.path_multiples(ops, ctx.options[o].chunks, shares)) if a)


def option_off(m: pyo.ConcreteModel, o: int):
    """M (1 - u[o]) with the path rows' M (twice the pipeline bound), 0 when o is the only option."""
    return 0 if len(m.O) == 1 else m.path_big_m * (1 - m.u[o])


def add_steady_contention(m: pyo.ConcreteModel, ctx: ShapeContext, big: float) -> None:
    """Vars route_xfer, txc_cap and the rows route_xfer_bound, steady_contended, steady_contended_cap (module
    docstring; txc and txc_own: `add_steady_sends`), once `traffic` has set xfer; none without steady sends. `big`:
    the cycle's bound, above every arc's xfer (link_cycle) and so above the rows' right sides off their choice."""
    if not hasattr(m, "txc"):
        return
    routes = {pair: arcs for pair, arcs in ctx.routes.arcs.items() if arcs and all(k in m.K for k in pair)}
    m.route_xfer = pyo.Var(list(routes), domain=pyo.NonNegativeReals)
    m.route_xfer_bound = pyo.Constraint([(*pair, *arc) for pair, arcs in routes.items() for arc in arcs],
                                        rule=lambda m, s, t, i, d: m.route_xfer[s, t] >= m.xfer[i, d])
    m.txc_cap = pyo.Var(list(m.txc), domain=pyo.Binary)
    m.steady_contended_cap = pyo.Constraint(
        list(m.txc), rule=lambda m, b: m.txc[b] >= (1 + CONTENTION) * m.tx[b] - big * (1 - m.txc_cap[b]))
    options = list(m.O)
    classes = {chi: [o for o in options if ctx.options[o].boundary_crossings == chi] for chi in
               sorted({ctx.options[o].boundary_crossings for o in options})}
    offs = {chi: big * (1 - sum(m.u[o] for o in members)) if len(classes) > 1 else 0.0
            for chi, members in classes.items()}
    rows = []
    for b in m.txc:
        for s, t in routes:
            if (b, s, t) not in m.h:
                continue
            for chi, off in offs.items():
                rows.append(m.txc[b] >= m.tx[b] + CONTENTION * (m.route_xfer[s, t] - chi * m.tx[b])
                            - big * (1 - m.h[b, s, t]) - big * m.txc_cap[b] - off)
    add_rows(m, "steady_contended", rows)
