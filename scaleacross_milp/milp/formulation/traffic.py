"""Inter-building traffic: pipeline sends and DP synchronisation on every directed link (arc), transports.

Units: GB and seconds. A = activation GB one cell sends per microbatch across a boundary (ep pipelines).
Pipeline traffic per microbatch on arc a (routes R(s,t) are lowest-latency paths):
    pp[a] >= A sum_{(s,t): a in R(s,t)} sum_b c_o(b) (f[b,s,t] + f[b,t,s]) - M (1 - u[o])
    (forward activations s->t, and gradients s->t of pipelines running t->s; c_o = chi_o, or omega_o at the wrap)
DP synchronisation per step: building s owns the share x[j,s]/D of stage j's reduced state, whose gradient GB
per cell is S_j = g n[j] + e_j (g one layer's, e_j the embedding on stage 0 and the LM head on the stage the
chosen schedule o runs it on, `ShapeContext.head_stage`: rank 0 under ZB-V's V map, else p-1), so with
shared[s,t] >= sum_j (g n[j] x[j,s] y[j,t] + e_j x[j,s] y[j,t]) - M (1 - u[o]) (exact products, continuous,
below; `disjunction` rows over the options, shared_def):
    dp[a] >= sum_{(s,t): a in R(s,t)} (G_v shared[s,t] + Q_v shared[t,s]) / D - M (1 - w[v])
    (gathers: s sends its share to every holder t; reductions: s sends t's share to owner t), G_v / Q_v the
    gather / reduce volumes of variant v in gradient-sized units. The products, each only bounded below (they
    only raise link loads, so they are exact at an optimum), with n[j] = 1 + sum_b 2^b nbit[j,b] (binary; the MoE
    layers of `layer_kinds` read the bits too):
    r[j,s,t]   >= x[j,s] - X_s (1 - y[j,t])                    (= x[j,s] y[j,t], model component r_xy)
    lx[j,s,b]  >= x[j,s] - X_s (1 - nbit[j,b])                 (= x[j,s] nbit[j,b], lx_bit)
    lc[j,s]     = x[j,s] + sum_b 2^b lx[j,s,b]                 (= n[j] x[j,s], layer-cells, lc_def)
    lr[j,s,t]  >= lc[j,s] - N X_s (1 - y[j,t]),  lr >= r       (= n[j] x[j,s] y[j,t], lr_y and lr_r; N = L-p+1)
When the bytes move (`timed_volumes`, as the replay moves them): the reduction and DDP / HSDP's gradient
all-gather (G_end = G_v, else 0) at the end of the step; FSDP's parameter gathers before the op that needs them,
prefetched behind compute, G_mb per microbatch (2 beta / grad bytes under reshard-after-forward, 0 without), and
the first one (G_1 = beta / grad bytes) before stage 0's first forward, with nothing to hide behind:
    dpe[a]  >= sum_{(s,t): a in R(s,t)} (G_end shared[s,t] + Q_v shared[t,s]) / D - M (1 - w[v])  (dpe_load)
    gxm[a]  >= sum_{(s,t): a in R(s,t)} G_mb shared[s,t] / D - M (1 - w[v]),   gx1[a] the same with G_1, shared0
    (shared0_first, stage 0's first chunk, under options of several chunks per rank: `add_stage_gb`), and gxa[a]
    with every stage's first gathers (shared, or shared_first) under the variants that gather once
    (`gathered_once`), which all start with the step and share the links
An HSDP shard group straddling a stage's two buildings (`choices`) gathers its parameters as FSDP does: dp, gxm and
gx1 add sum_{(s,t): a in R(s,t)} G' straddled_gb[s,t] (straddled_gb0 or straddled_gb0_first in gx1; G' =
`volumes.straddle_volumes`' per step, per microbatch and first gathers; `add_straddle_state`), zero unless the chosen
variant is HSDP.
A link's time is concave in the units that cross it (`costmodel.network.price_lines`): line k of link l under
transport t prices L GB made of units of at most u GB as (a_k u + b_k L) / c_l; `line_rows` picks a line per arc
and load family (binaries sel, line_pick; line 0, a lone unit's, b_0 L / c_l, needs none). Rows link_time
(T_f(L; u): that price in family f = pp, dp or dp0, u the unit of each load):
    xfer[a] >= T_pp(pp[a]; A chi_o)       one microbatch's sends      link_busy:  busy[a] >= m xfer[a] + bdp[a]
    bdp[a]  >= T_dp(dp[a]; S (G_v + Q_v) / D)                         the link carries one iteration's bytes
    (S (G_v + Q_v) / D: dp_unit, the chosen variant's unit over the stages, `add_dp_units`: a DP unit is one
    stage cell's exchange, so its GB follow that stage's own layers; stage 0's rows use S_0 = g n[0] + e_0)
    gxt[a]  >= T_dp(gxm[a]; S G_mb / D),   gcyc[a] >= xfer[a] + gxt[a] (link_gathers),  cycle >= gcyc[a]
                                  (link_cycle; cycle >= xfer[a] without FSDP, and with one stage, whose gathers
                                  `iteration`'s accumulation_gather_wait times: the first is the start's)
    Tpipe   >= m (xfer[l,+] + xfer[l,-]) + sum_j Cst[j]   under GPipe (gpipe_sends): its forward phase sends every
                                  microbatch one way, its backward phase the other way, one after the other (a
                                  rank's sends to a peer run in order), and each stage's forward and backward of one
                                  microbatch lie outside the link's busy run (before the first send or after the last)
    fill    >= sum_a xfer[a]      the first microbatch's sends (forward arcs) and the last one's (backward arcs)
                                  are on the critical path of fill and drain
    dpx + drain >= T_dp(dpe[a]; S (G_end + Q_v) / D),   dpx >= 2 span_latency[j] (dp_latency), where
    (through end_time[a] >= T_dp(dpe[a]; ...), dpx + drain >= end_time[a], where `regathers_behind_reductions`)
    span_latency[j] >= lambda[s,t] (y[j,s] + y[j,t] - 1) (span_latency_bound): the longest route stage j spans
    dpx0    >= T_dp0(dpe0[a]; ...),   first_gather >= T_dp0(gx1[a]; S G_1 / D)   (`iteration`: exposed at the start)
    first_gathers >= T_dp0(gxa[a]; S G_1 / D)   (p > 1: every stage's, done when the last stage's first forward
                                  may start at the latest, `iteration.add_shared_start`)
    chunk_gathers >= T_dp0(gxc[a]; S G_1 / D)   (options of c > 1 chunks per rank: gxc[a] the same as gxa[a] less
                                  the embedding e_first r[0,s,t], every rank's gathers of a later chunk, which the
                                  first microbatch meets at each chunk boundary, `iteration.add_chunk_gather_waits`)
(busy splits into pipeline and DP parts: the time is subadditive, t(n + n') <= t(n) + t(n')). Where routes whose
connections open different queue pairs cross an arc (`RouteTable.lanes`), every load above is split by class q
(`add_lane_loads`: `name`_lane[a,q], summing to the arc's load) and each class priced on its own lines, the arc's
time the sum of the classes' (`line_rows`), subadditive again.
dpx and dpx0 count from the end of stage 0's last backward op, when stage 0's own share (dpe0, dpx0: the same rows
over j = 0 only) starts: no backward can hide it (`iteration`). Stage j >= 1 ends its last backward H_j >= H_1
earlier (the pipeline drains towards rank 0) and its reduction starts then, so the link, working on stage j's
traffic t_j from E_0 - H_j on, is done by E_0 + max_j (T(t_0 + ... + t_j) - H_j) <= E_0 + max(T(t_0), T(sum_j t_j) -
H_1): dpx >= dpx0 (`iteration`) and the row above, with drain <= H_1 (`add_drain`).
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.choices import straddle_share
from scaleacross_milp.milp.formulation.disjunction import add_rows, choice_lower_bounds
from scaleacross_milp.milp.formulation.layer_kinds import excess_terms
from scaleacross_milp.milp.volumes import (
    GB,
    cross_phases,
    cross_volumes,
    drain_layer_s,
    drain_share,
    fixed_grad_gb,
    gathers_every_cycle,
    layer_grad_gb,
    pipeline_unit_gb,
    shard_group_cells,
    straddle_volumes,
    timed_volumes,
)
from scaleacross_milp.spec.search import DPMode, Schedule


def add_shared_state(m: pyo.ConcreteModel, ctx: ShapeContext, pairs: list[tuple[str, str]]) -> None:
    """Var shared[s,t] >= sum_j S_j x[j,s] y[j,t]: gradient GB per cell of the state building s owns and t holds,
    with each stage's real layers n[j] (module docstring: binary expansion of n, products bounded below) and the
    LM head on the chosen option's head stage (rows over the options, M = (g L + e_first + e_head) max_k X_k);
    shared0[s,t] the same for stage 0 alone."""
    p, layers = ctx.shape.pp, ctx.instance.model_spec.layers
    most = layers - p + 1
    cap = {k: ctx.max_cells(k) for k in m.K}
    m.NB = pyo.Set(initialize=range((most - 1).bit_length()))
    m.nbit = pyo.Var(m.J, m.NB, domain=pyo.Binary)
    m.nbit_def = pyo.Constraint(m.J, rule=lambda m, j: m.n[j] == 1 + sum(2**b * m.nbit[j, b] for b in m.NB))
    m.lx = pyo.Var(m.J, m.K, m.NB, domain=pyo.NonNegativeReals)
    m.lx_bit = pyo.Constraint(m.J, m.K, m.NB, rule=lambda m, j, s, b: m.lx[j, s, b]
                              >= m.x[j, s] - cap[s] * (1 - m.nbit[j, b]))
    m.lc = pyo.Var(m.J, m.K, domain=pyo.NonNegativeReals)
    m.lc_def = pyo.Constraint(m.J, m.K, rule=lambda m, j, s: m.lc[j, s]
                              == m.x[j, s] + sum(2**b * m.lx[j, s, b] for b in m.NB))
    m.r = pyo.Var(m.J, pairs, domain=pyo.NonNegativeReals)
    m.r_xy = pyo.Constraint(m.J, pairs, rule=lambda m, j, s, t: m.r[j, s, t]
                            >= m.x[j, s] - cap[s] * (1 - m.y[j, t]))
    m.lr = pyo.Var(m.J, pairs, domain=pyo.NonNegativeReals)
    m.lr_y = pyo.Constraint(m.J, pairs, rule=lambda m, j, s, t: m.lr[j, s, t]
                            >= m.lc[j, s] - most * cap[s] * (1 - m.y[j, t]))
    m.lr_r = pyo.Constraint(m.J, pairs, rule=lambda m, j, s, t: m.lr[j, s, t] >= m.r[j, s, t])
    add_stage_gb(m, ctx, pairs, "shared", m.lr, m.r, max(cap.values()), first_chunk_parts(ctx, shared_start(ctx)))
    if shard_group_cells(ctx):
        add_straddle_state(m, ctx, pairs)


def splits_stages(ctx: ShapeContext) -> bool:
    """Whether a stage can span buildings (more than one cell per stage); the terms of the DP state's timing that
    only a split stage moves (the first gathers' sharing, a chunk's share) are left out of the model otherwise."""
    return ctx.shape.cells_per_stage > 1


def first_chunk_suffixes(ctx: ShapeContext) -> tuple[str, str]:
    """The suffixes of the state vars (`add_stage_gb`) that the first gathers move, every stage's and stage 0's:
    ("_first", "0_first") (each rank's first model chunk) when some option runs several chunks per rank and a stage
    can span buildings, else ("", "0") (whole stages)."""
    chunked = any(option.chunks > 1 for option in ctx.options) and splits_stages(ctx)
    return ("_first", "0_first") if chunked else ("", "0")


def first_chunk_parts(ctx: ShapeContext, every_stage: bool) -> tuple[str, ...]:
    """The first-chunk state vars `add_stage_gb` adds beside the whole stages': stage 0's where its first gather is
    a chunk's (`first_chunk_suffixes`), and every stage's too when `every_stage` (the `shared_start` loads)."""
    if first_chunk_suffixes(ctx) == ("", "0"):
        return ()
    return ("0_first", "_first") if every_stage else ("0_first",)


def regathers_behind_reductions(ctx: ShapeContext) -> bool:
    """Whether the model prices the re-gathers that share a link with the end-of-step reductions
    (`iteration.add_dp_overlap`, dp_regather_overlap): parameters cross buildings every pass under some variant and
    some option runs re-gathers after its first chunk's reduction starts (`ScheduleOption.regathers_behind_suffixes`);
    each arc's end-of-step time is then a var of its own, end_time[a] <= dpx + drain (end_arc)."""
    return splits_stages(ctx) and gathers_every_cycle(ctx) and any(
        any(option.regathers_behind_suffixes(ctx.shape.pp)) for option in ctx.options)


def gathered_once(ctx: ShapeContext) -> list[bool]:
    """Per DP variant: its parameters cross buildings once, before the first ops (fsdp-no-reshard, zero1 under
    overlap_param_gather), not before every pass (FSDP: those gathers are the first microbatch's, which the cycle's
    link rows already count, `link_cycle`)."""
    volumes = [timed_volumes(ctx, v) for v in range(len(ctx.variants))]
    return [bool(first) and not per_mb for _, per_mb, first in volumes]


def shared_start(ctx: ShapeContext) -> bool:
    """Whether the model prices every stage's first gathers on the links together (gxa, first_gathers,
    `iteration.add_shared_start`): more than one stage, stages that can span buildings and a variant that gathers once
    (`gathered_once`)."""
    return ctx.shape.pp > 1 and splits_stages(ctx) and any(gathered_once(ctx))


def chunk_gathers_cross(ctx: ShapeContext) -> bool:
    """Whether the model prices the later chunks' first gathers across buildings (gxc, chunk_gathers,
    `iteration.add_chunk_gather_waits`): a `shared_start` and some option of several chunks per rank."""
    return shared_start(ctx) and any(option.chunks > 1 for option in ctx.options)


def add_stage_gb(m: pyo.ConcreteModel, ctx: ShapeContext, pairs: list[tuple[str, str]], name: str, lr: pyo.Var,
                 r: pyo.Var, most_r: float, first_chunks: tuple[str, ...] = ()) -> None:
    """Vars `name`[s,t] >= sum_j S_j r[j,s,t] (S_j = g n[j] + e_j, with lr = n r) and `name`0[s,t] the same for
    stage 0 alone, the LM head on the chosen option's head stage (rows `name`_def, `name`0_def over the options,
    M = (g L + e_first + e_head) `most_r`, `most_r` the most r reaches). Where some option runs c_o > 1 chunks per
    rank, the suffixes in `first_chunks` (`first_chunk_parts`): `name`_first[s,t] >= sum_j (g n[j] / c_o r[j,s,t] +
    [c_o = 1] e_head,j r[j,s,t]) + e_first r[0,s,t], `name`0_first the same for stage 0: each rank's first chunk
    (rank 0's is virtual stage 0, with the embedding; the head is on a later chunk of a rank holding several), whose
    gather alone the start waits for (`costmodel.dp.start_gather_share`; the later chunks' gathers run behind the
    first microbatch's forwards, `iteration.add_chunk_gather_waits`). Generated medium seed 76's interleaved v = 4
    plan, its stage 0 split over two buildings, was priced with all four chunks' gathers at the start, 136 ms against
    the replay's 37 ms (8.6 % above its replay, 3.8 % with the first chunk's)."""
    layers = ctx.instance.model_spec.layers
    g, first, head = layer_grad_gb(ctx), ctx.costs.grad_bytes_fixed_first / GB, ctx.costs.grad_bytes_fixed_last / GB
    options = list(m.O)
    heads = sorted({ctx.head_stage(o) for o in ctx.options})
    big = (g * layers + first + head) * most_r

    def rows(lhs, stages: list[int], s: str, t: str, first_chunk: bool) -> list:
        chunks = [ctx.options[o].chunks if first_chunk else 1 for o in options]
        terms = [([g / c for c in chunks], sum(lr[j, s, t] for j in stages)), ([first] * len(options), r[0, s, t])]
        terms += [([head if ctx.head_stage(ctx.options[o]) == j and chunks[o] == 1 else 0.0 for o in options],
                   r[j, s, t]) for j in heads if j in stages]
        return choice_lower_bounds(lhs, terms, m.u, options, big)

    parts = [("", list(m.J), False), ("0", [0], False)]
    parts += [(suffix, [0] if suffix.startswith("0") else list(m.J), True) for suffix in first_chunks]
    for suffix, stages, first_chunk in parts:
        var = pyo.Var(pairs, domain=pyo.NonNegativeReals)
        setattr(m, name + suffix, var)
        add_rows(m, f"{name}{suffix}_def",
                 [row for s, t in pairs for row in rows(var[s, t], stages, s, t, first_chunk)])


def add_straddle_state(m: pyo.ConcreteModel, ctx: ShapeContext, pairs: list[tuple[str, str]]) -> None:
    """Var straddled_gb[s,t] >= sum_j S_j a_j,s y[j,t] (`add_stage_gb`): gradient GB of one copy of the straddling
    shard groups' parameters that building s holds and t, the group's other building, gathers, a_j,s the share
    `choices.straddle_share` (in [0, 1)); straddled_gb0 for stage 0. The products as for `shared` (bounded below):
    sx[j,s,b] >= a_j,s - (1 - nbit[j,b]) (straddle_bit), sc[j,s] = a_j,s + sum_b 2^b sx[j,s,b] (= n[j] a_j,s,
    straddle_layers), sr[j,s,t] >= a_j,s - (1 - y[j,t]) (straddle_xy), slr[j,s,t] >= sc[j,s] - N (1 - y[j,t]) and
    slr >= sr (straddle_lr_y, straddle_lr_r)."""
    most = ctx.instance.model_spec.layers - ctx.shape.pp + 1
    m.sx = pyo.Var(m.J, m.K, m.NB, domain=pyo.NonNegativeReals)
    m.straddle_bit = pyo.Constraint(m.J, m.K, m.NB, rule=lambda m, j, s, b: m.sx[j, s, b]
                                    >= straddle_share(m, ctx, j, s) - (1 - m.nbit[j, b]))
    m.sc = pyo.Var(m.J, m.K, domain=pyo.NonNegativeReals)
    m.straddle_layers = pyo.Constraint(m.J, m.K, rule=lambda m, j, s: m.sc[j, s]
                                       == straddle_share(m, ctx, j, s) + sum(2**b * m.sx[j, s, b] for b in m.NB))
    m.sr = pyo.Var(m.J, pairs, domain=pyo.NonNegativeReals)
    m.straddle_xy = pyo.Constraint(m.J, pairs, rule=lambda m, j, s, t: m.sr[j, s, t]
                                   >= straddle_share(m, ctx, j, s) - (1 - m.y[j, t]))
    m.slr = pyo.Var(m.J, pairs, domain=pyo.NonNegativeReals)
    m.straddle_lr_y = pyo.Constraint(m.J, pairs, rule=lambda m, j, s, t: m.slr[j, s, t]
                                     >= m.sc[j, s] - most * (1 - m.y[j, t]))
    m.straddle_lr_r = pyo.Constraint(m.J, pairs, rule=lambda m, j, s, t: m.slr[j, s, t] >= m.sr[j, s, t])
    add_stage_gb(m, ctx, pairs, "straddled_gb", m.slr, m.sr, 1.0, first_chunk_parts(ctx, False))


LINE_FAMILIES = ("pp", "dp", "dp0")
"""Loads that pick their price line apart (`line_rows`): pipeline sends, DP traffic, stage 0's DP traffic."""


def add_line_choices(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    """Binaries sel[f,i,d,q,t,k]: load family f of queue-pair class q (`RouteTable.lanes`) on arc (i, d) is priced by
    line k >= 1 of link i under transport t for that class (`ShapeContext.price_lines`), at most one line per family,
    arc and class, only under the chosen transport:
        sum_k sel[f,i,d,q,t,k] <= z[i,t]                                                     (line_pick)
    none picked: line 0 (no intercept). Once per model (the pipeline's steady sends and `add_traffic` share them),
    with the VarList lane_time of the classes' own times on arcs several classes cross (`line_rows`)."""
    if hasattr(m, "sel"):
        return
    links = ctx.routes.links
    picks = [(f, i, d, q, t) for f in LINE_FAMILIES for i in range(len(links)) for d in (1, -1)
             for q in ctx.routes.lanes((i, d)) for t in links[i].transports if len(ctx.price_lines[i, t, q]) > 1]
    m.SEL = pyo.Set(initialize=[(*pick, k) for pick in picks
                                for k in range(1, len(ctx.price_lines[pick[1], pick[4], pick[3]]))], dimen=6)
    m.sel = pyo.Var(m.SEL, domain=pyo.Binary)
    m.line_pick = pyo.Constraint(picks, rule=lambda m, f, i, d, q, t: sum(
        m.sel[f, i, d, q, t, k] for k in range(1, len(ctx.price_lines[i, t, q]))) <= m.z[i, t])
    m.lane_time = pyo.VarList(domain=pyo.NonNegativeReals)


def line_rows(m: pyo.ConcreteModel, ctx: ShapeContext, family: str, arc: tuple[int, int], lhs,
              lanes: dict[int, tuple[object, object]], unit_gb, most_gb: float, on_most: float = 1.0,
              unit_most: float | None = None, carries=None) -> list:
    """lhs >= the time of the loads `lanes` = {q: (load, on)} on arc (i, d): load GB of queue-pair class q
    (`RouteTable.lanes`) made of crossing units of at most `unit_gb` GB each, priced by line k of class q under the
    chosen transport t (b_k, a_k of `ShapeContext.price_lines`, c the link's bytes/s):
        lhs >= (a_k u on + b_k load) / c - M (1 - sel[f,i,d,q,t,k])                          k >= 1
        lhs >= b_0 load / c - M (1 - z[i,t] + sum_k sel[f,i,d,q,t,k])                        line 0
        lhs >= sum_q load_q / (c max_t eta[i,t])                                             (choice-free floor)
    With several classes on the arc each prices its own load into a lane_time variable tau_q and lhs >= sum_q tau_q:
    a class's units open their own subflows, and the link's time is subadditive (collisions even out and loss windows
    shrink with more subflows), so the sum is above what the classes take together, and exact with one class.
    `on` (at most `on_most`) scales the intercept: a load that may be zero while the family's line is picked
    multiplies it by a binary that is 1 whenever the load is positive, a unit whose GB depend on the chosen schedule
    by sum_o (c_o / c_max) u[o]. `unit_gb` may be an expression (DP units grow with the stage's layers) at most
    `unit_most` (default `unit_gb`). M: the largest line at `most_gb`. An arc no route between the shape's buildings
    uses carries nothing: no rows. Where one unit's own NICs cannot fill the link (`ShapeContext.nic_floors`: K above
    b_0 for every class on the arc, K their least) and the caller passes the arc's binary `carries` (the DP loads,
    whose units are always on: sum_q load_q <= most carries; one binary per arc for all its DP loads, which cross
    together: a split stage's state; pipeline sends pass none, one microbatch's activations the replay overlaps
    with compute), a load that crosses takes at least its units' NIC time:
        lhs >= K u / c - K u_most (1 - carries) / c - K u_most (1 - z[i,t]) / c                   (nic floor)"""
    if not lanes:
        return []
    i, d = arc
    link = ctx.routes.links[i]
    bare = GB / link.capacity_byte_s
    top = unit_gb if unit_most is None else unit_most
    total = sum(load for load, _ in lanes.values())
    rows = [lhs >= total * bare / max(ctx.efficiency[i, t] for t in link.transports)]
    times = {q: lhs for q in lanes} if len(lanes) == 1 else {q: m.lane_time.add() for q in lanes}
    if len(lanes) > 1:
        rows.append(lhs >= sum(times.values()))
    for q, (load, on) in lanes.items():
        for t in link.transports:
            lines = ctx.price_lines[i, t, q]
            big = bare * max(line.intercept * top * on_most + line.slope * most_gb for line in lines)
            picked = [m.sel[family, i, d, q, t, k] for k in range(1, len(lines))]
            rows.append(times[q] >= lines[0].slope * bare * load - big * (1 - m.z[i, t] + sum(picked)))
            rows += [times[q] >= (line.intercept * unit_gb * on + line.slope * load) * bare - big * (1 - pick)
                     for line, pick in zip(lines[1:], picked, strict=True)]
    floors = {t: min(ctx.nic_floors[i, t, q] for q in lanes) for t in link.transports
              if all((i, t, q) in ctx.nic_floors for q in lanes)}
    if floors and carries is not None:
        rows.append(total <= most_gb * carries)
        rows += [lhs >= floor * bare * (unit_gb - top * (1 - carries)) - floor * bare * top * (1 - m.z[i, t])
                 for t, floor in floors.items()]
    return rows


def add_traffic(m: pyo.ConcreteModel, ctx: ShapeContext, bounds: dict[str, float]) -> None:
    links, routes = ctx.routes.links, ctx.routes
    cells, mb = ctx.shape.cells_per_stage, ctx.shape.microbatches
    arcs = [(i, d) for i in range(len(links)) for d in (1, -1)]
    m.A = pyo.Set(initialize=arcs, dimen=2)
    wrap = ctx.shape.pp - 1 if (ctx.shape.pp - 1) in m.B else None
    pairs = [(s, t) for s in m.K for t in m.K if s != t]
    act_gb = ctx.costs.p2p_bytes * ctx.shape.ep / GB

    m.pp = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["pp_arc"]))
    m.dp = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["dp_arc"]))
    m.busy = pyo.Var(m.A, domain=pyo.NonNegativeReals)
    m.xfer = pyo.Var(m.A, domain=pyo.NonNegativeReals)
    m.dpx = pyo.Var(domain=pyo.NonNegativeReals)
    m.drain = pyo.Var(domain=pyo.NonNegativeReals)

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

    def pp_terms(pairs: list[tuple[str, str]]) -> list:
        terms = [(chi, sum(m.cross[pair] for pair in pairs))]
        if wrap is not None:
            terms.append((omega, sum(m.cross_wrap[pair] for pair in pairs)))
        return terms

    m.LANES = pyo.Set(initialize=[(*a, q) for a in arcs if len(routes.lanes(a)) > 1 for q in routes.lanes(a)],
                      dimen=3)
    lanes = {"pp": add_lane_loads(m, ctx, "pp", m.pp, pp_terms, m.u, options, bounds["pp_arc"])}

    add_shared_state(m, ctx, pairs)
    variants = list(m.V)
    gathers = [cross_volumes(ctx, v)[0] / cells for v in variants]
    reduces = [cross_volumes(ctx, v)[1] / cells for v in variants]
    timed = [[volume / cells for volume in timed_volumes(ctx, v)] for v in variants]
    ends, per_mb, firsts = ([t[i] for t in timed] for i in range(3))
    m.dpe = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["dp_arc"]))
    m.dpe0 = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["dp_arc"]))
    straddles = bool(shard_group_cells(ctx))
    s_step, s_mb, s_first = ([volume] * len(variants) for volume in straddle_volumes(ctx))
    streamed = gathers_every_cycle(ctx)
    if streamed:
        m.gxm = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["dp_arc"]))
        m.gcyc = pyo.Var(m.A, domain=pyo.NonNegativeReals)
    m.dpx0 = pyo.Var(domain=pyo.NonNegativeReals)
    m.first_gather = pyo.Var(domain=pyo.NonNegativeReals)
    first_gathers = any(firsts) or straddles
    if first_gathers:
        m.gx1 = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["dp_arc"]))
        if shared_start(ctx):
            m.gxa = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["dp_arc"]))
            m.first_gathers = pyo.Var(domain=pyo.NonNegativeReals)
        if chunk_gathers_cross(ctx):
            m.gxc = pyo.Var(m.A, domain=pyo.NonNegativeReals, bounds=(0, bounds["dp_arc"]))
            m.chunk_gathers = pyo.Var(domain=pyo.NonNegativeReals)

    def owned(pairs: list[tuple[str, str]], zero: str = "") -> object:
        return sum(getattr(m, "shared" + zero)[s, t] for s, t in pairs)

    def owed(pairs: list[tuple[str, str]], zero: str = "") -> object:
        return sum(getattr(m, "shared" + zero)[t, s] for s, t in pairs)

    def straddled(volume: list[float], pairs: list[tuple[str, str]], zero: str = "") -> list:
        return [(volume, sum(getattr(m, "straddled_gb" + zero)[pair] for pair in pairs))] if straddles else []

    dp_terms = {"dp": lambda pairs: [(gathers, owned(pairs)), (reduces, owed(pairs)), *straddled(s_step, pairs)],
                "dpe": lambda pairs: [(ends, owned(pairs)), (reduces, owed(pairs))],
                "dpe0": lambda pairs: [(ends, owned(pairs, "0")), (reduces, owed(pairs, "0"))]}
    if streamed:
        dp_terms["gxm"] = lambda pairs: [(per_mb, owned(pairs)), *straddled(s_mb, pairs)]
    if first_gathers:
        every, stage0 = first_chunk_suffixes(ctx)
        dp_terms["gx1"] = lambda pairs: [(firsts, owned(pairs, stage0)), *straddled(s_first, pairs, stage0)]
        once = [first if gathered else 0.0 for first, gathered in zip(firsts, gathered_once(ctx), strict=True)]
        if hasattr(m, "gxa"):
            dp_terms["gxa"] = lambda pairs: [(once, owned(pairs, every))]
        if hasattr(m, "gxc"):
            embedding = [-ctx.costs.grad_bytes_fixed_first / GB * first for first in once]
            dp_terms["gxc"] = lambda pairs: [(once, owned(pairs, every)),
                                             (embedding, sum(m.r[0, s, t] for s, t in pairs))]
    for name, terms_of in dp_terms.items():
        lanes[name] = add_lane_loads(m, ctx, name, getattr(m, name), terms_of, m.w, variants, bounds["dp_arc"])

    add_line_choices(m, ctx)
    pp_unit = pipeline_unit_gb(ctx)
    crossings = [max(o.boundary_crossings, o.wrap_crossings) for o in ctx.options]
    per_unit = sum(c / max(crossings) * m.u[o] for o, c in enumerate(crossings))  # the chosen option's A chi_o
    dp_unit = add_dp_units(m, ctx)
    m.bdp = pyo.Var(m.A, domain=pyo.NonNegativeReals)
    if regathers_behind_reductions(ctx):
        m.end_time = pyo.Var(m.A, domain=pyo.NonNegativeReals)
    if streamed:
        m.gxt = pyo.Var(m.A, domain=pyo.NonNegativeReals)
    floored = [a for a in arcs if any(key[0] == a[0] for key in ctx.nic_floors)]
    m.carries = pyo.Var(floored, domain=pyo.Binary)
    rows = []
    for a in arcs:
        carries = m.carries[a] if a in floored else None
        times = [("pp", m.xfer[a], "pp", (pp_unit, pp_unit), bounds["pp_arc"], per_unit),
                 ("dp", m.bdp[a], "dp", dp_unit["all"], bounds["dp_arc"]),
                 ("dp", m.end_time[a] if hasattr(m, "end_time") else m.dpx + m.drain, "dpe",
                  dp_unit["end"], bounds["dp_arc"]),
                 ("dp0", m.dpx0, "dpe0", dp_unit["end0"], bounds["dp_arc"])]
        if streamed:
            times.append(("dp", m.gxt[a], "gxm", dp_unit["mb"], bounds["dp_arc"]))
        if first_gathers:
            times.append(("dp0", m.first_gather, "gx1", dp_unit["first0"], bounds["dp_arc"]))
            if hasattr(m, "gxa"):
                times.append(("dp0", m.first_gathers, "gxa", dp_unit["first"], bounds["dp_arc"]))
            if hasattr(m, "gxc"):
                times.append(("dp0", m.chunk_gathers, "gxc", dp_unit["first"], bounds["dp_arc"]))
        for family, lhs, name, (unit, unit_most), most, *on in times:
            loads = {q: (load, on[0] if on else 1.0) for q, load in lanes[name][a].items()}
            rows += line_rows(m, ctx, family, a, lhs, loads, unit, most, unit_most=unit_most,
                              carries=None if family == "pp" else carries)
    add_rows(m, "link_time", rows)
    if hasattr(m, "end_time"):
        m.end_arc = pyo.Constraint(m.A, rule=lambda m, i, d: m.dpx + m.drain >= m.end_time[i, d])
    m.link_busy = pyo.Constraint(m.A, rule=lambda m, i, d: m.busy[i, d] >= mb * m.xfer[i, d] + m.bdp[i, d])
    if streamed:
        m.link_gathers = pyo.Constraint(m.A, rule=lambda m, i, d: m.gcyc[i, d] >= m.xfer[i, d] + m.gxt[i, d])
    cycled = streamed and ctx.shape.pp > 1  # one stage's gathers: `iteration.add_accumulation_gather_waits`
    m.link_cycle = pyo.Constraint(m.A, rule=lambda m, i, d: m.cycle >= (m.gcyc[i, d] if cycled else m.xfer[i, d]))
    gpipe = [1.0 if ctx.options[o].schedule is Schedule.gpipe else 0.0 for o in options]
    if any(gpipe):
        sends = [mb * g for g in gpipe]
        add_rows(m, "gpipe_sends", [row for i in range(len(links)) for row in choice_lower_bounds(
            m.Tpipe - sum(m.Cst[j] for j in m.J), [(sends, m.xfer[i, 1]), (sends, m.xfer[i, -1])], m.u, options,
            2 * bounds["busy"])])
    m.fill_sends_bound = pyo.Constraint(expr=m.fill_sends >= sum(m.xfer[a] for a in arcs))
    lam = routes.latency_s
    add_drain(m, ctx)
    m.span_latency = pyo.Var(m.J, domain=pyo.NonNegativeReals)
    m.span_latency_bound = pyo.Constraint(
        m.J, [(s, t) for s, t in pairs if s < t],
        rule=lambda m, j, s, t: m.span_latency[j] >= lam[s, t] * (m.y[j, s] + m.y[j, t] - 1),
    )
    m.dp_latency = pyo.Constraint(m.J, rule=lambda m, j: (m.dpx0 if j == 0 else m.dpx) >= 2 * m.span_latency[j])
    m.dpx_first = pyo.Constraint(expr=m.dpx >= m.dpx0)


