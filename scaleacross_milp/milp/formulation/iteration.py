"""Iteration time: the objective.

Intra-building DP sync of stage j in price group g (`ShapeContext.price_groups`: buildings whose GPU type and fabric
price the shape alike) under variant v with c model chunks per rank (the chosen schedule's): a calibrated curve of
its layers, f_{g,v,c}(n) = IntraDPSync.stage_s (one collective over each chunk's gradient buffer under DDP /
fsdp-no-reshard, per layer under FSDP / HSDP), as a piecewise-linear term
(`piecewise`: affine, LP epigraph or incremental binaries, chosen per curve, one binary system per stage):
    dpi >= f_{g,v,c}(n[j]) + F_{g,v,o}(j) + d'_{g,v,c} moe_excess[j]
           - M (1 - H[j,g]) - M (1 - w[v]) - M (1 - sum_{o in O_c} u[o])
    (slowest holder; F: the embedding's own collective on stage 0, the LM head's on the option's head stage
    (`ShapeContext.head_stage`) with one chunk per rank (`_stage_curves`), GPUCosts.embedding_dp / head_dp; O_c
    the options giving one curve)
    H[j,g] >= y[j,k] for the buildings k of group g,  0 <= H <= 1   (H = 1 when a building of group g holds j)
    dpi >= h_j(n[j])    (choice-free floor: the convex envelope of min_{g,v,c} f; every stage is held somewhere)
(d'_{g,v,c}: what each MoE layer beyond the average share adds, `ShapeContext.dp_sync_excess_s`, a curve's e_c in
`piecewise`).
(stage 0's rows bound dpi0 instead, and dpi >= dpi0).
(a condition is left out when it cannot fail: one price group, one variant, curves equal over chunk counts).
Per-layer terms that depend on the price group and DP variant (optimizer step o):
    opt >= n[j] o[k,v] + [j = 0] oE[k,v] + Hd[j] oH[k,v] - M (1 - y[j,k]) - M (1 - w[v])   (slowest holder),
    opt >= n[j] min_{k,v} o[k,v]     (oE, oH: the embedding's and LM head's step, Hd[j] = `chosen.head_on`)
DP synchronisation is hierarchical (inside buildings, then across). When the reduction overlaps (the FSDP modes
always, DDP under Training.overlap_grad_reduce: costmodel.dp.grad_reduce_overlaps) each chunk of rank 0 reduces
once the op that finalises it ends (the fused backward I + W, or W alone in zero-bubble schedules), layer by layer
behind that op, one chunk after another, so the chunks that finish early hide theirs behind the ops that follow:
per suffix i of the chunks reduced last, (share_i, credit_i) = `ScheduleOption.reduction_suffixes` (one chunk:
(1, that op's share of the stage's time)); a variant whose reduction starts after the rank's last backward
(Megatron-core's default) has no credit. Stage 0's cross-building part starts only once its intra-building
reduction is done, after that op, so nothing hides it (dpi0, dpx0: stage 0's own terms; rows for a variant v that
does not overlap: dp_end >= dpi + dpx - M (1 - w[v])):
    dp_end >= a_r dpi + b_r dpx - credit_r C0 - M (1 - u[o]),     dp_overlap (choice-free floors per share)
    dp_end >= a_r dpi0 + b_r dpx0 - credit_r C0 - M (1 - u[o]),   dp_first_overlap
    dp_end >= q_o dpx0 - M (1 - u[o]),                            dp_first
((a_r, b_r, credit_r) = `ScheduleOption.reduction_rows`: per suffix share_i (dpi + dpx), or under interleaving
and ZB-V (v = 2), whose chunks each reduce inside their buildings and then across while the next chunk reduces
inside, a two-stage flow of share_i v equal chunks, share_i max(dpi, dpx) + min(dpi, dpx) / v; q_o = 1 / v of
stage 0's cross-building part, the last chunk's, follows its intra-building reduction, 1 for the other options
(generated medium seed 102's ZB-V plan, priced as one block, was 11 % above its replay): medium generated seed 17's
interleaved plan, v = 4, exposed 37 ms of stage 0's 144 ms cross-building part and 181 ms in all where the block
rows priced 319 ms; M: `build.big_m_bounds`' dp_time)
    C_j <= n[j] tau_k + e[j,k] + M (1 - y[j,k]) for every building k,   C_j <= Cst[j]   (credit_cap; C0 = C_0)
(e[j,k]: stage j's least fixed time over the options; C_j the stage's floor on the fastest GPU type holding it, which
the rows' credit raises to that: Cst[j] itself the solver could inflate up to the cycle to claim more overlap. Taken
on the fastest type anywhere in the cluster, C0 priced generated medium seed 166's one-stage FSDP plan in a hall of
GPUs half as fast, whose reduction hides behind its last backward, with 460 ms of exposed DP against the replay's
11 ms; M: stage j's time at its most layers; C_j for j > 0 only with the rows below).
Stage j > 0 ends its last backward before rank 0 does: the last microbatch's backward still runs down ranks j - 1,
..., 0. Under 1F1B, GPipe, ZB-H1 and ZB-V `ScheduleOption.drain_lead` bounds that lead from below by
a sum_{r<j} C_r + b C_0 - k_j Cst[j] (the ops after rank j's last input backward, k_j Cst[j], taken at the slowest
copy), which can be negative (a heavy stage j under ZB-H1): rows drain_lead, drain_clip with binaries behind[j],
    lead[j] <= a sum_{r<j} C_r + b C_0 - k_j Cst[j] + k_j M behind[j] + M (1 - u[o]),   lead[j] <= M (1 - behind[j])
(lead[j] <= M (1 - u[o]) under an option without leads; M: the cycle's and the pipeline's bounds; under ZB-V, whose
later ranks end after rank 0 when i < 2w, the lead itself, negative too, and rank 0's lag lag0 taken off T:
`add_rank_zero_lag`), so stage j's
intra-building sync counts in the rows above only beyond its lead, dpi >= dpi_stage[j] - lead[j] (dpi_others), and
from its own rank's end with its own credit (`reduction_suffixes` of rank j: under ZB-V rank j > 0 runs only j W
after the op finalising its first chunk):
    dp_end >= share_i (dpi_stage[j] - lead[j]) - credit_ji C_j - M (1 - u[o])                   (dp_later_overlap)
(M: stage j's largest intra-building sync, `intra_most_s`). The cross-building part stays in the rows above after the
latest intra-building part, dpx being the busiest link's, which stage 0's traffic can set alone (with it in rank j's
rows, generated medium seed 163's ZB-V plan priced 11 % above its replay). Counted from rank 0's end, generated
medium seed 59's ZB-H1 plan, whose four one-layer stages on a slow fabric end 0.27 s before the pipeline, priced
12.8 % above its replay, 6.8 % now (the lead's chain leaves out the queue of a slow stage's cool-down). Under ZB-V
with i < 2w rank j ends j (2w - i) / (2c) C after rank 0 at equal stages: without leads there (rank 0's reduction
alone), generated medium seed 65's ZB-V plan, whose rank 1 exposes 277 ms of reduction after its own end against
rank 0's 170 ms, was priced 3.8 % below its replay. (Generated medium seed 148, TP4 EP32 PP3 ZB-V, priced 3.6 % below
its replay, 0.2 % with leads where i >= 2w.) Under interleaving
rank 0's last chunk, virtual stage 0, holds the embedding's whole collective E_v besides its 1 / v share phi_o of the
layers' (`add_dp_overlap`):
    dp_end >= phi_o dpi0 + (1 - phi_o) E_v + phi_o dpx0 - credit_o C0 - M (1 - u[o]) - M (1 - w[v])
                                                                   (dp_embedding_last)
FSDP's first cross-building parameter gather (`traffic`: first_gather) runs at the start beside stage 0's own
(gather0, below), so the start exposes the larger of the two:
    dp_exposed >= dp_end  (dp_exposed_end),   dp_exposed >= dp_end + first_gather - gather0  (dp_exposed_start)
(dp_exposed + gather0 >= dp_end + max(gather0, first_gather); raising gather0 cannot lower the sum). Every stage's
first gathers share the links, so the start waits for all of them less the last stage's head start
(`add_shared_start`, dp_shared_start); re-gathers after a suffix's first chunk share the link with its reduction
(`add_regather_overlap`, dp_regather_overlap).
FSDP / HSDP re-gather a stage's parameters before each forward and backward pass (reshard after forward; a per-layer
all-gather takes g[k,v]); prefetching hides the gathers behind compute only while the comm stream keeps up. Every
stage's first gather starts with the iteration and hides only behind the first microbatch's way to it, the
forwards of the stages before (fsdp-no-reshard gathers once, DDP never):
    gather >= passes_v (n[j] g[k,v] + [j = 0] gE[k,v] + Hd[j] gH[k,v]) - ...,   cycle >= gather
    gather0 >= s n[j] g'[k,v] + c[k,v] + [j = 0] gE + Hd1[j] gH - sum_{i<j} (s F_i + p2p) - [j > 0] eF - ...
    (F_i: stage i's layers' forward on the GPU type of a building holding it, `stage_forwards`; p2p, eF: an
    intra-building send and the embedding on the fastest GPU type;
    stage 0 has no head start; Hd1: the head counts when its chunk is the stage's first, one chunk per rank;
    s = `start_gather_share`, 1 / c under the options of c chunks per rank (rows per chunk count, - M (1 - U_c)):
    the start waits for each rank's first chunk, the later chunks' gathers delay the fill (`add_chunk_gather_waits`:
    priced at the start, both of generated medium seed 65's ZB-V chunks waited 181 ms where its replay waited 98);
    (g', c) = `costmodel.dp.start_gather_terms`: (g, 0), or (max(0, g - f), min(g, f)) for zero1 under
    overlap_param_gather, whose first forward waits only for its first bucket and the stream's shortfall)
zero1 without overlap_param_gather gathers its updated parameters after the optimizer step, every stage at once:
the same gather0 rows with no head start and the head counted under every option (Hd), after opt in T's sum.
    T >= Tpipe - lag0 + dp_exposed + opt + gather0,   T >= Tpipe + opt + gather0,   T >= busy[a] for every arc
(lag0: how far rank 0 ends before the pipeline, `add_rank_zero_lag`, 0 but under ZB-V)
(the objective, minimise T or the iteration's cost, is set by `cost.add_objective`)
A re-gather is issued once the op two before the one that needs it has finished, so it overlaps only what runs
between: the sends of that op, the op just before and its sends. An op that needs one (F, and I or B) waits
max(0, gather - that window). What runs before each such op in rank j's steady state (from its first backward to its
last forward) is read from the schedule's own order (`costmodel.actions.gather_windows`, the order the replay runs),
per microbatch: with c chunks per rank of n / c layers each, a window w needs n a / c + gX(w) (a = g[k,v], FSDP /
HSDP only; gX the embedding's gather on virtual stage 0, the LM head's on the last) and hides n p_w / c + pX(w) +
s_w (p_w: one layer's time in the op before, f, i, w or i + w; pX its embedding's or head's share; s_w its sends'
time), so per microbatch
    wait_j(n) = sum_w max(0, (a - p_w) n / c + gX(w) - pX(w) - s_w)
(`gather_wait_terms`: windows alike in what they hold, the op before and their sends are one part; those of plain
layers and no sends are linear: per_layer n + sum_i max(0, slope_i n + offset_i)). A sum of maxima is the largest of
its partial sums; over 1..L-p+1 layers a part positive at both ends is affine and one never positive is 0, so there
is one row per subset S of the parts that change sign in between, each with every affine part:
    gather_wait[j] >= (per_layer + sum_S slope_i) n[j] + sum_S offset_i + q'_S moe_excess[j]
                      - M (1 - y[j,k]) - M (1 - w[v]) - M (1 - u[o])            (gather_wait_bound)
    cycle >= Cst[j] + gather_wait[j]                                            (gather_wait_cycle)
(q'_S: an MoE layer's slope beyond a dense one's, `layer_kinds`; so in every per-layer term below). Medium generated
seed 91's HSDP ZB-H1 plan (1-layer stages, Mixtral's 32k-token embedding gathered before every F and I of stage 0)
was priced 21 % below its replay while the rows held the layers' gathers alone against fixed op kinds.
Parameters a stage holds in another building cross the link before every F and I / B (FSDP, `traffic`: gxt[a], the
link time of one microbatch's gathers on arc a, both passes). Such a gather is issued once the rank's op of the same
kind for the previous microbatch has finished (the op two before), so each op kind chains one gather and the op per
microbatch: with sigma_o the largest share of a stage's time in an op that needs a gather (F, or the fused backward
I + W; F or I when W is split off),
    cycle >= gxt[a] / 2 + sigma_o Cst[j] - M (1 - span[j,a]) - M (1 - u[o])     (cross_gather_wait)
(a: one pass's share of the link's gathers) where span[j,a] = 1 when stage j is held at both ends of some building
pair (s, t) whose route s -> t crosses a. A rank's all-gathers are one communicator's collectives and run in order,
each done once its farthest pull has crossed, after the longest route the stage spans (`traffic`: span_latency[j]):
2 c_o of them per microbatch (F and I / B per model chunk), so with p > 1 under a variant v that gathers every pass
(FSDP, a straddling HSDP group), with U_c the options of c chunks,
    cycle >= gxt[a] + 2 c span_latency[j] - M (1 - span[j,a]) - M (1 - U_c) - M (1 - sum_v w[v])  (cross_gather_stream)
(exact with one rank's gathers on the arc; with several in parallel, or a near pull on a and a far one elsewhere, it
over-prices by at most those latencies).
With the pairs over a grouped by source into sources S_g sharing one target set T_g (`route_targets`; one group
when the routes form a tree), at 0/1 values of y
    span_to[j,a,g] >= y[j,t]  for t in T_g      (span_to_bound)
    span[j,a] >= y[j,s] + span_to[j,a,g] - 1  for s in S_g      (span_bound),   0 <= span, span_to <= 1
is that condition in sum_g (|S_g| + |T_g|) rows per stage and arc rather than one per pair and option.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from itertools import combinations

import pyomo.environ as pyo

from scaleacross_milp.calibration.piecewise import Breakpoints
from scaleacross_milp.costmodel.actions import GatherWindow, gather_windows
from scaleacross_milp.costmodel.costs import DPVariant, FixedParamCosts, GPUCosts, OpTimes
from scaleacross_milp.costmodel.dp import (
    grad_reduce_overlaps,
    params_gathered_at_end,
    start_gather_share,
    start_gather_terms,
)
from scaleacross_milp.costmodel.schedule import ScheduleOption, flow_coefficients
from scaleacross_milp.milp.context import KindExcess, ShapeContext
from scaleacross_milp.milp.formulation.chosen import head_on
from scaleacross_milp.milp.formulation.disjunction import add_rows, choice_lower_bounds
from scaleacross_milp.milp.formulation.layer_kinds import excess_s, excess_terms
from scaleacross_milp.milp.formulation.piecewise import Curve, add_piecewise_lower_bounds
from scaleacross_milp.milp.volumes import gather_passes, gathers_every_pass
from scaleacross_milp.spec.search import Schedule
from scaleacross_milp.spec.training import Training

Cost = Callable[[FixedParamCosts], dict[DPVariant, float]]
LayerCost = Callable[[GPUCosts, DPVariant], float]
"""A per-layer quantity read from a building's cost table under a DP variant."""


