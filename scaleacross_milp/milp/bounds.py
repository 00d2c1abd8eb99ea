"""Lower bounds per shape, valid for the shape's MILP (the necessary conditions are in `screen`; admissible
(schedule option, DP variant) pairs, `context.admissible`, are found once and carried on the shape's context).
A shape not yet priced is bounded by its compute floor (`compute_floor_s`), which reads only per-cell costs.

Lower bound, per admissible (o, v), from the MILP's own rows (see formulation.pipeline and .iteration): with
SC = sum_j Cst[j] >= S = L tau_s + sum_j min_k e[j,k] (every layer at the least pace a stage can run at,
`type_floors_s`: the fastest GPU type that holds a whole stage) and
cycle >= c0 = max(S / p, `cycle_floor_s`) (capacity of the fast buildings, integer layers), C0 <= Cst[0] <= cycle,
    T >= m cycle + B_o(SC, cycle) + max(0, max_i share_i dpi - credit_i C0) + opt,
B_o(S, c) = max(0, max_k sigma_k S - gamma_k c) the bubble the MILP's rows allow (`ShapeContext.bubble_lines`:
(beta_o, beta_o), or from ZB-H1's rank paths),
and, as some stage holds ceil(L/p) layers, dpi >= min_k min_{n >= ceil(L/p)} f_{k,v,o}(n) (the MILP's
piecewise-linear DP term, context.dp_sync_floor_s; where the option prices each later stage's reduction from its own
rank's end, `ShapeContext.drain_leads`, dpi is stage 0's, at g_o layers at least, or at ceil(L/p) with B_o less
that stage's lead, `drained_bubble_s`, in its place) and
opt >= ceil(L/p) min_k o[k,v]. The right side grows with SC,
so SC = S; in the cycle c it is convex piecewise linear, least at c0 or a kink above it (`pipeline_floor_s`):
    T >= opt_v + gather0_v + max(min_c [m c + B_o(S, c)],
                                 max_i (min_c [... - credit_i min(c, S)] + share_i dpi_v)),
with the gathers' own floors cycle >= passes_v ceil(L/p) min_k g[k,v] and gather0_v >= s_o g_o min_k g[k,v] (stage 0
holds at least the option's granularity g_o of layers, the start waits for the share s_o of them in the first
chunk, `start_gather_share`), (share_i, credit_i) the suffixes of the chunks rank 0 reduces last under option o
(`ScheduleOption.reduction_suffixes`), as in the MILP's rows (min over c of a max is at least the max of the mins).
Under an option that `lags` (ZB-V) rank 0's reduction counts from its own end, which T takes up to the bubble off
(the MILP's lag0 <= bubble): its terms sit on m c without B_o (`pair_bounds_s`, `pipeline_and_gathers_s`' lagged).
The shape's bound is the minimum over admissible pairs. Fixed stage times e[j,k] put the LM head on the stage the
option runs it on (`ShapeContext.head_stage`: stage 0 under ZB-V's V map) with the option's sends; a floor takes
the least over the options with the same head stage, or over every option where none is fixed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx
import numpy as np

from scaleacross_milp.costmodel import memory
from scaleacross_milp.costmodel.costs import DPVariant, OpTimes
from scaleacross_milp.costmodel.dp import dp_cross_phases, start_gather_share, start_gather_terms
from scaleacross_milp.costmodel.price import held_usd_per_s
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.milp.context import ShapeContext, attainable, stage_memory_table, stage_room_table
from scaleacross_milp.milp.routes import RouteTable
from scaleacross_milp.milp.volumes import (
    GB,
    cross_volumes,
    drain_layer_s,
    drain_share,
    fixed_grad_gb,
    gather_passes,
    layer_grad_gb,
    stage_grad_gb,
    timed_volumes,
)
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.topology import Link


def _speed_groups(ctx: ShapeContext, head: int | None = None) -> list[tuple[float, int, tuple[float, float, float]]]:
    """(tau_t, a_t, (e_first, e_mid, e_last)) per GPU layer time tau_1 < tau_2 < ...: at most a_t = floor(cells in
    buildings with tau <= tau_t / D) stages avoid every slower type; e_* are the smallest fixed stage times of the
    type's buildings for stage 0, a stage between, and the last stage, least over the options that run the LM
    head on stage `head` (`ShapeContext.head_stage`), or over every option without one. Found once per shape and
    head (`ShapeContext.bound_tables`)."""
    key = ("speed groups", head)
    if key not in ctx.bound_tables:
        ctx.bound_tables[key] = _find_speed_groups(ctx, head)
    return ctx.bound_tables[key]


def _find_speed_groups(ctx: ShapeContext, head: int | None) -> list[tuple[float, int, tuple[float, float, float]]]:
    p = ctx.shape.pp
    fixed = ctx.stage_fixed_floor_table[head][[0, min(1, p - 1), p - 1]]
    classes = ctx.layer_time_classes
    limits = stage_class_limits([room for _, _, room in classes], ctx.shape)
    return [(tau, limit, tuple(float(e) for e in fixed[:, where].min(axis=1)))
            for (tau, where, _), limit in zip(classes, limits, strict=True)]


def stage_class_limits(rooms: list[int], shape: Shape) -> list[int]:
    """a_t = min(p, floor((rooms[0] + ... + rooms[t]) / D)): with `rooms` the stage cells of each GPU layer time,
    fastest first, at most a_t of the shape's p stages (D cells each) avoid every type slower than the t-th, since
    such a stage's cells all sit in buildings of the t fastest layer times."""
    held = itertools.accumulate(rooms)
    return [min(shape.pp, cells // shape.cells_per_stage) for cells in held]


def type_floors_s(layers: int, shape: Shape, classes: list[tuple[float, int]]) -> tuple[float, float]:
    """(tau_s, c_s): the least time per layer and microbatch of any stage, and the least cycle, that the GPU types a
    shape must use allow, from (tau_t, stage cells) per layer time, fastest first, a_t their class limits
    (`stage_class_limits`). A stage runs at its slowest holder's pace (Cst[j] >= n_j tau_k for every holder k), so
    every stage is as slow as the first tau_t with a_t >= 1 at least: tau_s; and at cycle c a stage of class t holds
    n_j <= c / tau_t layers (cycle >= Cst[j]), so L <= c sum_j 1 / tau_class(j), whose largest value over the limits
    fills the fastest classes first (a_t - a_{t-1} stages in class t):
        c_s = L / sum_t (a_t - a_{t-1}) / tau_t.
    Where the fastest type holds every stage these are tau_1 and L tau_1 / p; where its halls hold only some of the
    shape's stages (or none), the slower types' stages raise them."""
    limits = stage_class_limits([cells for _, cells in classes], shape)
    least = next((tau for (tau, _), limit in zip(classes, limits, strict=True) if limit >= 1), math.inf)
    speed = sum((limit - before) / tau
                for (tau, _), limit, before in zip(classes, limits, [0, *limits[:-1]], strict=True))
    return least, layers / speed if speed > 0 else math.inf


@lru_cache(maxsize=4096)
def _middle_counts(prefix: tuple[int, ...], stages: int) -> list[list[int]]:
    """Every greedy way to give `stages` stages a speed class under nested limits (at most prefix[t] stages in
    classes <= t), one per order of filling the classes; the best order for given capacities is among them. Found
    once per (limits, stages): the enumeration is over orders of the classes, and every shape of an instance asks
    for the same few."""
    ways = []
    for order in itertools.permutations(range(len(prefix))):
        counts = [0] * len(prefix)
        for t in order:
            room = min(prefix[u] - sum(counts[: u + 1]) for u in range(t, len(prefix)))
            counts[t] = max(0, min(room, stages - sum(counts)))
        if sum(counts) == stages:
            ways.append(counts)
    return ways


def cycle_floors_s(ctx: ShapeContext, first_layers: np.ndarray | None = None, grain: int = 1,
                   rooms: np.ndarray | None = None, head: int | None = None) -> np.ndarray:
    """c0 (one value), or c(n0) for each given layer count n0 of stage 0: no cycle is shorter.

    At cycle c a stage with fixed time e on a GPU type with layer time tau holds at most
    cap(c) = floor((c - e) / tau) layers, a multiple of the schedule's layer granularity `grain`, and at least one
    (a stage split over types is bounded by its slowest). Stage positions have their own fixed times (e_first:
    embedding, e_last: LM head, e_mid between); every stage, the first and last included, is given a speed
    class (the slowest GPU type it touches) within the limits of `_speed_groups`, the best way: the first and last
    stages' classes are enumerated and the p - 2 stages between fill the limits they leave. c0 is the smallest c at
    which the capacities reach L; with stage 0 fixed at n0 layers, c(n0) is the smallest c >= min_t(tau_t n0 +
    e_first,t) at which the others reach L - n0. A stage j also holds at most `rooms`[j] layers (what fits in HBM,
    `stage_rooms`), so the stages between hold at most sum_j min(cap_fastest(c), rooms[j]) as well. Fixed times
    have the LM head on `head` (`_speed_groups`). Found once per shape and arguments (`ShapeContext.bound_tables`).
    """
    key = ("cycle floors", None if first_layers is None else np.asarray(first_layers, dtype=float).tobytes(), grain,
           None if rooms is None else np.asarray(rooms, dtype=float).tobytes(), head)
    if key not in ctx.bound_tables:
        floors = _find_cycle_floors(ctx, first_layers, grain, rooms, head)
        floors.flags.writeable = False
        ctx.bound_tables[key] = floors
    return ctx.bound_tables[key]


def _find_cycle_floors(ctx: ShapeContext, first_layers: np.ndarray | None, grain: int, rooms: np.ndarray | None,
                       head: int | None) -> np.ndarray:
    p, layers = ctx.shape.pp, ctx.instance.model_spec.layers
    most = layers - p + 1
    groups = [g for g in _speed_groups(ctx, head) if g[1] > 0]
    if not groups:
        return np.full(1 if first_layers is None else len(first_layers), math.inf)
    candidates = np.unique(np.concatenate([
        e + tau * np.arange(1, most + 1) for tau, _, fixed in groups for e in fixed]))

    def cap(tau: float, e: float) -> np.ndarray:
        held = np.minimum(np.floor((candidates - e) / tau + 1e-9), most) // grain * grain
        return np.where(held >= 1, held, -np.inf)

    rooms = np.full(p, float(most)) if rooms is None else np.minimum(rooms, most)
    classes = range(len(groups))
    first = [np.minimum(cap(tau, fixed[0]), rooms[0]) for tau, _, fixed in groups]
    last = [np.minimum(cap(tau, fixed[2]), rooms[-1]) for tau, _, fixed in groups]
    middle = [cap(tau, fixed[1]) for tau, _, fixed in groups]
    middle_rooms = np.minimum(np.max(middle, axis=0)[:, None], rooms[None, 1:-1]).sum(axis=1)
    reachable = np.where(np.isfinite(middle), middle, UNREACHABLE)  # a way using a class that holds no layer at c
    n0 = None if first_layers is None else np.asarray(first_layers, dtype=float)[:, None]
    holds = np.zeros(candidates.shape if n0 is None else (len(n0), len(candidates)), dtype=bool)
    for head, tail in itertools.product(classes, classes if p > 1 else [None]):
        left = tuple(groups[u][1] - (head <= u) - (tail is not None and tail <= u) for u in classes)
        ways = _middle_counts(left, max(p - 2, 0)) if min(left) >= 0 else []
        if not ways:
            continue
        rest = np.max(np.asarray(ways, dtype=float) @ reachable, axis=0)
        rest = np.minimum(rest, middle_rooms) + (last[tail] if tail is not None else 0.0)
        if n0 is None:
            holds |= first[head] + rest >= layers
        else:
            tau, _, fixed = groups[head]
            holds |= (rest[None, :] >= layers - n0) & (candidates[None, :] >= tau * n0 + fixed[0] - 1e-12) & (
                n0 <= rooms[0])
    if n0 is None:
        return np.array([candidates[np.argmax(holds)] if holds.any() else math.inf])
    return np.where(holds.any(axis=1), candidates[np.argmax(holds, axis=1)], math.inf)


def head_stages(ctx: ShapeContext) -> list[int]:
    """The stages the shape's schedule options run the LM head on."""
    return sorted({ctx.head_stage(o) for o in ctx.options})


def cycle_floor_s(ctx: ShapeContext, head: int | None = None) -> float:
    """c0 of `cycle_floors_s`, at the finest layer granularity among the shape's schedule options, with the LM head
    on stage `head` (the least over the options' head stages without one)."""
    if head is None:
        return min(cycle_floor_s(ctx, h) for h in head_stages(ctx))
    return float(cycle_floors_s(ctx, grain=min(o.layer_granularity for o in ctx.options), head=head)[0])


def stage_floors_s(ctx: ShapeContext, head: int | None = None) -> tuple[float, float]:
    """(S, c0): the smallest sum of per-microbatch stage times (every layer at the least pace a stage can run at,
    `type_floors_s`), and the smallest cycle, with the LM head on stage `head` (the least over the options' head
    stages without one)."""
    if head is None:
        floors = [stage_floors_s(ctx, h) for h in head_stages(ctx)]
        return min(total for total, _ in floors), min(cycle for _, cycle in floors)
    p, layers = ctx.shape.pp, ctx.instance.model_spec.layers
    tau, _ = type_floors_s(layers, ctx.shape, [(tau, cells) for tau, _, cells in ctx.layer_time_classes])
    fixed = ctx.stage_fixed_table[ctx.head_options(head)].min(axis=(0, 2))
    total = layers * tau + float(fixed.sum())
    return total, max(total / p, cycle_floor_s(ctx, head))


def screening_bubble(option: ScheduleOption, layer: OpTimes, pp: int) -> float:
    """A bubble coefficient valid for `compute_floor_s` under `option`: beta_o, or under rank paths
    (`ShapeContext.bubble_lines`) the line of rank p - 1's, whose other ranks run one forward each and whose own
    ops run all m microbatches: bubble >= F (S - c) (F: a layer's forward share)."""
    if option.has_rank_paths(pp):
        return layer.forward_s / layer.total_s
    return option.bubble_coefficient(layer)


def bubble_floor_s(lines: tuple[tuple[float, float], ...], total: float, cycle):
    """max(0, max_k sigma_k S - gamma_k c): the bubble `ShapeContext.bubble_lines` allow at stage times summing to
    S = `total` and cycle c = `cycle` (a number or an array)."""
    c = np.asarray(cycle, dtype=float)
    return np.maximum(0.0, np.max([sigma * total - gamma * c for sigma, gamma in lines], axis=0))


def drained_bubble_s(ctx: ShapeContext, option: ScheduleOption, lines: tuple[tuple[float, float], ...], total: float,
                     cycle: np.ndarray, first_low: np.ndarray, first_most: np.ndarray, held: np.ndarray) -> np.ndarray:
    """The least bubble - lead[j] the MILP's rows allow under `option` (drain leads, `ShapeContext.drain_leads`)
    over the later stages j, at each entry's cycle c: what a later stage j holding the most layers leaves of the bubble
    once its lead, which its intra-building sync counts only beyond, is taken off. With lead[j] <= max(0, L_j),
    L_j = a_j sum_{r<j} C_r + b_j C_0 - k_j Cst[j], C_r <= Cst[r] <= c, C_0 <= `first_most`, and per bubble line
    bubble >= sigma S - gamma c (`lines`, `ShapeContext.bubble_lines`; S = sum_r Cst[r] >= `total`):
        bubble - lead[j] >= min_Cst min(sigma S - gamma c, sigma S - gamma c - L_j)
    and the inner minimum, linear in the stage times, is a greedy fill: each stage time at its low end (`first_low`
    for stage 0, `held` layers at the fastest layer time for stage j, one granule for the others) where its
    coefficient in sigma S - L_j is >= 0, at c where it is < 0, then raised cheapest first until S >= `total`.
    The result is max(0, the largest line's) per j (lead[j] <= bubble), least over j >= 1: nonincreasing in c,
    as every stage time's room grows with it."""
    leads = ctx.drain_leads(option)
    p = ctx.shape.pp
    tau = min(ctx.gpu(k).layer.total_s for k in ctx.buildings)
    c = np.asarray(cycle, dtype=float)
    per_rank = (-1,) + (1,) * c.ndim
    a, b, k = (np.array([lead[i] for _, lead in sorted(leads.items())]).reshape(per_rank) for i in range(3))
    before = np.arange(0, p - 1, dtype=float).reshape(per_rank)  # stages 1..j-1, for j = 1..p-1
    c = c[None]
    low0 = np.minimum(np.broadcast_to(first_low, c.shape[1:])[None], c)
    top0 = np.maximum(np.minimum(np.broadcast_to(first_most, c.shape[1:])[None], c), low0)
    own = np.minimum(np.broadcast_to(held, c.shape[1:])[None] * tau, c)
    grain = np.minimum(tau * option.layer_granularity, c)
    best = 0.0
    for sigma, gamma in lines:
        # (coefficient, low end, high end, count), in increasing coefficient: stage 0 up to C_0's cap, stages
        # 1..j-1, stage 0 beyond the cap, stages j+1..p-1, stage j
        flat = np.full_like(a, sigma)
        groups = [(sigma - a - b, low0, top0, 1.0), (sigma - a, grain, c, before), (flat, 0.0 * c, c - top0, 1.0),
                  (flat, grain, c, p - 2 - before), (sigma + k, own, c, 1.0)]
        value, filled = 0.0, 0.0
        for coef, low, high, count in groups:
            at = np.where(coef >= 0, low, high)
            value, filled = value + coef * at * count, filled + at * count
        deficit = np.maximum(0.0, total - filled)
        for coef, low, high, count in groups:
            step = np.minimum(deficit, np.where(coef >= 0, (high - low) * count, 0.0))
            value, deficit = value + coef * step, deficit - step
        best = np.maximum(best, np.minimum(sigma * total - gamma * c, value - gamma * c))
    return np.min(best, axis=0)


def least_drained_s(mb: int, drained, low: np.ndarray, high: np.ndarray, credits: tuple[float, ...] = (0.0,),
                    total: float = math.inf) -> np.ndarray:
    """Per credit (rows) and entry (columns), a floor of min over c in [low, high) of m c - credit min(c, total) +
    drained(c), `drained` taking cycles shaped (pieces, entries), nonincreasing in c and >= 0 (`drained_bubble_s`;
    an infinite `high`: no upper end): the interval cut into DRAINED_PIECES pieces [x_s, x_{s+1}), each at least min
    over the piece of the convex part plus drained(x_{s+1}); without an upper end the pieces reach x_S = low +
    drained(low) / m, beyond which the convex part alone is the floor. An infinite `low` (no cycle fits) gives an
    infinite floor."""
    given = np.asarray(low, dtype=float)
    finite = np.isfinite(given)  # an infinite low end (no cycle fits) stays infinite
    low = np.where(finite, given, 0.0)
    upper = np.where(finite, high, low)
    unbounded = ~np.isfinite(upper)
    end = upper.copy()
    if unbounded.any():
        end[unbounded] = low[unbounded] + drained(low[None])[0][unbounded] / mb
    points = low[None, :] + (end - low)[None, :] * np.linspace(0.0, 1.0, DRAINED_PIECES + 1)[:, None]
    later = drained(points[1:])
    floors = []
    for credit in credits:
        def part(x: np.ndarray, credit: float = credit) -> np.ndarray:
            return mb * x - credit * np.minimum(x, total)

        def least_part(x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
            return np.minimum(np.minimum(part(x0), part(x1)), part(np.clip(total, x0, x1)))

        pieces = np.min(least_part(points[:-1], points[1:]) + later, axis=0)
        tail = least_part(end, np.maximum(end, total)) if credit > mb else part(end)
        floors.append(np.where(finite, np.where(unbounded, np.minimum(pieces, tail), pieces), np.inf))
    return np.array(floors)


def drained_floors_s(ctx: ShapeContext, option: ScheduleOption, lines: tuple[tuple[float, float], ...], total: float,
                     cycle: float, held: int, credits: tuple[float, ...]) -> np.ndarray:
    """Per credit, min over c >= `cycle` of m c - credit min(c, S) + `drained_bubble_s` at a later stage of `held`
    layers, stage 0's time anywhere in [0, c]: the screening bound's pipeline under drain leads (`least_drained_s`)."""
    def drained(x: np.ndarray) -> np.ndarray:
        return drained_bubble_s(ctx, option, lines, total, x, 0.0, np.inf, held)

    return least_drained_s(ctx.shape.microbatches, drained, np.array([cycle]), np.array([np.inf]), credits,
                           total)[:, 0]


DRAINED_PIECES = 8
"""Pieces `least_drained_s` cuts an interval of cycles into."""


def pipeline_floor_s(mb: int, lines: tuple[tuple[float, float], ...], rho: float, total: float, cycle: float) -> float:
    """min over c >= cycle of m c + `bubble_floor_s`(lines, S, c) - rho min(c, S): convex and piecewise linear in c,
    least at `cycle`, at S or where a line crosses 0 or another line, above `cycle`."""
    kinks = [total] + [sigma * total / gamma for sigma, gamma in lines if gamma > 0] + [
        (s1 - s2) * total / (g1 - g2) for (s1, g1), (s2, g2) in itertools.combinations(lines, 2) if g1 != g2]
    c = np.maximum(cycle, np.array([cycle, *kinks]))
    return float(np.min(mb * c + bubble_floor_s(lines, total, c) - rho * np.minimum(c, total)))


def lower_bound_s(ctx: ShapeContext, pairs: list[tuple[ScheduleOption, DPVariant]]) -> float:
    """The shape's analytical lower bound over its admissible (option, variant) pairs (infinite if none): each pair's
    quick bound first, then its full one (`pair_bounds_s`) only for the pairs whose quick bound is below the least
    found."""
    bounds = {pair: pair_bounds_s(ctx, *pair) for pair in pairs}
    best = math.inf
    for quick, full in sorted(bounds.values(), key=lambda bound: bound[0]):
        if quick >= best:
            break
        best = min(best, full())
    return best


def pair_bounds_s(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant) -> tuple[float, Callable[[], float]]:
    """(quick, full) `lower_bound_s` of one pair: with drain leads the later stage holding the most layers takes no
    bubble in the quick bound, and the bubble less its lead (`drained_floors_s`) in the full one; without, both
    are the same."""
    mb, most = ctx.shape.microbatches, math.ceil(ctx.instance.model_spec.layers / ctx.shape.pp)
    types = [ctx.gpu(k) for k in ctx.buildings]
    total, cycle = stage_floors_s(ctx, ctx.head_stage(option))
    opt = most * min(gpu.optimizer_s_per_layer[variant] for gpu in types)
    gather = min(gpu.gather_s_per_layer[variant] for gpu in types)
    slowest = max(cycle, gather_passes(variant.mode) * most * gather)
    lines = ctx.bubble_lines(option)
    dpi = float(ctx.dp_sync_floor_s(variant, option.chunks, np.array([most]))[0])
    suffixes = option.reduction_suffixes(ctx.shape.pp, ctx.gpu(ctx.buildings[0]).layer)
    shares, credits = [share for share, _ in suffixes], tuple(credit for _, credit in suffixes)
    # rank 0's reduction counts from its own end, which lags the pipeline's by up to the bubble (`lags`)
    bubbled = [pipeline_floor_s(mb, ((0.0, 0.0),) if option.lags else lines, credit, total, slowest)
               for credit in credits]
    start = opt + gather0_floor_s(ctx, option, variant)
    alone = pipeline_floor_s(mb, lines, 0.0, total, slowest)
    if ctx.drain_leads(option) is None:
        bound = start + max(alone, *(b + share * dpi for b, share in zip(bubbled, shares, strict=True)))
        return bound, lambda: bound
    # the stage holding the most layers may be a later one, its reduction counted beyond its lead
    first = float(ctx.dp_sync_floor_s(variant, option.chunks, np.array([option.layer_granularity]))[0])

    def bound(later: list[float]) -> float:
        return start + max(alone, *(max(b + share * first, d + share * dpi)
                                    for b, d, share in zip(bubbled, later, shares, strict=True)))

    quick = bound([pipeline_floor_s(mb, ((0.0, 0.0),), credit, total, slowest) for credit in credits])
    return quick, lambda: bound(list(drained_floors_s(ctx, option, lines, total, slowest, most, credits)))


def gather0_floor_s(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant) -> float:
    """The least gather0: stage 0's first gather (`start_gather_terms`) of the option's granularity of layers, of
    which the start waits for `start_gather_share`."""
    training = ctx.instance.training
    first = [start_gather_terms(training, variant, gpu.gather_s_per_layer[variant], gpu.layer.forward_s)
             for gpu in (ctx.gpu(k) for k in ctx.buildings)]
    share = start_gather_share(training, variant, option.chunks)
    return share * option.layer_granularity * min(g for g, _ in first) + min(c for _, c in first)


@dataclass(frozen=True)
class Cuts:
    """Groups of buildings that links at least as fast as a threshold join, one level per distinct link speed but the
    slowest, after the level of single buildings: `labels`[level][k] is building k's group and `caps`[level][g] the
    speed of the links leaving group g (GB/s each way)."""

    labels: list[np.ndarray]
    caps: list[np.ndarray]
    """Per level, the groups' speeds, fastest first (`labels` number the groups in that order)."""


def cuts(buildings: list[str], links: list[Link], speed: np.ndarray) -> Cuts:
    """The `Cuts` of `buildings` joined by `links` of `speed` GB/s (a link may end outside `buildings`: a restriction's
    routes may pass through other buildings, which group as they link but hold nothing)."""
    nodes = list(dict.fromkeys([*buildings, *(k for link in links for k in (link.a, link.b))]))
    index = {k: i for i, k in enumerate(nodes)}
    ends = np.array([(index[link.a], index[link.b]) for link in links])
    labels, caps = [], []
    for threshold in [math.inf, *sorted(set(speed.tolist()))[1:]]:
        graph = nx.Graph()
        graph.add_nodes_from(range(len(nodes)))
        graph.add_edges_from(map(tuple, ends[speed >= threshold]))
        label = np.empty(len(nodes), dtype=int)
        for g, group in enumerate(nx.connected_components(graph)):
            label[list(group)] = g
        if label.max() == 0:
            continue
        leaving = label[ends[:, 0]] != label[ends[:, 1]]
        cap = (np.bincount(label[ends[leaving, 0]], speed[leaving], label.max() + 1)
               + np.bincount(label[ends[leaving, 1]], speed[leaving], label.max() + 1))
        order = np.argsort(-cap, kind="stable")
        labels.append(np.argsort(order)[label[:len(buildings)]])
        caps.append(cap[order])
    return Cuts(labels, caps)


def holder_cut_gb_s(cuts: Cuts, rooms: np.ndarray, stage_cells: int, cells: np.ndarray | int) -> np.ndarray:
    """theta for each count of `cells` held by split stages: one of those stages has cells on both sides of a cut no
    faster than theta GB/s each way. Buildings k have room for `rooms`[k] cells. On each level of `cuts` whose groups
    each hold fewer than a stage's `stage_cells` (every stage spans two groups or more; always, on the level of
    single buildings, for a split stage), the groups faster than the largest theta with sum_{cap_g >= theta} room_g
    >= cells hold fewer, so some cell sits in a group no faster, whose stage crosses its cut; and a stage spans two
    groups, so its slowest is no faster than the second fastest group. The least theta over the levels."""
    best = np.full(np.shape(cells), np.inf)
    for level, (label, caps) in enumerate(zip(cuts.labels, cuts.caps, strict=True)):
        held = np.bincount(label, rooms, len(caps))
        if level and held.max() >= stage_cells:
            continue
        at = np.minimum(np.searchsorted(np.cumsum(held), cells), len(caps) - 1)
        best = np.minimum(best, np.minimum(caps[at], caps[1]))
    return best


def whole_stages(rooms: np.ndarray, cells: int, stages: int) -> tuple[np.ndarray, int]:
    """(W, B): W[r] whole stages of `cells` cells the r roomiest buildings hold (W[0] = 0; `rooms` in cells), and B
    the fewest buildings that hold all `stages` whole (len(rooms) + 1 when all of them cannot)."""
    whole = np.concatenate([[0], np.cumsum(np.sort(rooms // cells)[::-1])])
    return whole, int(np.searchsorted(whole, stages)) if whole[-1] >= stages else len(rooms) + 1


def crossing_alternatives_s(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant,
                            drain: float | np.ndarray = 0.0) -> list[tuple[float, float | np.ndarray]]:
    """(PP, DP) pairs, one per kind of layout, such that every layout pays at least PP in pipeline sends and
    latency and DP in cross-building DP time (`dpx`) for one of them: T >= ... + min over pairs of
    PP + max(0, X(DP)), X(dpx) the DP time left after overlap (`sharpened_bound_s`), growing with dpx.

    Follow the D pipelines (chains of cells, stage 0 to p - 1). Say the whole (unsplit) stages sit in r buildings.
    Every chain passes through all of them, so it crosses at least r - 1 distinct links (the links its routes use
    connect r buildings); each traversal sends A chi_o GB both ways on the fill and drain path (`fill_sends`, at
    the link's best c eta) and the boundaries it crosses cost 2 chi_o lambda each, so
        PP(r) = D sum_{r-1 cheapest links} 2 A chi_o / (c eta)_l + 2 chi_o sum_{r-1 smallest} lambda_l.
    Whole stages fit in r buildings only W(r) times (sum of the r largest floor(cells_k / D)); the fewest buildings
    holding all p is B. With no stage split, r >= B: (PP(B), 0). Otherwise, for r < B, at most w = min(W(r), p - 1)
    stages are whole and s = p - w are split; a split stage j held by h >= 2 buildings moves (G_v + Q_v)(h - 1) S_j
    GB over the links at the end of the step (`traffic`: S_j = g n[j] + e_j its gradient GB, G_v the gathers left at
    the end, `timed_volumes`: none of FSDP's parameter gathers), and dpx >= dpe[a] / (c eta)_a on every arc, so
    dpx >= sum_a dpe[a] / sum_a (c eta)_a >= (G_v + Q_v) sum_{j split} S_j / (2 sum_l (c eta)_l), where
    sum_{j split} S_j >= max(s S_min, g (L - the w largest stage rooms in layers)), and = g L + sum_j e_j when w = 0
    (every stage split). Each holder t of a split stage j receives S_j (G_v (D - x_t) + Q_v x_t (h - 1)) / D and
    sends S_j (G_v x_t (h - 1) + Q_v (D - x_t)) / D, together at least (G_v + Q_v) S_j, over its links' cap_t GB/s
    each way, so dpx >= (G_v + Q_v) S_j / (2 theta) (`holder_cut_gb_s`: some holder has cap_t <= theta), S_j the
    largest split stage's, at least their mean (and g ceil(L / p) when every stage is split); dpx >= 2 lambda_min:
    (PP(r), max of these). The volume rows are dpx + drain >= ... (`traffic.add_drain`: the head start of the
    stages after the first), so their floors are lowered by `drain`, an upper bound on it (`drain_most_s`)."""
    p, cells = ctx.shape.pp, ctx.shape.cells_per_stage
    if len(ctx.buildings) < 2 or not ctx.routes.used_links:
        return [(0.0, 0.0)]
    speed, whole, needed, theta, lam, per_chain, latency = _crossing_table(ctx)
    chi = option.boundary_crossings

    def pp(r: int) -> float:
        hops = min(r - 1, len(per_chain))
        return 0.0 if hops <= 0 else float(chi * (cells * per_chain[hops - 1] + latency[hops - 1]))

    v = ctx.variants.index(variant)
    gather, reduce = timed_volumes(ctx, v)[0], cross_volumes(ctx, v)[1]
    grain, layers = option.layer_granularity, ctx.instance.model_spec.layers
    stage_gb = min(stage_grad_gb(ctx, j, grain, option) for j in range(p))
    rooms = np.minimum(stage_rooms(ctx, option, variant), layers - (p - 1) * grain)
    held_most = np.concatenate([[0.0], np.cumsum(np.sort(rooms)[::-1])])
    every_stage_gb = layer_grad_gb(ctx) * layers + sum(fixed_grad_gb(ctx, j, option) for j in range(p))
    alternatives = [(pp(needed), 0.0)] if needed < len(whole) else []
    for r in range(min(needed, len(whole))):
        kept = min(int(whole[r]), p - 1)
        split = p - kept
        split_gb = every_stage_gb if kept == 0 else max(
            split * stage_gb, layer_grad_gb(ctx) * (layers - held_most[kept]))
        largest_gb = max(split_gb / split, layer_grad_gb(ctx) * math.ceil(layers / p) if kept == 0 else 0.0)
        moved = (gather + reduce) * max(split_gb / (2 * speed), largest_gb / (2 * theta))
        alternatives.append((pp(r), np.maximum(lam, moved - drain)))
    return alternatives


def _crossing_table(ctx: ShapeContext) -> tuple[float, np.ndarray, int, float, float, np.ndarray, np.ndarray]:
    """What `crossing_alternatives_s` reads of the shape whatever the option and variant, found once per shape
    (`ShapeContext.bound_tables`): the used links' total best speed (sum of c eta, GB/s), W and B (`whole_stages`),
    the holder cut theta (`holder_cut_gb_s` over each building's links at their best c eta), the least round-trip
    latency, and per chain of one crossing (chi_o = 1) the cumulative sums of the cheapest links' 2 A / (c eta) and of
    the smallest 2 lambda (one entry per used link)."""
    if "crossing" not in ctx.bound_tables:
        p, cells, routes = ctx.shape.pp, ctx.shape.cells_per_stage, ctx.routes
        links = [routes.links[i] for i in routes.used_links]
        speed = np.array([max(ctx.efficiency[i, t] for t in routes.links[i].transports)
                          * routes.links[i].capacity_byte_s / GB for i in routes.used_links])
        rooms = np.array([ctx.instance.topology.building(k).gpus // ctx.shape.cell_gpus for k in ctx.buildings])
        whole, needed = whole_stages(rooms, cells, p)
        theta = float(holder_cut_gb_s(cuts(ctx.buildings, links, speed), rooms, cells, cells))
        ctx.bound_tables["crossing"] = (
            float(speed.sum()), whole, needed, theta, 2 * min(routes.latency_s.values()),
            np.cumsum(np.sort(2 * ctx.costs.p2p_bytes * ctx.shape.ep / GB / speed)),
            np.cumsum(np.sort([2 * link.one_way_latency_s for link in links])))
    return ctx.bound_tables["crossing"]


def drain_most_s(ctx: ShapeContext, option: ScheduleOption, first_layers: np.ndarray) -> np.ndarray:
    """The most `traffic.add_drain` credits with n[0] = `first_layers`: kappa_o b n[0] + the longest route latency
    (lat[0] beyond it only raises the makespan more than the credit), 0 with one stage or kappa_o = 0."""
    kappa = drain_share(option) if ctx.shape.pp > 1 else 0.0
    if not kappa:
        return np.zeros_like(first_layers)
    return kappa * drain_layer_s(ctx) * first_layers + max(ctx.routes.latency_s.values(), default=0.0)


def _position_groups(ctx: ShapeContext, head: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(tau, e) per GPU type t and stage j, shapes (types, 1) and (types, p): the layer time and the smallest fixed
    stage time with the LM head on stage `head` (over the options without one) for j's position (first, between,
    last) on type t. Found once per shape and head (`ShapeContext.bound_tables`)."""
    key = ("position groups", head)
    if key not in ctx.bound_tables:
        p = ctx.shape.pp
        positions = [0] + [1] * max(p - 2, 0) + ([2] if p > 1 else [])
        groups = _speed_groups(ctx, head)
        tau = np.array([[t] for t, _, _ in groups])
        ctx.bound_tables[key] = tau, np.array([[fixed[q] for q in positions] for _, _, fixed in groups])
    return ctx.bound_tables[key]


def layer_caps(ctx: ShapeContext, cycles: np.ndarray, head: int | None = None) -> np.ndarray:
    """Most layers stage j can hold when the cycle is at most cycles[i]: Cst[j] = tau_k n[j] + e[j,k] <= cycle on
    the best GPU type for j's position (first, between, last), i.e. max_t floor((c - e_t) / tau_t); shape (N, p)."""
    tau, fixed = _position_groups(ctx, head)
    c = np.asarray(cycles, dtype=float)[:, None, None]
    return np.max(np.floor((c - fixed[None]) / tau[None] + 1e-9), axis=1)


def next_cap_change(ctx: ShapeContext, cycles: np.ndarray, head: int | None = None) -> np.ndarray:
    """The smallest cycle above each cycles[i] at which some `layer_caps` entry grows: min over stages j and types t
    of e_t + tau_t (cap_j + 1). The caps are constant on [cycles[i], next_cap_change)."""
    tau, fixed = _position_groups(ctx, head)
    caps = layer_caps(ctx, cycles, head)
    return np.min(fixed[None] + tau[None] * (caps[:, None, :] + 1), axis=(1, 2))


def first_gather_floors_s(ctx: ShapeContext, first_layers: np.ndarray, gather: float, grain: int = 1,
                          rooms: np.ndarray | None = None, caps: np.ndarray | None = None,
                          share: float = 1.0) -> np.ndarray:
    """For each n0 (layers of stage 0), the least `gather0` any layer split with n[0] = n0 allows.

    The MILP's rows (formulation.iteration) for the ranks' first chunks, s = `share` of each stage's layers
    (`start_gather_share`): gather0 >= s n[0] g and, for j > 0,
    gather0 >= s n[j] g - (sum_{i<j} s n[i] tauF + j p2p + eF) (g: the variant's least gather time per layer, tauF,
    p2p, eF: the fastest forward per layer, intra-building send and embedding forward); g and tauF are taken at s
    times their values. Under gather0 <= X stage j
    holds at most h_j(X) = floor((X + head_j) / g) layers, a multiple of `grain`, at most `rooms`[j] (HBM) and
    caps[i, j] (the cycle, `layer_caps`); filling each stage to h_j maximises every later head start, so X is
    feasible iff those stages hold L layers with none below `grain` (filling past L only relaxes this). A search
    on X (feasibility grows with X), SEARCH_WAYS - 1 trial budgets per bracket and row at once for SEARCH_ROUNDS
    rounds, returns its low end, so the floor is never above the least X."""
    p, layers = ctx.shape.pp, ctx.instance.model_spec.layers
    n0 = np.asarray(first_layers, dtype=float)
    if gather <= 0:
        return np.zeros_like(n0)
    gather *= share
    most = layers - p + 1
    limit = np.full((len(n0), p), float(most)) if caps is None else np.minimum(caps, most)
    if rooms is not None:
        limit = np.minimum(limit, rooms[None, :])
    fastest = [ctx.gpu(k) for k in ctx.buildings]
    tau_f = share * min(gpu.layer.forward_s for gpu in fastest)
    send = min(gpu.p2p_intra_s for gpu in fastest) if p > 1 else 0.0
    embedding = min(gpu.first_stage_extra.forward_s for gpu in fastest)

    def feasible(budget: np.ndarray) -> np.ndarray:
        """Rows x trials: whether each trial budget fills that row's stages (a row whose stage gets fewer than
        `grain` layers is infeasible whatever the later stages hold, so their counts need no clipping at 0)."""
        held = np.repeat(n0[:, None], budget.shape[1], axis=1)
        start = budget / gather + (embedding / gather + 1e-9)
        least = np.full(budget.shape, np.inf)
        for j in range(1, p):
            n_j = np.floor(held * (tau_f / gather) + (start + j * send / gather))
            np.minimum(n_j, limit[:, j, None], out=n_j)
            if grain > 1:
                n_j = n_j // grain * grain
            np.minimum(least, n_j, out=least)
            held += n_j
        return (least >= grain) & (held >= layers)

    low, width = n0 * gather, np.full(len(n0), layers * gather)
    steps = np.arange(1, SEARCH_WAYS) / SEARCH_WAYS
    for _ in range(SEARCH_ROUNDS):
        fits = feasible(low[:, None] + width[:, None] * steps[None, :])
        below = (~fits).sum(axis=1)  # trials below the least feasible one (feasibility grows with the budget)
        width = width / SEARCH_WAYS
        low = low + below * width
    return np.maximum(low, n0 * gather)


UNREACHABLE = -1e18
"""Layers a speed class holds at a cycle too short for one layer (-inf in the caps): any sum with it stays far below
every layer count, and a product with a zero count is 0, not nan."""
CYCLE_STEPS = 4
"""Cap changes c_0 = c(n0) < c_1 < ... at which `pipeline_and_gathers_s` trades pipeline time for gathers."""
LAZY_ROWS = 16
"""(n0, cycle step) rows of `pipeline_and_gathers_s`'s first search for the least; the next take twice as many."""
SEARCH_WAYS = 16
SEARCH_ROUNDS = 3
"""`first_gather_floors_s` splits its bracket [n0 g, n0 g + L g] into SEARCH_WAYS parts per round, trying the
SEARCH_WAYS - 1 inner budgets at once: after SEARCH_ROUNDS rounds it is within L g / 16^3 = L g / 2^12 (0.025 % of
the whole model's gather time) of the least X, as twelve halvings were, in a quarter of the numpy calls (the
halvings took 40 % of sharpening the 452 shapes of a 1,000-GPU, five-zone instance); the low end is returned, so a
coarser search only loosens the floor."""
RESOLUTION = SEARCH_WAYS**SEARCH_ROUNDS
"""The parts of L g the search resolves."""


@dataclass(frozen=True)
class LaterStage:
    """What `pipeline_and_gathers_s` adds, per stage-0 layer count, for a later stage holding the most layers, whose
    intra-building sync counts beyond its lead: `extra` with that stage's sync, the layers it holds at least, and
    stage 0's least and most time per microbatch (`drained_bubble_s`)."""

    extra: np.ndarray
    held: np.ndarray
    first_low: np.ndarray
    first_most: np.ndarray


def pipeline_and_gathers_s(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant, first_layers: np.ndarray,
                           first_s: np.ndarray, cycles: np.ndarray, rooms: np.ndarray, extra: np.ndarray,
                           later: LaterStage | None = None, lagged: np.ndarray | None = None) -> float:
    """min over n0 of extra(n0) + P(n0), P(n0) = min over c >= c(n0) of f(c) + F(n0, c): pipeline time
    f(c) = max(m c + B(c), R(n0)) (B: `bubble_floor_s` of `ShapeContext.bubble_lines`; R: the rank paths' floor at
    stage 0's least time `first_s`, `ShapeContext.first_stage_floor_s`; growing with c, as m >= every gamma); with
    `later` (`LaterStage`: a later stage's reduction, whose lead the bubble may take, `sharpened_bound_s`),
    extra(n0) + f(c) is at least later.extra(n0) + min over the step's cycles of m c + `drained_bubble_s` as well
    (`least_drained_s`: that term alone may fall with c)
    plus the first gathers' floor F (`first_gather_floors_s` with the stages capped by `layer_caps`(c), shrinking
    with c). With c_0 = c(n0) and
    c_{i+1} = `next_cap_change`(c_i), the caps are those of c_i on all of [c_i, c_{i+1}), so
    P >= min( min_{i < K} f(c_i) + F(n0, caps(c_i)), f(c_K) + F(n0, no caps) ), K = CYCLE_STEPS. F >= n0 g, so the
    (n0, c_i) rows are searched in order of extra + f(c_i) + n0 g, LAZY_ROWS at first and twice as many each time
    after, until that order's next row cannot beat the least found: the least is the same as over every row.
    `lagged`: the part of extra that counts from rank 0's own end under an option that `lags`, whose lag may take
    the bubble (extra + f(c) >= max(extra - lagged + f(c), extra + m c))."""
    mb, grain = ctx.shape.microbatches, option.layer_granularity
    head = ctx.head_stage(option)
    total, _ = stage_floors_s(ctx, head)
    lines, paths = ctx.bubble_lines(option), ctx.first_stage_floor_s(option, first_s, total)
    gather = min(start_gather_terms(ctx.instance.training, variant, ctx.gpu(k).gather_s_per_layer[variant],
                                    ctx.gpu(k).layer.forward_s)[0] for k in ctx.buildings)
    share = start_gather_share(ctx.instance.training, variant, option.chunks)
    fill = fill_gathers_floor_s(ctx, option, gather, share)

    def pipeline(c: np.ndarray, until: np.ndarray) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """The pipeline's floor over cycles [c, until) per row (rows: the n0 of `first_layers`, repeated; until
        infinite: no upper end), as f(c) grows with c: a quick floor of every row (the later stage's row at m c),
        and the floor itself of the rows asked for (its drained bubble, `least_drained_s`). The fill's gather waits,
        which shrink as the cycle grows, are taken at `until`."""
        repeats = len(c) // len(first_layers)
        streamed = mb * c + fill(np.tile(first_layers, repeats), until)
        bubbled = streamed + bubble_floor_s(lines, total, c)
        quick = np.tile(extra, repeats) + np.maximum(bubbled, np.tile(paths, repeats))
        if lagged is not None:
            quick = np.maximum(quick - np.tile(lagged, repeats), np.tile(extra, repeats) + streamed)
        if later is None:
            return quick, lambda rows: quick[rows]
        tail = np.tile(later.extra, repeats)
        drains = tail + bubbled > quick  # elsewhere the later stage's row cannot pass it (drained <= bubble)
        quick = np.maximum(quick, tail + mb * c)
        held = [np.tile(x, repeats) for x in (later.first_low, later.first_most, later.held)]

        def floors(rows: np.ndarray) -> np.ndarray:
            found, chosen = quick[rows].copy(), drains[rows]
            if chosen.any():
                picked = rows[chosen]
                first_low, first_most, layers = (x[picked] for x in held)
                drained = least_drained_s(mb, lambda x: drained_bubble_s(ctx, option, lines, total, x, first_low,
                                                                         first_most, layers), c[picked],
                                          until[picked])[0]
                found[chosen] = np.maximum(found[chosen], tail[picked] + drained)
            return found

        return quick, floors

    if variant.mode is DPMode.ddp:
        quick, exact = pipeline(cycles, np.full(len(cycles), np.inf))
        return lazy_least(quick, exact)

    n = len(cycles)
    steps = [np.asarray(cycles, dtype=float)]
    for _ in range(CYCLE_STEPS):
        steps.append(next_cap_change(ctx, steps[-1], head))
    caps = np.vstack([layer_caps(ctx, c, head) for c in steps[:-1]] + [np.full((n, ctx.shape.pp), np.inf)])
    first = np.tile(first_layers, CYCLE_STEPS + 1)
    quick, exact = pipeline(np.concatenate(steps), np.concatenate([*steps[1:], np.full(n, np.inf)]))
    return lazy_least(quick + np.maximum(share * first * gather, 0.0), lambda rows: exact(rows) + first_gather_floors_s(
        ctx, first[rows], gather, grain, rooms, caps[rows], share))


def fill_gathers_floor_s(ctx: ShapeContext, option: ScheduleOption, gather: float, share: float
                         ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """f(n0, c): the least fill_gathers (`formulation.iteration.add_chunk_gather_waits`) at n0 layers of stage 0 and a
    cycle of at most c: (v - 1) max(0, (n0 / v) g' - sigma_v c - p2p) with v chunks per rank (Cst[0] <= cycle; g' =
    `gather`, the least start gather per layer, `start_gather_terms`; sigma_v: `ScheduleOption.chunk_forward_share`);
    0 with one chunk or where the MILP has no such rows (`share`, `start_gather_share`, 1: the whole stage waits at
    the start or after the step)."""
    v = option.chunks
    if v == 1 or share == 1.0 or gather <= 0:
        return lambda n0, c: np.zeros(len(n0))
    sigma = option.chunk_forward_share(ctx.gpu(ctx.buildings[0]).layer)
    send = min(ctx.gpu(k).p2p_intra_s for k in ctx.buildings)
    return lambda n0, c: (v - 1) * np.maximum(0.0, n0 * gather / v - sigma * c - send)


def lazy_least(lower: np.ndarray, value: Callable[[np.ndarray], np.ndarray]) -> float:
    """min over rows of value(rows) >= `lower`, computed on the rows in order of `lower`, LAZY_ROWS at first and twice
    as many each time after, until the next row's `lower` cannot beat the least found: the same as over every row."""
    order = np.argsort(lower, kind="stable")
    best, done, size = math.inf, 0, LAZY_ROWS
    while done < len(order) and lower[order[done]] < best:
        rows = order[done:done + size]
        best = min(best, float(np.min(value(rows))))
        done, size = done + len(rows), 2 * size
    return best


def first_stage_lower_bound_s(ctx: ShapeContext, pairs: list[tuple[ScheduleOption, DPVariant]]) -> float:
    """`sharpened_bound_s` over `pairs`: the least of each pair's, found once per shape and pair
    (`ShapeContext.sharpened_bounds`)."""
    for pair in pairs:
        if pair not in ctx.sharpened_bounds:
            ctx.sharpened_bounds[pair] = sharpened_bound_s(ctx, *pair)
    return min((ctx.sharpened_bounds[pair] for pair in pairs), default=math.inf)


def sharpened_bound_s(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant) -> float:
    """A sharper bound under schedule option o and DP variant v, for the shapes the search reaches, by enumerating
    n0 = layers of stage 0 (vectorised): some stage holds N(n0) = max(n0, ceil((L - n0) / (p - 1))) layers, so
    cycle >= c(n0) = max(`cycle_floors_s`(n0), passes_v N(n0) g_v), dpi_v >= min_{n >= N(n0)} f_v(n) (n >= n0
    where the later stages' reductions are priced from their own ranks' ends, `ShapeContext.drain_leads`) and
    opt_v >= N(n0) o_v; the first gathers expose at least `first_gather_floors_s`(n0) >= n0 g_v; the DP reduction
    exposes max_r a_r dpi_v + b_r dpx - credit_r C0 over the MILP's rows (`ScheduleOption.reduction_rows`), C0 at
    its most, tau_max n0 + e0_max (the MILP's C0 is stage 0's floor on the fastest GPU type holding it). With P(n0)
    of `pipeline_and_gathers_s`,
        T >= min_n0 [ opt_v + P(n0) + X(n0) ],
    X = min over (PP, DP) of `crossing_alternatives_s` of PP + max(0, that exposure at dpx = DP), DP lowered by the
    drain credit at n0 (`drain_most_s`). Under an option with drain leads (`ShapeContext.drain_leads`) the stage
    holding N(n0) layers may be a later one, whose intra-building sync counts only beyond its lead, and
    lead[j] <= bubble (rows lead_in_bubble): X with dpi_v at n0 (stage 0's own), and at N(n0) with the bubble less
    that stage's lead in P (`LaterStage`, `drained_bubble_s`: the stage holds at least ceil((L - n0) / (p - 1))
    layers, stage 0's time lies between c0 and c0_most)."""
    p, layers = ctx.shape.pp, ctx.instance.model_spec.layers
    types = [ctx.gpu(k) for k in ctx.buildings]
    tau = min(gpu.layer.total_s for gpu in types)
    e_first = min(ctx.stage_fixed_floor_s(0, k) for k in ctx.buildings)
    grain = option.layer_granularity
    n0 = np.arange(grain, layers - (p - 1) * grain + 1, grain, dtype=float)
    rest = np.ceil((layers - n0) / (p - 1)) if p > 1 else np.zeros_like(n0)
    gather = min(gpu.gather_s_per_layer[variant] for gpu in types)
    rooms = stage_rooms(ctx, option, variant)
    largest = np.maximum(n0, rest)
    c = np.maximum(cycle_floors_s(ctx, n0, grain, rooms, ctx.head_stage(option)),
                   gather_passes(variant.mode) * largest * gather)
    opt = largest * min(gpu.optimizer_s_per_layer[variant] for gpu in types)
    rows = option.reduction_rows(p, ctx.gpu(ctx.buildings[0]).layer)
    c0 = tau * n0 + e_first
    c0_most = max(gpu.layer.total_s for gpu in types) * n0 + max(ctx.stage_fixed_floor_s(0, k) for k in ctx.buildings)
    alternatives = crossing_alternatives_s(ctx, option, variant, drain_most_s(ctx, option, n0))

    def exposure(dpi: np.ndarray, dp: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, np.max([a * dpi + b * dp - credit * c0_most for a, b, credit in rows], axis=0))

    def crossing(dpi: np.ndarray) -> np.ndarray:
        return np.min([pp + exposure(dpi, dp) for pp, dp in alternatives], axis=0)

    dpi = ctx.dp_sync_floor_s(variant, option.chunks, largest)
    if ctx.drain_leads(option) is None:
        return pipeline_and_gathers_s(ctx, option, variant, n0, c0, c, rooms, opt + crossing(dpi))
    stage0 = ctx.dp_sync_floor_s(variant, option.chunks, n0)
    own = crossing(stage0)
    lagged = np.maximum(0.0, own - min(pp for pp, _ in alternatives)) if option.lags else None
    return pipeline_and_gathers_s(ctx, option, variant, n0, c0, c, rooms, opt + own,
                                  LaterStage(opt + crossing(dpi), rest, c0, c0_most), lagged)


def stage_memory(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant) -> tuple[np.ndarray, np.ndarray]:
    """(fixed bytes, bytes per layer) one GPU of each stage needs under a schedule option and DP variant
    (`context.stage_memory_table`)."""
    fixed, per_layer = stage_memory_table(ctx.costs, ctx.shape, [option], [variant])
    return fixed[0, 0], per_layer[0, 0]


def stage_rooms(ctx: ShapeContext, option: ScheduleOption, variant: DPVariant) -> np.ndarray:
    """Layers each stage can hold within the largest HBM under a schedule option and DP variant."""
    return stage_room_table(ctx.costs, ctx.hbm_bytes, ctx.shape, [option], [variant], ctx.moe_memory)[0, 0]


def attainable_options(ctx: ShapeContext) -> list[ScheduleOption]:
    """The shape's schedule options whose layer granularity can be met (`context.attainable`)."""
    return attainable(ctx.options, ctx.instance.model_spec.layers, ctx.shape.pp)


def compute_floor_s(shape: Shape, layers: int, layer_s: float, fixed_s: float, bubble: float,
                    crossing: CrossingFloors | None = None, cycle_s: float = 0.0) -> float:
    """min over c >= c0 = max(S / p, `cycle_s`) of m c + beta (S - c)^+ (+ min over `crossing`'s alternatives r of
    PP_r + max(0, max_i a[r, i] - b[r, i] c)), with S = L tau_min + e_min, tau_min (`layer_s`) the least time of a
    layer and microbatch any stage can take (`type_floors_s`), e_min (`fixed_s`) the least embedding plus LM-head
    time, beta (`bubble`) a bubble coefficient, `cycle_s` a floor of the cycle (`type_floors_s`). Without `crossing`
    it is m c0 + beta (S - c0)^+ (S (m + beta (p - 1)) / p at c0 = S / p): `lower_bound_s`'s pipeline term is
    m c + beta_o max(0, S - c), nondecreasing in c (m >= beta_o), at c >= c0 with S >= L tau_min + e_min, and
    `sharpened_bound_s` adds the crossing at the cycle c (`crossing_floors`). Convex and piecewise linear in c, each
    alternative's sum is least at c0, S, a root a / b or where two of its pieces cross. A valid bound for a shape not
    yet priced (it reads only per-cell costs)."""
    m, p = shape.microbatches, shape.pp
    total = layers * layer_s + fixed_s
    least = max(total / p, cycle_s)
    if crossing is None:
        return m * least + bubble * max(0.0, total - least)
    a, b = crossing.a, crossing.b
    i, j = _PIECE_PAIRS
    with np.errstate(divide="ignore", invalid="ignore"):
        roots = np.hstack([a / b, (a[:, i] - a[:, j]) / (b[:, i] - b[:, j])])
    c = np.hstack([np.full((len(a), 2), [least, total]), np.nan_to_num(roots, posinf=0.0, neginf=0.0)])
    c = np.maximum(c, least)
    exposed = np.max(a[:, :, None] - b[:, :, None] * c[:, None, :], axis=1)
    sums = m * c + bubble * np.maximum(0.0, total - c) + crossing.pp[:, None] + np.maximum(0.0, exposed)
    return float(sums.min())


_PIECE_PAIRS = np.triu_indices(3, 1)
"""The pairs of `crossing_floors`' three pieces, where two of them may cross."""


@dataclass(frozen=True)
class LinkTable:
    """What the crossing floors read of an instance's links, once per instance (`link_table`): capacities in GB/s
    (a link's efficiency is at most 1, so bare capacity gives a floor)."""

    total_gb_s: float
    """Sum over the used links."""
    buildings: list[str]
    cuts: Cuts
    """`buildings` grouped by link speed."""
    hop_s_per_gb: np.ndarray
    """Cumulative sums of the used links' 2 / c_l, cheapest first: entry h - 1 is the least a chain's GB costs going
    both ways over h distinct links."""
    hop_latency_s: np.ndarray
    """Cumulative sums of the used links' 2 lambda_l, smallest first."""
    longest_route_s: float


def link_table(routes: RouteTable) -> LinkTable | None:
    """The instance's `LinkTable`; None with one building or no used link."""
    links = [routes.links[i] for i in routes.used_links]
    if len(routes.buildings) < 2 or not links:
        return None
    speed = np.array([link.capacity_byte_s / GB for link in links])
    return LinkTable(float(speed.sum()), routes.buildings, cuts(routes.buildings, links, speed),
                     np.cumsum(np.sort(2 / speed)),
                     np.cumsum(np.sort([2 * link.one_way_latency_s for link in links])),
                     max(routes.latency_s.values()))


@dataclass(frozen=True)
class CrossingFloors:
    """Per alternative r of `crossing_floors`: the pipeline crossings PP_r and linear floors of the exposed
    cross-building DP time, max(0, max_i a[r, i] - b[r, i] c) at cycle c."""

    pp: np.ndarray
    a: np.ndarray
    b: np.ndarray


def crossing_floors(instance: Instance, shape: Shape, links: LinkTable | None, options: list[ScheduleOption],
                    variants: list[DPVariant], layer: OpTimes, layer_s: float) -> CrossingFloors | None:
    """`crossing_alternatives_s` from byte counts and link capacities, for a shape not yet priced, over every option
    and variant at once (each term at its least over them: the floor is monotone in each); None without links.

    Alternative r < B: whole stages in r buildings, at most w = min(W(r), p - 1) of them (W, B as there), every
    chain over r - 1 links: PP_r = chi_min (D A hop_s_per_gb[r - 2] + hop_latency_s[r - 2]) (A one cell's
    activation GB). A whole stage's Cst = tau n + e <= cycle c holds n <= c / tau_min layers (`layer_s`), so the
    split stages hold at least L - w c / tau_min layers, and their gradients (+ the embedding's and LM head's when
    w = 0) cross at (G + Q)_min per GB over max(1 / (2 sum_l c_l), 1 / (2 theta s)) seconds (s = p - w split stages,
    the largest at least their mean, `holder_cut_gb_s`), or at least those of s stages of g_o layers each and of the
    largest, n layers (n = ceil(L / p) when w = 0, else g_o). The split stages' s D cells do not fit in the buildings
    whose links are faster than theta_s (`holder_cut_gb_s` over every building's room for s D cells), so one of them
    has a holder no faster, and every stage holds at least L - (p - 1) c / tau_min layers: (G + Q)_min g
    (L - (p - 1) c / tau_min) / (2 theta_s) (+ the fixed gradients when p = 1). Less the longest route latency (the
    drain credit's), the exposure is at least that less k c, k = the most share-1 chunk credit plus drain share over
    the options (C0 <= c, `sharpened_bound_s`, `drain_most_s`). Alternative r = B: no stage split, PP_B and no DP."""
    if links is None or not variants:
        return None
    model, training = instance.model_spec, instance.training
    p, cells, layers = shape.pp, shape.cells_per_stage, model.layers
    rooms = np.array([instance.topology.building(k).gpus // shape.cell_gpus for k in links.buildings])
    whole, needed = whole_stages(rooms, cells, p)
    if needed <= 1:  # one building holds every stage: a layout that crosses nothing
        return None
    r = np.arange(min(needed + 1, len(rooms) + 1))
    hops = np.clip(r - 1, 0, len(links.hop_s_per_gb))
    chain_gb = memory.boundary_bytes(model, training, shape.micro_batch) * shape.ep / GB
    chi = min(o.boundary_crossings for o in options)
    pp = np.where(hops > 0, chi * (cells * chain_gb * np.append(0.0, links.hop_s_per_gb)[hops]
                                   + np.append(0.0, links.hop_latency_s)[hops]), 0.0)
    layer_gb, first_gb, last_gb = (b / GB for b in memory.grad_bytes_per_cell(model, training, p))
    fixed_gb = first_gb + last_gb
    end = min(dp_cross_phases(variant, shape.microbatches, training.grad_bytes_per_param, training.bytes_per_element,
                              training.overlap_param_gather).end_volume for variant in variants)
    theta = float(holder_cut_gb_s(links.cuts, rooms, cells, cells))
    grain = min(o.layer_granularity for o in options)
    slope = max(o.reduction_suffixes(p, layer)[-1][1] + (drain_share(o) if p > 1 else 0.0) for o in options)
    kept = np.minimum(whole[r], p - 1).astype(float)
    split = np.where(r < needed, 1.0, 0.0)  # r = needed: every stage whole, no DP crossing
    thin = holder_cut_gb_s(links.cuts, rooms, cells, (p - kept) * cells)
    per_gb = end * np.maximum(1 / (2 * links.total_gb_s), 1 / (2 * theta * (p - kept)))
    spread = np.where(kept == 0, layer_gb * layers + fixed_gb, layer_gb * layers)
    largest = np.where(kept == 0, math.ceil(layers / p), grain) * layer_gb / (2 * theta)
    a = np.stack([per_gb * spread,
                  end * np.maximum((p - kept) * grain * layer_gb / (2 * links.total_gb_s), largest),
                  end * (layer_gb * layers + (fixed_gb if p == 1 else 0.0)) / (2 * thin)], axis=1)
    b = np.stack([per_gb * layer_gb * kept / layer_s, np.zeros(len(r)),
                  end * layer_gb * (p - 1) / (layer_s * 2 * thin)], axis=1)
    return CrossingFloors(pp, split[:, None] * (a - links.longest_route_s) - (1 - split[:, None]),
                          split[:, None] * b + slope)


def held_rate_floor_usd_s(instance: Instance, shape: Shape, buildings: list[str]) -> float:
    """R: no placement of `shape` on `buildings` holds GPUs for less than R $/s (infinite when they cannot hold it).

    Its p D stage cells need buildings whose rooms floor(G_b / c) sum to at least p D, and holding building b costs
    r_b = G_b p_b / 3600 (`costmodel.price.held_usd_per_s`). Every such cover costs at least the fractional cover
    (cheapest r_b per cell of room first, the last building in part: the covering knapsack's LP relaxation) and at
    least its cheapest member, min r_b over the buildings with room. The cost of one of the shape's iterations is at
    least R times its time, so R x a time bound is a cost bound."""
    rooms = [(held_usd_per_s(instance, k), instance.topology.building(k).gpus // shape.cell_gpus) for k in buildings]
    rooms = sorted(((rate, room) for rate, room in rooms if room > 0), key=lambda item: item[0] / item[1])
    need, fractional = shape.pp * shape.cells_per_stage, 0.0
    for rate, room in rooms:
        take = min(room, need)
        fractional += rate * take / room
        need -= take
        if need == 0:
            return max(fractional, min(rate for rate, _ in rooms))
    return math.inf