def add_lane_loads(m: pyo.ConcreteModel, ctx: ShapeContext, name: str, load: pyo.Var, terms_of, choice,
                   options: list, big: float) -> dict[tuple[int, int], dict[int, object]]:
    """Rows `name`_load: load[a] >= the option-chosen sum of `terms_of`(pairs) over the pairs whose route uses arc a
    (`choice_lower_bounds`). Where several queue-pair classes cross a (`RouteTable.lanes`), each class q's pairs load
    a Var `name`_lane[a,q] the same way and load[a] = sum_q `name`_lane[a,q] (`name`_lanes), so each class is priced
    at its own subflows (`line_rows`). Returns per arc {q: the class's load}."""
    routes, rows, out = ctx.routes, [], {}
    lane = pyo.Var(m.LANES, domain=pyo.NonNegativeReals, bounds=(0, big))
    setattr(m, f"{name}_lane", lane)
    for a in m.A:
        lanes = routes.lanes(a)
        if len(lanes) > 1:
            for q, pairs in lanes.items():
                rows += choice_lower_bounds(lane[(*a, q)], terms_of(pairs), choice, options, big)
            rows.append(load[a] == sum(lane[(*a, q)] for q in lanes))
            out[a] = {q: lane[(*a, q)] for q in lanes}
        else:
            rows += choice_lower_bounds(load[a], terms_of(routes.pairs_over(a)), choice, options, big)
            out[a] = {q: load[a] for q in lanes}
    add_rows(m, f"{name}_load", rows)
    return out