def _fixed_terms(m: pyo.ConcreteModel, ctx: ShapeContext, j: int, building: str, cost: Cost,
                 head_where: Callable[[ScheduleOption], bool] | None = None,
                 at_end: list[bool] | None = None) -> list[tuple[list[float], object]]:
    """`choice_lower_bounds` terms over the variants of stage j's fixed parameters in `building`: the embedding's
    `cost` on stage 0 and the LM head's times H[j] (`chosen.head_on`, over the options `head_where` admits; over
    every option for the variants flagged in `at_end`)."""
    gpu = ctx.gpu(building)
    late = at_end or [False] * len(ctx.variants)
    terms: list[tuple[list[float], object]] = []
    if j == 0:
        terms.append(([cost(gpu.embedding_dp)[v] for v in ctx.variants], 1))
    head = cost(gpu.head_dp)
    for where, flag in ((head_where, False), (None, True)):
        coeffs = [head[v] if late[n] == flag else 0.0 for n, v in enumerate(ctx.variants)]
        held = head_on(m, ctx, j, where)
        if any(coeffs) and not (isinstance(held, int) and held == 0):
            terms.append((coeffs, held))
    return terms


def _slowest_holder(m: pyo.ConcreteModel, ctx: ShapeContext, name: str, per_layer: LayerCost, cost: Cost,
                    head_where: Callable[[ScheduleOption], bool] | None = None,
                    head_start: Callable[[int, float], object] | None = None, per_stage: dict | None = None,
                    at_end: list[bool] | None = None, first_chunk: bool = False) -> None:
    """Add var `name` >= n[j] per_layer(average layer) + either kind's layers beyond their share times what it adds
    (`layer_kinds`) + per_stage[price group, variant] + the fixed parameters' `cost` (`_fixed_terms`) - head_start(j, 1)
    over every held (j, k) and the chosen variant, per_layer read from building k's cost tables (head_start(j, s): an
    expression >= 0 with s of the earlier stages' layers, none by default; per_stage: 0 by default); when every price
    group gives the same numbers, the rows of one building without the holding condition. A variant flagged in
    `at_end` has no head start and
    counts the head under every option (its term runs after the step, not before the first forward).
    With `first_chunk` (gather0) the term is a rank's first model chunk's: under the options of c chunks per rank,
    1 / c of the layers' terms (all of them for a variant flagged in `at_end`) and head start head_start(j, 1 / c),
    less M (1 - sum_{o: c_o = c} u[o]) (`_first_chunks`; the later chunks' waits are the fill's,
    `add_chunk_gather_waits`)."""
    most = ctx.instance.model_spec.layers - ctx.shape.pp + 1
    groups = [ctx.gpu(key) for key in ctx.price_groups]
    layer = {(g, v): per_layer(ctx.gpu(g), var) for g in ctx.price_groups for v, var in enumerate(ctx.variants)}
    excess = {(g, v): ctx.kind_excess(lambda costs, g=g, var=var: per_layer(costs.building(g), var))
              for g in ctx.price_groups for v, var in enumerate(ctx.variants)}
    fixed_most = max(max(cost(g.embedding_dp).values(), default=0.0) + max(cost(g.head_dp).values(), default=0.0)
                     for g in groups)
    big = (most * max(layer[key] + excess[key].most for key in layer) + max((per_stage or {0: 0.0}).values())
           + fixed_most)
    var = pyo.Var(domain=pyo.NonNegativeReals)
    setattr(m, name, var)
    variants = list(m.V)
    started = [-1.0 if not (at_end and at_end[v]) else 0.0 for v in variants]

    def numbers(g: str) -> tuple:
        gpu = ctx.gpu(g)
        return (tuple(layer[g, v] for v in variants), tuple(excess[g, v] for v in variants),
                tuple((per_stage or {}).get((g, v), 0.0) for v in variants),
                tuple(cost(gpu.embedding_dp).values()), tuple(cost(gpu.head_dp).values()))

    # every group prices this term alike (the optimizer step reads the GPU type only): one row set, no big-M
    alike = len({numbers(g) for g in ctx.price_groups}) == 1
    sets = _first_chunks(m, ctx, big, first_chunk)
    rows = []
    for j in m.J:
        for k in (ctx.buildings[:1] if alike else m.K):
            group = ctx.price_group[k]
            for chunks, chosen in sets:
                lhs = (var if alike else var + big * (1 - m.y[j, k])) + chosen
                scale = [start_gather_share(ctx.instance.training, var_, chunks) if first_chunk else 1.0
                         for var_ in ctx.variants]
                terms = [([layer[group, v] * scale[v] for v in variants], m.n[j]),
                         *excess_terms(m, j, [excess[group, v] * scale[v] for v in variants]),
                         *_fixed_terms(m, ctx, j, k, cost, head_where, at_end)]
                if head_start is not None:
                    terms.append((started, head_start(j, 1.0 / chunks)))
                constant = None if per_stage is None else [per_stage[group, v] for v in variants]
                rows += choice_lower_bounds(lhs, terms, m.w, variants, big, constant)
        if not alike:
            share = 1.0 / max(chunks for chunks, _ in sets)
            rows.append(var + (0.0 if head_start is None else head_start(j, share))
                        >= share * min(layer.values()) * m.n[j])
    add_rows(m, f"{name}_bound", rows)