DP_UNITS = {"all": None, "end": None, "mb": None, "end0": 0, "first": None, "first0": 0}
"""Each DP load's crossing unit (`add_dp_units`) and the stages it covers (None: every stage, 0: stage 0 alone):
all of a step's DP traffic (dp), the end of the step's (dpe, dpe0), a microbatch's gathers (gxm), the first gathers
(gxa, gx1)."""


def unit_volume(ctx: ShapeContext, v: int, unit: str) -> float:
    """The volume of DP `unit` under variant v in gradient-sized units per step (`timed_volumes`, `cross_volumes`):
    G_v + Q_v (all), G_end + Q_v (end), G_mb (mb), G_1 (first)."""
    (end, per_mb, first), (gather, reduce) = timed_volumes(ctx, v), cross_volumes(ctx, v)
    return {"all": gather + reduce, "end": end + reduce, "mb": per_mb, "first": first}[unit.removesuffix("0")]


def straddle_unit_volume(ctx: ShapeContext, unit: str) -> float:
    """The gathers of a straddling HSDP shard group (`straddle_volumes`) that DP `unit` counts, in copies: all of a
    step's (all), one microbatch's (mb), the first (first), none at the end of the step (end)."""
    step, per_mb, first = straddle_volumes(ctx)
    return {"all": step, "end": 0.0, "mb": per_mb, "first": first}[unit.removesuffix("0")]


def add_dp_units(m: pyo.ConcreteModel, ctx: ShapeContext) -> dict[str, tuple[pyo.Var, float]]:
    """Vars dp_unit[f] >= the GB one crossing unit of DP load f moves under the chosen variant v and option o (c_o
    model chunks per rank), for every stage j f covers (`DP_UNITS`) that some building holds only part of
    (split[j] = 1), and their upper bounds:
        split[j] >= y[j,k] - x[j,k] / D                                                         (split_def)
        dp_unit[f] >= (U_{f,v} / D) ((g n[j] + g' moe_excess[j]) / c_f,v + e_j) - M (1 - w[v]) - M (1 - split[j])
                      - M (1 - U_c)                                                             (dp_unit_def)
    (U_{f,v}: f's volume under v; g n[j] + e_j: stage j's gradient GB per cell, `volumes.stage_grad_gb`, and g' what
    an MoE layer holds beyond a dense one, `layer_kinds`; M: the
    largest U_f / D times the most a stage holds). A unit is one stage cell's exchange: at most (G_v + Q_v) / D of
    the stage's state (`volumes.pipeline_unit_gb`). The replay syncs each model chunk's state apart at the end of the
    step, as the chunk's last backward ends, and those transfers run on the link together, so a unit of the end
    loads (and of the whole step's, for the variants that move nothing before the end: DDP, HSDP, zero1 gathering
    after the step) is one chunk's, c_f,v = c under the options with c chunks (U_c: the sum of their u[o], left
    out when every option has the same c), and so is the first gather's, rank 0's first chunk (`add_stage_gb`);
    the gathers of a microbatch run one after another, c_f,v = 1. Only
    a split stage sends DP traffic across buildings, so each load's price line takes the chosen variant's unit of
    the largest stage that crosses, never another variant's or a stage's that stays in one building. A stage with
    a straddling HSDP shard group (straddled[j], `choices`) adds its gathers (`straddle_unit_volume`) at
    2 (g - 1) / g times the copy's S / D per unit: the group's building sends a_s / g of a copy over at least
    max(x_s, x_t) >= D / 2 units, a_s <= g - 1 (straddle_unit, the same rows with straddled[j] for split[j], for
    the loads the gathers join)."""
    cells = ctx.shape.cells_per_stage
    g, most_layers = layer_grad_gb(ctx), ctx.instance.model_spec.layers - ctx.shape.pp + 1
    g_excess = ctx.kind_excess(lambda kind: kind.grad_bytes_per_layer_per_cell) / GB
    stage_gb_most = (g + g_excess.most) * most_layers + max(fixed_grad_gb(ctx, j) for j in m.J)
    units = [f for f in DP_UNITS if f != "first" or hasattr(m, "gxa")]  # every stage's first gathers: gxa
    shares = {f: [unit_volume(ctx, v, f) / cells for v in m.V] for f in units}
    groups = shard_group_cells(ctx)
    straddling = {f: [shares[f][v] + 2 * (groups[v] - 1) / groups[v] * straddle_unit_volume(ctx, f) / cells
                      if v in groups else 0.0 for v in m.V] for f in units}
    most = {f: max(*shares[f], *straddling[f]) * stage_gb_most for f in units}
    m.split = pyo.Var(m.J, domain=pyo.Binary)
    m.split_def = pyo.Constraint(m.J, m.K, rule=lambda m, j, k: m.split[j] >= m.y[j, k] - m.x[j, k] / cells)
    m.dp_unit = pyo.Var(units, domain=pyo.NonNegativeReals, bounds=lambda m, f: (0, most[f]))
    chunks = sorted({o.chunks for o in ctx.options})
    first_chunk = first_chunk_suffixes(ctx)[1] != "0"  # the first gathers move a chunk's share
    apart = {f: [f.startswith("end") or (f.startswith("first") and first_chunk)
                 or (f == "all" and not cross_phases(ctx, v).params_before_ops) for v in m.V] for f in units}

    def rows(coeffs: dict[str, list[float]], held, families: tuple[str, ...]) -> list:
        out = []
        for f in families:
            for j in (m.J if DP_UNITS[f] is None else [DP_UNITS[f]]):
                for c in chunks if any(apart[f]) else [1]:
                    chosen = sum(m.u[o] for o, option in enumerate(ctx.options) if option.chunks == c) \
                        if any(apart[f]) and len(chunks) > 1 else 1
                    terms = [([coeffs[f][v] * g / (c if apart[f][v] else 1) for v in m.V], m.n[j]),
                             *excess_terms(m, j, [coeffs[f][v] * g_excess / (c if apart[f][v] else 1) for v in m.V])]
                    out += choice_lower_bounds(m.dp_unit[f] + most[f] * (2 - held[j] - chosen), terms,
                                               m.w, list(m.V), most[f],
                                               [coeffs[f][v] * fixed_grad_gb(ctx, j) for v in m.V])
        return out

    add_rows(m, "dp_unit_def", rows(shares, m.split, tuple(units)))
    if groups:
        add_rows(m, "straddle_unit", rows(straddling, m.straddled, ("all", "mb", "first0")))
    return {f: (m.dp_unit[f], most[f]) for f in units}