def _first_chunks(m: pyo.ConcreteModel, ctx: ShapeContext, big: float, first_chunk: bool) -> list[tuple]:
    """(chunks per rank c, M (1 - U_c)) per row set of `_slowest_holder`: one set (1, 0) without `first_chunk` or
    when every option runs one chunk per rank, else one per chunk count c of the options (U_c: their binaries, 0 when
    every option has c)."""
    counts = sorted({option.chunks for option in ctx.options})
    if not first_chunk or counts == [1]:
        return [(1, 0.0)]
    sets = []
    for c in counts:
        holding = [o for o, option in enumerate(ctx.options) if option.chunks == c]
        sets.append((c, 0.0 if len(holding) == len(ctx.options) else big * (1 - sum(m.u[o] for o in holding))))
    return sets


def _stage_curves(ctx: ShapeContext, building: str, variant: DPVariant, j: int) -> list[tuple[list[int] | None,
                                                                                               Breakpoints]]:
    """(options, curve) per distinct intra-building DP curve of stage j over the schedule options: the variant's
    curve in `building` at the option's chunks (`ShapeContext.dp_sync_curve`), raised by the embedding's own
    collective on stage 0 and the LM head's on the option's head stage. With several chunks per rank the head's
    chunk finishes its backward before the rank's others (ZB-V: virtual stage 2p - 1 on rank 0; interleaving: the
    last chunk of rank p - 1), and what that hides is credited to the chunks' reductions in order
    (`ScheduleOption.reduction_suffixes`), the head's included. Options None when every option gives the same
    curve."""
    gpu = ctx.gpu(building)
    groups: dict[Breakpoints, list[int]] = {}
    for o, option in enumerate(ctx.options):
        lift = ((gpu.embedding_dp.dp_sync_s[variant] if j == 0 else 0.0)
                + (gpu.head_dp.dp_sync_s[variant] if j == ctx.head_stage(option) else 0.0))
        curve = ctx.dp_sync_curve(building, variant, option.chunks)
        groups.setdefault(Breakpoints(curve.x, tuple(y + lift for y in curve.y), curve.convex), []).append(o)
    if len(groups) == 1:
        return [(None, next(iter(groups)))]
    return [(options, curve) for curve, options in groups.items()]