def add_drain(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    """Rows drain_cap: the head start H of the end-of-step DP traffic of stages j >= 1 over stage 0's, credited to
    dpx (module docstring), at most what the chosen option o leaves between rank 1's last backward op and rank
    0's (rank 0's last backward waits on rank 1's gradient, `volumes.drain_share`):
        drain <= kappa_o b n[0] + [kappa_o > 0] lat[0] + M (1 - u[o])
    (b: one layer's backward on the fastest GPU type, `volumes.drain_layer_s`; M: the largest right side at
    n[0] = L - p + 1 and lat[0] = the longest route latency, which no optimum exceeds: lat only raises the
    makespan). With one stage, drain = 0. zero1 takes none (rows drain_after_step, drain <= M (1 - w[v])): its end
    traffic is the parameters' all-gather after the optimizer step, which waits for every stage's reduction (the
    step's gradient-norm reduction spans the ranks), so no stage's starts early."""
    stepped = [v for v, variant in enumerate(ctx.variants) if variant.mode is DPMode.zero1]
    if ctx.shape.pp < 2 or len(stepped) == len(ctx.variants):
        m.drain.fix(0)
        return
    options = list(m.O)
    kappa = [drain_share(ctx.options[o]) for o in options]
    b, most = drain_layer_s(ctx), ctx.instance.model_spec.layers - ctx.shape.pp + 1
    big = max(kappa) * b * most + max(ctx.routes.latency_s.values(), default=0.0)
    m.drain_cap = pyo.Constraint(options, rule=lambda m, o: m.drain <= kappa[o] * b * m.n[0] + (
        m.lat[0] if kappa[o] else 0) + big * (1 - m.u[o]))
    m.drain_after_step = pyo.Constraint(stepped, rule=lambda m, v: m.drain <= big * (1 - m.w[v]))