def add_intra_dp_sync(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    """Vars dpi0 >= stage 0's intra-building DP curve under the chosen variant and chunks (docstring), dpi_stage[j]
    >= stage j's for j > 0, dpi >= dpi0 and dpi >= dpi_stage[j] - lead[j] where the model has drain leads (rows
    dpi_first, dpi_others); with several price groups (`ShapeContext.price_groups`), each group's curves hold when
    the stage has cells there: dpi_held[j, g] >= y[j, k] for k in g (rows dpi_held_bound)."""
    most_excess = ctx.instance.model_spec.layers - ctx.shape.pp + 1  # either excess <= n[j] at its least
    later = list(m.J)[1:]
    m.dpi = pyo.Var(domain=pyo.NonNegativeReals)
    m.dpi0 = pyo.Var(domain=pyo.NonNegativeReals)
    m.dpi_stage = pyo.Var(later, domain=pyo.NonNegativeReals)
    m.dpi_first = pyo.Constraint(expr=m.dpi >= m.dpi0)
    lead = m.lead if hasattr(m, "lead") else {j: 0.0 for j in later}
    m.dpi_others = pyo.Constraint(later, rule=lambda m, j: m.dpi >= m.dpi_stage[j] - lead[j])
    groups = list(ctx.price_groups)
    alike = len(groups) == 1
    if not alike:
        m.dpi_held = pyo.Var(m.J, groups, bounds=(0.0, 1.0))
        m.dpi_held_bound = pyo.Constraint(m.J, m.K,
                                          rule=lambda m, j, k: m.dpi_held[j, ctx.price_group[k]] >= m.y[j, k])
    for j in m.J:
        curves = []
        for g in groups:
            held = [] if alike else [m.dpi_held[j, g]]
            for v, variant in enumerate(ctx.variants):
                chosen = [m.w[v]] if len(m.V) > 1 else []
                for options, points in _stage_curves(ctx, g, variant, j):
                    schedule = [] if options is None else [sum(m.u[o] for o in options)]
                    excess = ctx.dp_sync_excess_s(g, variant, ctx.options[options[0] if options else 0].chunks)
                    curves.append(Curve(points, (*held, *chosen, *schedule), excess_s(m, j, excess),
                                        excess.most * most_excess))
        add_piecewise_lower_bounds(m, f"dpi_{j}", m.n[j], m.dpi0 if j == 0 else m.dpi_stage[j], curves)


DrainLeads = dict[int, dict[int, tuple[float, float, float]]]
"""Per schedule option o that prices each later stage's reduction from its own rank's end, rank j's (a, b, k) of
`ScheduleOption.drain_lead` for every j > 0."""


def drain_leads(ctx: ShapeContext) -> DrainLeads:
    """`DrainLeads` of the shape's options (`ShapeContext.drain_leads`)."""
    leads = {o: ctx.drain_leads(option) for o, option in enumerate(ctx.options)}
    return {o: per_rank for o, per_rank in leads.items() if per_rank is not None}


def intra_most_s(ctx: ShapeContext, j: int) -> float:
    """The most stage j's intra-building DP sync (dpi0, dpi_stage[j]) reads at an optimum: its largest curve at the
    most layers, the embedding's and head's collectives included, plus what its MoE layers add at most."""
    most = ctx.instance.model_spec.layers - ctx.shape.pp + 1
    return max(max(curve.y) + ctx.dp_sync_excess_s(g, variant, option.chunks).most * most
               for g in ctx.price_groups for variant in ctx.variants for _, curve in _stage_curves(ctx, g, variant, j)
               for option in ctx.options)


def add_drain_leads(m: pyo.ConcreteModel, ctx: ShapeContext, leads: DrainLeads, bounds: dict[str, float]) -> None:
    """Vars lead[j] <= max(0, how far rank 0's last op ends after rank j's) under the chosen option, that itself,
    negative too, under an option that `lags` (ZB-V), 0 under an option without leads (module docstring; rows
    drain_lead, and drain_clip with binaries behind[j] where the lead can be negative), and lead[j] <= bubble (rows
    lead_in_bubble: the drain is pipeline idle time, which is what lets `bounds` take a later stage's reduction at
    its most layers, less the bubble)."""
    later, big = list(m.J)[1:], bounds["pipeline"]
    lagging = {o for o in leads if ctx.options[o].lags}
    m.lead = pyo.Var(later, domain=pyo.Reals if lagging else pyo.NonNegativeReals)
    m.lead_in_bubble = pyo.Constraint(later, rule=lambda m, j: m.lead[j] <= m.bubble)
    if any(k > 0 for o, per_rank in leads.items() if o not in lagging for _, _, k in per_rank.values()):
        m.behind = pyo.Var(later, domain=pyo.Binary)
        m.drain_clip = pyo.Constraint(later, rule=lambda m, j: m.lead[j] <= big * (1 - m.behind[j]))
    rows = []
    for o in m.O:
        chosen = 0.0 if len(m.O) == 1 else big * (1 - m.u[o])
        for j in later:
            if o not in leads:
                rows.append(m.lead[j] <= chosen)
                continue
            a, b, k = leads[o][j]
            behind = k * bounds["cycle"] * m.behind[j] if k > 0 and o not in lagging else 0.0
            rows.append(m.lead[j] <= a * sum(m.C[r] for r in range(j)) + b * m.C[0] - k * m.Cst[j] + behind + chosen)
    add_rows(m, "drain_lead", rows)


def add_rank_zero_lag(m: pyo.ConcreteModel, ctx: ShapeContext, leads: DrainLeads, bounds: dict[str, float]) -> None:
    """Var lag0 >= 0, how far rank 0's last op ends before the pipeline's under an option that `lags` (ZB-V), 0
    otherwise: at most the bubble and, for one rank j > 0 picked by binaries ends_last[j] (at most one), minus its
    drain lead, rank j's last W ops against the chain of input backwards down to rank 0 (`ScheduleOption.drain_lead`
    (a, b, k) of rank j):
        lag0 <= k_j C[j] - a sum_{r<j} Cst[r] - b Cst[0] + M (1 - ends_last[j]) + M (1 - u[o]),
        lag0 <= M sum_j ends_last[j],   sum_j ends_last[j] <= sum_{o lags} u[o],   lag0 <= bubble   (rows lag_bound)
    (C[j] <= the stage's time on its fastest holder and Cst[r] >= the stages' times, so neither can be inflated
    to claim more; M: `big_m_bounds`' pipeline). Rank 0's DP rows count from its own end, so T takes lag0 off
    (`add_iteration`); every rank's lead may then be negative (`add_drain_leads`). The bundled campus-2b's ZB-V
    optimum ends rank 0 25 ms before rank 7 in its replay, pp-out-2b's ZB-V layout of 2-6 layer stages 142 ms
    before its last rank."""
    m.lag0 = pyo.Var(domain=pyo.NonNegativeReals)
    lagging = [o for o in leads if ctx.options[o].lags]
    if not lagging:
        m.lag0.fix(0.0)
        return
    later, big = list(m.J)[1:], bounds["pipeline"]
    m.ends_last = pyo.Var(later, domain=pyo.Binary)
    rows = [m.lag0 <= m.bubble, m.lag0 <= big * sum(m.ends_last[j] for j in later),
            sum(m.ends_last[j] for j in later) <= (1 if len(lagging) == len(m.O) else sum(m.u[o] for o in lagging))]
    for o in lagging:
        chosen = 0.0 if len(m.O) == 1 else big * (1 - m.u[o])
        for j in later:
            a, b, k = leads[o][j]
            rows.append(m.lag0 <= k * m.C[j] - a * sum(m.Cst[r] for r in range(j)) - b * m.Cst[0]
                        + big * (1 - m.ends_last[j]) + chosen)
    add_rows(m, "lag_bound", rows)


def add_credit_caps(m: pyo.ConcreteModel, ctx: ShapeContext, stages: list[int]) -> None:
    """Vars C[j] <= stage j's time per microbatch on the fastest GPU type that holds it, for j in `stages` (module
    docstring; rows credit_cap, one per stage without the holding condition when every building prices it alike)."""
    most = ctx.instance.model_spec.layers - ctx.shape.pp + 1
    m.C = pyo.Var(stages, domain=pyo.NonNegativeReals)
    rows = []
    for j in stages:
        terms = {k: (ctx.gpu(k).layer.total_s, ctx.stage_fixed_floor_s(j, k)) for k in ctx.buildings}
        big = max(tau * most + fixed for tau, fixed in terms.values())
        alike = len(set(terms.values())) == 1
        rows += [m.Cst[j] - m.C[j] >= 0] + [
            tau * m.n[j] + fixed + (0.0 if alike else big * (1 - m.y[j, k])) - m.C[j] >= 0
            for k, (tau, fixed) in (list(terms.items())[:1] if alike else terms.items())]
    add_rows(m, "credit_cap", rows)


def add_dp_overlap(m: pyo.ConcreteModel, ctx: ShapeContext, leads: DrainLeads, bounds: dict[str, float]) -> None:
    """Vars dp_end >= the DP synchronisation left after stage 0's last backward op, dp_exposed >= dp_end plus the
    first cross-building gather beyond gather0 (module docstring). Per schedule option o and suffix (share_i,
    credit_i) of the chunks rank 0 reduces last (`ScheduleOption.reduction_suffixes`: one chunk, but for interleaved
    1F1B and ZB-V, whose chunks reduce one after another as each one's gradients become final):
        dp_end >= a_r dpi + b_r dpx - credit_r C0 - M (1 - u[o])     (rows dp_overlap, dp_first_overlap)
    ((a_r, b_r) = `flow_coefficients`(share_r, piece_o), piece_o = `reduction_piece`, or share_r without one)
    beside choice-free floors dp_end >= a dpi + b dpx - kappa_s C0 for each share s and (a, b) of
    `flow_coefficients`(s, phi_s), kappa_s the most any option credits a suffix of at least that share
    (max_o min_{i: share_i >= s} credit_i), phi_s = the least of s and the options' pieces: every option has a row at
    least that large (s (dpi + dpx) as before when no option has a piece). A variant whose reduction does not
    overlap (costmodel.dp.grad_reduce_overlaps) has no credit: dp_end >= dpi + dpx - M (1 - w[v]) (with no
    overlapping variant, no option has any). Rows dp_first: dp_end >= q_o dpx0 under each option (q_o: its piece, or
    1), M = dp_time. Where the option has drain leads (`add_drain_leads`), each later rank's own rows
    (dp_later_overlap, module docstring). Under interleaving rank 0's last chunk is virtual stage 0, which holds the
    embedding's whole collective E_v (least over the buildings) besides its share of the layers' (under ZB-V its
    other chunk holds the LM head's, as large: half of dpi0 each, which the rows above price):
        dp_end >= phi_o dpi0 + (1 - phi_o) E_v + phi_o dpx0 - credit_o C0 - M (1 - u[o]) - M (1 - w[v])
                                                                                    (dp_embedding_last)
    (phi_o = 1 / v, credit_o that chunk's own): generated medium seed 129 (Llama 3 8B, interleaved v = 4 over two
    layers per chunk) exposed 19.4 ms of that chunk's reduction, 7.9 ms for each other chunk, priced 10.1 ms."""
    p, layer = ctx.shape.pp, ctx.gpu(ctx.buildings[0]).layer
    dp_time_s = bounds["dp_time"]
    overlaps = [grad_reduce_overlaps(ctx.instance.training, variant) for variant in ctx.variants]
    credits = {o: [(share, credit if any(overlaps) else 0.0)
                   for share, credit in ctx.options[o].reduction_suffixes(p, layer)] for o in m.O}
    c0 = m.C[0]
    most = max(ctx.stage_time_terms(0, k)[0] * (ctx.instance.model_spec.layers - ctx.shape.pp + 1)
               + ctx.stage_time_terms(0, k)[1] for k in ctx.buildings)
    floors = {share: max(min(credit for at_least, credit in suffixes if at_least >= share)
                         for suffixes in credits.values())
              for share in {share for suffixes in credits.values() for share, _ in suffixes}}
    pieces = [ctx.options[o].reduction_piece for o in m.O]
    phi = {share: min([share, *(piece for piece in pieces if piece is not None)]) for share in floors}
    # the floor rows hold dp_end >= dpi + phi[1] dpx - floors[1] C0, and no row reads more than dpi + dpx
    big = floors[1.0] * most + (1.0 - phi[1.0]) * dp_time_s
    m.dp_end = pyo.Var(domain=pyo.NonNegativeReals)
    for name, dpi, dpx in (("dp_overlap", m.dpi, m.dpx), ("dp_first_overlap", m.dpi0, m.dpx0)):
        rows = [m.dp_end >= a * dpi + b * dpx - credit * c0
                for share, credit in sorted(floors.items()) for a, b in flow_coefficients(share, phi[share])]
        rows += [m.dp_end >= a * dpi + b * dpx - credit * c0 - big * (1 - m.u[o])
                 for o, suffixes in credits.items() for share, credit in suffixes
                 if credit < floors[share] or (pieces[o] or share) > phi[share]
                 for a, b in flow_coefficients(share, pieces[o] or share)]
        if any(overlaps):
            rows += [m.dp_end >= dpi + dpx - big * (1 - m.w[v]) for v in m.V if not overlaps[v]]
        add_rows(m, name, rows)
    rows = []
    intra_most = {j: intra_most_s(ctx, j) for j in list(m.J)[1:]} if leads else {}
    for o in leads:
        for j, big_j in intra_most.items():
            own = m.dpi_stage[j] - m.lead[j] - big_j * (1 - m.u[o])
            rows += [m.dp_end >= share * own - credit * m.C[j] for share, credit in
                     (ctx.options[o].reduction_suffixes(p, layer, rank=j) if any(overlaps) else [(1.0, 0.0)])]
            if any(overlaps):
                rows += [m.dp_end >= own - big_j * (1 - m.w[v]) for v in m.V if not overlaps[v]]
    add_rows(m, "dp_later_overlap", rows)
    add_regather_overlap(m, ctx, credits, pieces, big + 2 * dp_time_s)
    embedding = [min(ctx.gpu(k).embedding_dp.dp_sync_s[variant] for k in ctx.buildings) for variant in ctx.variants]
    rows = []
    for o, suffixes in credits.items():
        interleaved = ctx.options[o].schedule is Schedule.interleaved
        piece = pieces[o]
        last = [credit for share, credit in suffixes if share == piece and interleaved]
        for v in (v for v in m.V if overlaps[v] and embedding[v] > 0 and last):
            chosen = big * (1 - m.w[v]) if len(m.V) > 1 else 0.0
            rows.append(m.dp_end >= piece * m.dpi0 + (1 - piece) * embedding[v] + piece * m.dpx0 - last[0] * c0
                        - big * (1 - m.u[o]) - chosen)
    add_rows(m, "dp_embedding_last", rows)
    last = [pieces[o] or 1.0 for o in m.O]
    add_rows(m, "dp_first", choice_lower_bounds(m.dp_end, [(last, m.dpx0)], m.u, list(m.O), dp_time_s))
    m.dp_exposed = pyo.Var(domain=pyo.NonNegativeReals)
    m.dp_exposed_end = pyo.Constraint(expr=m.dp_exposed >= m.dp_end)
    m.dp_exposed_start = pyo.Constraint(expr=m.dp_exposed >= m.dp_end + m.first_gather - m.gather0)


def add_regather_overlap(m: pyo.ConcreteModel, ctx: ShapeContext, credits: dict[int, list[tuple[float, float]]],
                         pieces: list[float | None], big: float) -> None:
    """Rows dp_regather_overlap: where parameters cross a link before every pass (`traffic`: gxt[a], one
    microbatch's gathers of every chunk, both passes), the ops a suffix's reduction hides behind re-gather too, on the
    same link: with n_i the ops every rank still gathers for after the suffix's first chunk
    (`ScheduleOption.regathers_behind_suffixes`) and v chunks per rank, per arc a
        dp_end >= a_r dpi + b_r (end_time[a] - (p - 2) drain) + n_i gxt[a] / (2 v) - credit_i cycle - M (1 - u[o])
    ((a_r, b_r) as in dp_overlap; end_time[a]: arc a's end-of-step reductions, `traffic`; the credit's window opens
    as rank 0's op finalising the suffix's first chunk starts, and rank r's chunk ends r chunk-backwards, one drain
    each, before rank 0's, so its reduction starts up to (p - 2) drains earlier; M: dp_overlap's plus twice dp_time,
    as end_time[a] <= dpx + drain and n_i gxt[a] / (2 v) <= credit_i cycle, gxt[a] <= cycle). The window is taken at
    the cycle's pace, not C0's: where the link sets the cycle, the pipeline rows already count its gathers, and at
    C0's pace a TP 8 PP 2 interleaved v = 4 FSDP layout split over two halls on 400 Gb/s was priced 25 % above its
    replay (17 % without these rows). Generated medium seed 17's interleaved v = 4 HSDP plan, its shard groups
    straddling two buildings on a 3.2 Tb/s link busy 90 % of the step, re-gathered 9 chunks' parameters after its
    first reduction started: 9.6 % below its replay without these rows, 5.2 % with them."""
    if not hasattr(m, "end_time"):
        return
    p = ctx.shape.pp
    lead = max(0, p - 2)  # rank r's chunk finishes r chunk-backwards (drain) before rank 0's, r - 1 before its start
    rows = []
    for o, suffixes in credits.items():
        option = ctx.options[o]
        chosen = 0.0 if len(m.O) == 1 else big * (1 - m.u[o])
        for (share, credit), ops in zip(suffixes, option.regathers_behind_suffixes(p), strict=True):
            if not ops:
                continue
            for a_, b_ in flow_coefficients(share, pieces[o] or share):
                rows += [m.dp_end >= a_ * m.dpi + b_ * (m.end_time[arc] - lead * m.drain)
                         + ops * m.gxt[arc] / (2 * option.chunks) - credit * m.cycle - chosen for arc in m.A]
    add_rows(m, "dp_regather_overlap", rows)


def add_shared_start(m: pyo.ConcreteModel, ctx: ShapeContext, head_start: Callable[[int, float], object],
                     big: float) -> None:
    """Every stage's first cross-building gather starts with the step, and they share the links (`traffic`:
    first_gathers, the time of all of them on the busiest arc): the link works until the last is done, and the stage
    whose gather that is cannot start its first forward before, at best the last stage p - 1, which would start it
    head_start(p - 1, 1 / c) after stage 0 (its first chunk's share of the earlier stages' forwards under c chunks
    per rank), so per chunk count c of the options (U_c: their binaries)
        dp_exposed + gather0 >= dp_end + first_gathers - head_start(p - 1, 1 / c) - M (1 - U_c)   (dp_shared_start)
    (M: `build.big_m_bounds`' dp_time). A TP 8 PP 2 1F1B layout split over two halls on 100 Gb/s, each stage's 4 GB
    of first gathers sharing the link, was priced with stage 0's alone, 0.33 s of start against the replay's 0.66 s
    (15.6 % below its replay)."""
    if not hasattr(m, "first_gathers"):
        return
    last = ctx.shape.pp - 1
    add_rows(m, "dp_shared_start", [
        m.dp_exposed + m.gather0 + chosen >= m.dp_end + m.first_gathers - head_start(last, 1.0 / chunks)
        for chunks, chosen in _first_chunks(m, ctx, big, first_chunk=True)])


@dataclass(frozen=True)
class GatherWait:
    """A rank's wait per microbatch on its re-gathers at n layers: per_layer n + sum_i max(0, slope_i n + offset_i)
    (module docstring)."""

    per_layer: float
    parts: tuple[tuple[float, float], ...]

    def subsets(self, most: int) -> list[tuple[int, ...]]:
        """The subsets of parts whose partial sums need a row over 1..most layers: a part positive at both ends is
        affine there and in every subset, one never positive in none; only the parts that change sign in between
        are chosen (no subset when nothing can be positive: the domain gather_wait >= 0 holds it)."""
        ends = [(slope + offset, slope * most + offset) for slope, offset in self.parts]
        always = tuple(i for i, (low, high) in enumerate(ends) if min(low, high) >= 0)
        crossing = [i for i, (low, high) in enumerate(ends) if min(low, high) < 0 < max(low, high)]
        chosen = [always + s for size in range(len(crossing) + 1) for s in combinations(crossing, size)]
        return [s for s in chosen if s or self.per_layer > 0]

    def slope(self, subset: tuple[int, ...]) -> float:
        return self.per_layer + sum(self.parts[i][0] for i in subset)

    def offset(self, subset: tuple[int, ...]) -> float:
        return sum(self.parts[i][1] for i in subset)


def gather_wait_terms(gpu: GPUCosts, variant: DPVariant, windows: tuple[tuple[GatherWindow, float], ...], chunks: int,
                      stages: int) -> GatherWait:
    """`GatherWait` of a rank on building cost table `gpu` from its steady-state `windows` (`gather_windows`), its
    chunks holding n / `chunks` layers each of the `stages` virtual stages'. Windows alike in what they hold (the
    embedding on virtual stage 0, the LM head on the last), what op runs before and how many sends are one part
    (k of them: max(0, k (slope n + offset))); parts of plain layers and no sends are linear (per_layer). For a
    variant that re-gathers before every pass (FSDP, HSDP)."""
    a, layer = gpu.gather_s_per_layer[variant], gpu.layer
    fixed = [(0, gpu.embedding_dp.gather_s[variant], gpu.first_stage_extra),
             (stages - 1, gpu.head_dp.gather_s[variant], gpu.last_stage_extra)]

    def held(stage: int) -> list[tuple[float, OpTimes]]:
        """(gather, ops) of the embedding and head virtual stage `stage` holds (both with one stage)."""
        return [(gather, ops) for at, gather, ops in fixed if at == stage]

    kinds: Counter = Counter()
    for w, count in windows:
        kinds[w.stage if held(w.stage) else -1, w.previous[0] if held(w.previous[0]) else -1, w.previous[1],
              w.sends] += count
    per_layer, parts = 0.0, []
    for (stage, before, kind, sends), count in kinds.items():
        slope = count * (a - layer.of(kind)) / chunks
        offset = count * (sum(g for g, _ in held(stage)) - sum(ops.of(kind) for _, ops in held(before))
                          - sends * gpu.p2p_intra_s)
        if stage == before == -1 and sends == 0:
            per_layer += max(0.0, slope)
        else:
            parts.append((slope, offset))
    return GatherWait(per_layer, tuple(parts))


def add_gather_waits(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    """Vars gather_wait[j] and the rows gather_wait_bound, gather_wait_cycle (module docstring)."""
    most = ctx.instance.model_spec.layers - ctx.shape.pp + 1
    shape = ctx.shape

    def terms(gpu: GPUCosts, j: int, v: int, o: int) -> GatherWait:
        option = ctx.options[o]
        if gather_passes(ctx.variants[v].mode) < 2:
            return GatherWait(0.0, ())
        windows = gather_windows(option.schedule, shape.pp, shape.microbatches, option.chunks, option.merged)[j]
        return gather_wait_terms(gpu, ctx.variants[v], windows, option.chunks, shape.pp * option.chunks)

    @cache
    def wait_rows(group: str, j: int, v: int, o: int) -> list[tuple[float, float, KindExcess]]:
        """(slope, offset, layer-kind excess slopes) of each partial-sum row of stage j in price group `group`."""
        wait = terms(ctx.gpu(group), j, v, o)
        return [(wait.slope(s), wait.offset(s), ctx.kind_excess(
            lambda costs, s=s: terms(costs.building(group), j, v, o).slope(s))) for s in wait.subsets(most)]

    alike = len(ctx.price_groups) == 1  # one cost table: the rows of one building, without the holding condition
    rows_of = {(j, k, v, o): wait_rows(ctx.price_group[k], j, v, o)
               for j in m.J for k in (ctx.buildings[:1] if alike else m.K) for v in m.V for o in m.O}
    if not any(rows_of.values()):
        return
    big = max(max(0.0, slope) * most + max(0.0, offset) + excess.most * most
              for rows in rows_of.values() for slope, offset, excess in rows)
    m.gather_wait = pyo.Var(m.J, domain=pyo.NonNegativeReals)
    rows = []
    for (j, k, v, o), entries in rows_of.items():
        off = (0 if alike else 1 - m.y[j, k]) + (1 - m.w[v] if len(m.V) > 1 else 0) + (
            1 - m.u[o] if len(m.O) > 1 else 0)
        rows += [m.gather_wait[j] >= slope * m.n[j] + offset + excess_s(m, j, excess) - big * off
                 for slope, offset, excess in entries]
    add_rows(m, "gather_wait_bound", rows)
    m.gather_wait_cycle = pyo.Constraint(m.J, rule=lambda m, j: m.cycle >= m.Cst[j] + m.gather_wait[j])


def start_terms(training: Training, gpu: GPUCosts, variant: DPVariant) -> tuple[float, float]:
    """`costmodel.dp.start_gather_terms` of one layer on `gpu`: (per layer, per stage) of a chunk's start gather."""
    return start_gather_terms(training, variant, gpu.gather_s_per_layer[variant], gpu.layer.forward_s)


def add_chunk_gather_waits(m: pyo.ConcreteModel, ctx: ShapeContext, bounds: dict[str, float],
                           head_start: Callable[[int, float], object]) -> None:
    """Vars chunk_wait[o], chunk_last[o] and rows chunk_wait_bound, chunk_last_bound, fill_gather_bound on
    fill_gathers (the pipeline's makespan rows add it, `pipeline`; module docstring). Under an option o of c > 1
    chunks per rank, the first forward of each chunk after the first waits for its gather, issued at the end of the
    op two before, which hides only the op before, a forward of the chunk before, F_c = sigma_c Cst[j] (sigma_c =
    f / (c (f + i + w))), and its send. The first microbatch's forwards wait once per chunk boundary, at rank 0,
    whose chunk gathers last (the later ranks' waits hide behind it), and at the last boundary on the rank that
    waits longest: the ranks issue their last chunks' gathers at about the same time, as their warm-up forwards
    end, so the first microbatch meets the longest of their waits: at equal stages and fabrics rank 0's (the turn
    of the V under ZB-V) or, under interleaving, rank p - 1's, whose last chunk holds the head; on a rank in a
    building whose fabric gathers slower than the fastest's, possibly its own. With x_j = (n[j] / c) g'[k,v] +
    c[k,v] - sigma_c Cst[j] - p2p at the holder k and variant v,
        chunk_wait[o] >= x_0                                   - M (1 - y[0,k]) - M (1 - w[v])   (chunk_wait_bound)
        chunk_last[o] >= x_j + H_o[j] gH[k,v]                  - the same                       (chunk_last_bound)
    for j = 0 (and p - 1 under interleaving) at every building k, and every other j at the buildings whose (g',
    c) exceed the least over the shape's buildings (but rank p - 1 under ZB-V, whose second chunk follows its first
    forward: with no op two before, its gather goes out at the start, behind the fill)
        fill_gathers >= (c - 2) chunk_wait[o] + chunk_last[o] - M (1 - u[o])                      (fill_gather_bound)
    (g', c: `start_gather_terms`; H_o[j]: the head on stage j under o; M: `big_m_bounds`' cycle_most, c of it in
    fill_gather_bound; none for a variant gathering after the step or not at all). Bundled campus-2b's interleaved
    v = 4 plan's first microbatch waited 113 ms on them in its replay, generated medium seed 65's ZB-V plan 72 ms.
    Generated medium seed 180's ZB-V plan, 24 stages of which 19-21 in a building whose fabric gathers a chunk in
    0.56 s (0.04 s at rank 0's), waited 0.55 s at rank 19 and was priced 4.1 % below its replay with rank 0's rows
    alone.
    A later chunk's parameters held in another building cross the links too (`traffic`: chunk_gathers, every rank's
    gathers of one later chunk on the busiest arc, issued within the first microbatch's forwards of the chunk
    before and sharing the links): the link is done with them no earlier, and the rank whose gather that is needs it
    no later than rank p - 1 does, head_start(p - 1, 1 / c) after rank 0 (its share of the earlier stages'
    forwards), so with F_c and p2p as above
        chunk_wait[o], chunk_last[o] >= chunk_gathers - sigma_c Cst[0] - p2p - head_start(p - 1, 1 / c)
                                        - M' (1 - u[o])                                    (chunk_wait_cross)
    (M' = M + dp_time, c M' in fill_gather_bound then). A TP 8 PP 2 interleaved v = 2 layout split over two halls
    on 100 Gb/s waited 0.30 s at its chunk boundary in its replay and was priced 11.5 % below it without them."""
    chunked = [o for o, option in enumerate(ctx.options) if option.chunks > 1]
    training, layer = ctx.instance.training, ctx.gpu(ctx.buildings[0]).layer
    gathered = [v for v, var in enumerate(ctx.variants) if not params_gathered_at_end(training, var)
                and any(ctx.gpu(k).gather_s_per_layer[var] > 0 for k in ctx.buildings)]
    cross = hasattr(m, "chunk_gathers")
    if not chunked or not (gathered or cross):
        return
    send = min(ctx.gpu(k).p2p_intra_s for k in ctx.buildings)
    big, last = bounds["cycle_most"], ctx.shape.pp - 1
    wide = big + (bounds["dp_time"] if cross else 0.0)
    terms = {(k, v): start_terms(training, ctx.gpu(k), ctx.variants[v]) for k in m.K for v in gathered}
    least = {v: tuple(map(min, zip(*(terms[k, v] for k in m.K), strict=True))) for v in gathered}
    slower = {v: {k for k in m.K if any(t > low for t, low in zip(terms[k, v], least[v], strict=True))}
              for v in gathered}

    def unit(j: int, k: str, v: int, option: ScheduleOption):
        """x_j at holder k and variant v, with what each row leaves off when its choice is not made."""
        group, var, c = ctx.price_group[k], ctx.variants[v], option.chunks
        per_layer, bucket = terms[k, v]
        excess = ctx.kind_excess(lambda costs: start_terms(training, costs.building(group), var)[0]) / c
        off = (1 - m.y[j, k]) + (1 - m.w[v] if len(m.V) > 1 else 0)
        return (per_layer / c * m.n[j] + excess_s(m, j, excess) + bucket
                - option.chunk_forward_share(layer) * m.Cst[j] - send - big * off)

    m.chunk_wait = pyo.Var(chunked, domain=pyo.NonNegativeReals)
    m.chunk_last = pyo.Var(chunked, domain=pyo.NonNegativeReals)
    waits, lasts, fills, crossing = [], [], [], []
    for o in chunked:
        option = ctx.options[o]
        c = option.chunks
        ends = [0] if option.schedule is Schedule.zb_v else sorted({0, last})
        others = [j for j in m.J if j not in ends and (j < last or option.schedule is not Schedule.zb_v)]
        for k in m.K:
            for v in gathered:
                waits.append(m.chunk_wait[o] >= unit(0, k, v, option))
                ranks = ends + (others if k in slower[v] else [])
                lasts += [m.chunk_last[o] >= unit(j, k, v, option) + ctx.gpu(k).head_dp.gather_s[ctx.variants[v]]
                          * head_on(m, ctx, j, lambda candidate, option=option: candidate is option) for j in ranks]
        chosen = 0.0 if len(m.O) == 1 else wide * (1 - m.u[o])
        fills.append(m.fill_gathers >= (c - 2) * m.chunk_wait[o] + m.chunk_last[o] - c * chosen)
        if cross:
            meets = m.chunk_gathers - option.chunk_forward_share(layer) * m.Cst[0] - send - head_start(last, 1.0 / c)
            meets -= chosen
            crossing += [m.chunk_wait[o] >= meets, m.chunk_last[o] >= meets]
    add_rows(m, "chunk_wait_bound", waits)
    add_rows(m, "chunk_wait_cross", crossing)
    add_rows(m, "chunk_last_bound", lasts)
    add_rows(m, "fill_gather_bound", fills)


def gathered_op_share(ctx: ShapeContext, option: ScheduleOption) -> float:
    """sigma_o: the largest share of a stage's time in one op that waits on a parameter gather (docstring)."""
    layer = ctx.gpu(ctx.buildings[0]).layer
    f, i, w = layer.forward_s, layer.backward_input_s, layer.backward_weight_s
    split = option.schedule in (Schedule.zb_h1, Schedule.zb_v)
    return max(f, i if split else i + w) / layer.total_s


def add_cross_gather_waits(m: pyo.ConcreteModel, ctx: ShapeContext, cycle_s: float) -> None:
    """Vars span, span_to and the rows span_to_bound, span_bound, cross_gather_wait (module docstring); none without
    per-microbatch gathers (`traffic`: gxt)."""
    if not hasattr(m, "gxt"):
        return
    options = list(m.O)
    sigma = [gathered_op_share(ctx, ctx.options[o]) for o in options]
    big = cycle_s  # gxt / 2 + sigma Cst[j] <= `build.big_m_bounds`' cycle, so the row is slack off its choice
    targets = {a: route_targets(ctx.routes.pairs_over(a)) for a in m.A}
    m.span = pyo.Var(m.J, m.A, bounds=(0.0, 1.0))
    m.span_to = pyo.Var([(j, i, d, g) for j in m.J for i, d in m.A for g in range(len(targets[i, d]))],
                        bounds=(0.0, 1.0))
    to_rows, span_rows, rows = [], [], []
    for a in m.A:
        for g, (sources, reached) in enumerate(targets[a]):
            for j in m.J:
                to = m.span_to[j, a[0], a[1], g]
                to_rows += [to >= m.y[j, t] for t in reached]
                span_rows += [m.span[j, a] >= m.y[j, s] + to - 1 for s in sources]
        for j in m.J:
            rows += choice_lower_bounds(m.cycle - 0.5 * m.gxt[a] + big * (1 - m.span[j, a]),
                                        [(sigma, m.Cst[j])], m.u, options, big)
    add_rows(m, "span_to_bound", to_rows)
    add_rows(m, "span_bound", span_rows)
    add_rows(m, "cross_gather_wait", rows)
    if ctx.shape.pp == 1:
        add_accumulation_gather_waits(m, ctx, cycle_s)
    else:
        add_gather_streams(m, ctx, cycle_s)


def arc_latency_s(ctx: ShapeContext, arc: tuple[int, int]) -> float:
    """lambda_a: the least route latency over the building pairs whose route crosses `arc`."""
    return min((ctx.routes.latency_s[pair] for pair in ctx.routes.pairs_over(arc)), default=0.0)


def gathering_every_pass(m: pyo.ConcreteModel, ctx: ShapeContext):
    """sum_v w[v] over the variants that gather parameters across buildings every pass
    (`volumes.gathers_every_pass`)."""
    return sum(m.w[v] for v in m.V if gathers_every_pass(ctx, v))


def add_gather_streams(m: pyo.ConcreteModel, ctx: ShapeContext, cycle_s: float) -> None:
    """Rows cross_gather_stream (module docstring): a rank's all-gathers of one microbatch, in order, each after the
    longest route its stage spans, per stage, arc and chunk count c."""
    gathering = gathering_every_pass(m, ctx)
    chosen = {c: sum(m.u[o] for o in m.O if ctx.options[o].chunks == c) for c in {o.chunks for o in ctx.options}}
    big = cycle_s + 2 * max(chosen) * max(ctx.routes.latency_s.values(), default=0.0)  # gxt <= cycle_s
    m.cross_gather_stream = pyo.Constraint(
        [(j, i, d, c) for j in m.J for i, d in m.A for c in chosen], rule=lambda m, j, i, d, c: m.cycle >= (
            m.gxt[i, d] + 2 * c * m.span_latency[j] - big * (3 - m.span[j, i, d] - chosen[c] - gathering)))


def add_accumulation_gather_waits(m: pyo.ConcreteModel, ctx: ShapeContext, cycle_s: float) -> None:
    """Rows accumulation_gather_wait, one pipeline stage (gradient accumulation: F and B alternate on the one rank).
    Its 2 m gathers on arc a run in order (`cross_gather_stream`), each after its route's latency lambda_a; the first
    is the start's (gather0, before Tpipe) and the last backward B = sigma_B Cst[0] runs after the last of them:
        Tpipe >= (m - 1/2) gxt[a] + (2 m - 1) lambda_a + sigma_B Cst[0] - M (1 - span[0,a]) - M (1 - sum_v w[v])
    (exact while the gathers outlast the ops; M = m (`cycle_s` + 2 lambda_a) + `cycle_s`, `build.big_m_bounds`' cycle
    bounding gxt and Cst). A TP 8 DP 8 FSDP job split over two halls on 400 Gb/s was priced 4 % below its replay
    with the cycle rows alone (`tests/milp/test_cross_gathers.py`)."""
    layer = ctx.gpu(ctx.buildings[0]).layer
    backward = 1.0 - layer.forward_s / layer.total_s
    mb = ctx.shape.microbatches
    gathering = gathering_every_pass(m, ctx)

    def row(m: pyo.ConcreteModel, i: int, d: int):
        latency = arc_latency_s(ctx, (i, d))
        big = mb * (cycle_s + 2 * latency) + cycle_s
        return m.Tpipe >= ((mb - 0.5) * m.gxt[i, d] + (2 * mb - 1) * latency + backward * m.Cst[0]
                           - big * (2 - m.span[0, i, d] - gathering))

    m.accumulation_gather_wait = pyo.Constraint(m.A, rule=row)


def route_targets(pairs: list[tuple[str, str]]) -> list[tuple[list[str], list[str]]]:
    """`pairs` (s, t) as (sources, targets) groups: the sources whose targets are the same set, with that set, so
    that every pair is one source and one target of one group (a route tree cut by an arc gives one group)."""
    reached: dict[str, list[str]] = {}
    for s, t in pairs:
        reached.setdefault(s, []).append(t)
    groups: dict[tuple[str, ...], list[str]] = {}
    for s, targets in reached.items():
        groups.setdefault(tuple(sorted(targets)), []).append(s)
    return [(sources, list(targets)) for targets, sources in groups.items()]


def stage_forwards(m: pyo.ConcreteModel, ctx: ShapeContext) -> list:
    """Per stage j, what its layers' forward takes at least on the first microbatch's way through it (the head start
    of the later stages' start gathers, gather0): n[j] tauF on the GPU type of a building holding it. One linear term
    when every building's layer forward is the same or no variant gathers at the start; else var stage_forward[j]
    with rows (stage_forward_bound)
        stage_forward[j] <= n[j] tauF_k + M (1 - y[j,k])   for every building k    (M = (L - p + 1) max_k tauF_k)
    so it is at most the least over the buildings holding stage j (the pipeline whose later stage gathers longest
    may run its earlier stages there). Taken at the fastest type anywhere, generated medium seed 66's start was
    priced 0.617 s where its replay waits 0.214 s: the B200 head start credited to 25 stages on H100s and A100s."""
    tau = {k: ctx.gpu(k).layer.forward_s for k in ctx.buildings}
    gathered = any(any(start_terms(ctx.instance.training, ctx.gpu(k), var)) for k in ctx.buildings
                   for var in ctx.variants)
    if len(set(tau.values())) == 1 or not gathered:  # one type, or no start gather to hide
        return [min(tau.values()) * m.n[j] for j in m.J]
    big = (ctx.instance.model_spec.layers - ctx.shape.pp + 1) * max(tau.values())
    m.stage_forward = pyo.Var(m.J, domain=pyo.NonNegativeReals)
    add_rows(m, "stage_forward_bound", [m.stage_forward[j] <= tau[k] * m.n[j] + big * (1 - m.y[j, k])
                                        for j in m.J for k in m.K])
    return [m.stage_forward[j] for j in m.J]


def add_iteration(m: pyo.ConcreteModel, ctx: ShapeContext, bounds: dict[str, float]) -> None:
    leads = drain_leads(ctx)
    add_credit_caps(m, ctx, list(m.J) if leads else [0])
    if leads:
        add_drain_leads(m, ctx, leads, bounds)
    add_rank_zero_lag(m, ctx, leads, bounds)
    add_intra_dp_sync(m, ctx)
    _slowest_holder(m, ctx, "opt", lambda gpu, var: gpu.optimizer_s_per_layer[var], lambda fixed: fixed.optimizer_s)
    _slowest_holder(m, ctx, "gather", lambda gpu, var: gather_passes(var.mode) * gpu.gather_s_per_layer[var],
                    lambda fixed: {var: gather_passes(var.mode) * s for var, s in fixed.gather_s.items()})
    m.gather_cycle = pyo.Constraint(expr=m.cycle >= m.gather)
    fastest = [ctx.gpu(k) for k in ctx.buildings]
    send = min(gpu.p2p_intra_s for gpu in fastest) if ctx.shape.pp > 1 else 0.0
    embedding = min(gpu.first_stage_extra.forward_s for gpu in fastest)
    training = ctx.instance.training
    forward = stage_forwards(m, ctx)

    def head_start(j: int, share: float) -> object:
        """What runs before stage j's first forward: the earlier stages' first chunks' forwards, sends, embedding."""
        return sum(share * forward[i] + send for i in range(j)) + (embedding if j else 0.0)

    add_gather_waits(m, ctx)
    add_chunk_gather_waits(m, ctx, bounds, head_start)
    add_cross_gather_waits(m, ctx, bounds["cycle"])
    _slowest_holder(m, ctx, "gather0", lambda gpu, var: start_terms(training, gpu, var)[0],
                    lambda fixed: fixed.gather_s, lambda option: option.chunks == 1, head_start=head_start,
                    per_stage={(g, v): start_terms(training, ctx.gpu(g), var)[1]
                               for g in ctx.price_groups for v, var in enumerate(ctx.variants)},
                    at_end=[params_gathered_at_end(training, var) for var in ctx.variants],
                    first_chunk=True)
    add_dp_overlap(m, ctx, leads, bounds)
    add_shared_start(m, ctx, head_start, bounds["dp_time"])
    m.T = pyo.Var(domain=pyo.NonNegativeReals)
    m.iteration = pyo.Constraint(expr=m.Tpipe - m.lag0 + m.dp_exposed + m.opt + m.gather0 <= m.T)
    if not m.lag0.fixed:
        m.iteration_lagged = pyo.Constraint(expr=m.Tpipe + m.opt + m.gather0 <= m.T)
    m.link_bound = pyo.Constraint(m.A, rule=lambda m, i, d: m.busy[i, d] <= m.T)
