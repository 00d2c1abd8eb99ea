"""Named layout patterns, built greedily and fixed in a shape's MILP to get good incumbents in a fraction of a second.

    DP-out   every building holds whole pipelines: x[j,k] = X_k for all stages j; only DP synchronisation crosses
    PP-out   every stage sits in one building, stages in contiguous blocks along a chain of buildings; only
             pipeline sends cross
Both fill the fastest GPU types first (then larger buildings). With the stage cells x fixed, what is left (layers per
stage, flows, schedule, DP variant, transports) is a small MILP, solved first with the layers at the split the
buildings' speeds suggest (`speed_layers`, within the stages' HBM) and a pair that holds it (`holding_pairs`), then
free. Each pattern is a sub-problem of the full MILP, so its solution is a feasible layout of the shape; the full
MILP then only has to beat it (it becomes the cutoff).

A *restriction* is the shape's MILP over only the buildings a pattern uses (`restrictions`: those DP-out fills, and
those PP-out's stages sit in), with its own routes (`RouteTable.among`): a model of p B'^2 rows rather than the
cluster's p B^2, built in a fraction of the time, whose optimum is at least as good as the pattern's and a feasible
layout of the whole instance. The pattern is solved in it first (its cells fixed), so the free solve has a cutoff.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise

import pyomo.environ as pyo

from scaleacross_milp.milp.context import Pair, ShapeContext, stage_room_table

Cells = dict[tuple[int, str], int]
"""Stage cells per (stage, building)."""


class Pattern(str, Enum):
    dp_out = "DP-out"
    pp_out = "PP-out"


def layer_pace_s(ctx: ShapeContext, building: str) -> float:
    """What one layer of an average stage costs a pipeline in `building` per step: m t_layer (its microbatches'
    compute and TP / CP / EP communication) + min_v S_v(L / p) / (L / p) (its share of the stage's intra-building DP
    sync under the cheapest variant): the building's GPU type and its fabric (pods, oversubscription) both count."""
    layers = ctx.instance.model_spec.layers / ctx.shape.pp
    costs = ctx.gpu(building)
    sync_s = min((costs.dp_intra[variant].stage_s(layers) for variant in ctx.variants), default=0.0) / layers
    return ctx.shape.microbatches * costs.layer.total_s + sync_s


def fastest_first(ctx: ShapeContext) -> list[str]:
    """Buildings by one layer's time on their GPU type, then by size (largest first); stable otherwise."""
    return sorted(ctx.buildings, key=lambda k: (ctx.gpu(k).layer.total_s, -ctx.max_cells(k)))


def one_building_cells(ctx: ShapeContext) -> Cells | None:
    """Every pipeline in the one building of least `layer_pace_s` among those that hold the shape whole (then the
    largest); None when none does. DP-out fills buildings by GPU type and size alone, and would put a shape that
    fits a flat hall into a larger one behind oversubscribed pods (generated medium seed 133: 256 of 288 B200 in a
    flat hall replay 9 % faster than the search's plan, whose patterns filled the 448-GPU pod hall first)."""
    shape = ctx.shape
    gpus = {k: ctx.instance.topology.building(k).gpus for k in ctx.buildings}
    holding = [k for k in ctx.buildings if gpus[k] >= shape.cell_gpus * shape.pp * shape.cells_per_stage]
    if not holding:
        return None
    home = min(holding, key=lambda k: (layer_pace_s(ctx, k), -gpus[k]))
    return {(j, home): shape.cells_per_stage for j in range(shape.pp)}


def dp_out_cells(ctx: ShapeContext) -> Cells | None:
    """Whole pipelines per building, fastest buildings first; None when the buildings cannot hold D pipelines."""
    p, left = ctx.shape.pp, ctx.shape.cells_per_stage
    cells: Cells = {}
    for k in fastest_first(ctx):
        take = min(left, ctx.instance.topology.building(k).gpus // (ctx.shape.cell_gpus * p))
        cells.update({(j, k): take for j in range(p) if take})
        left -= take
    return cells if left == 0 else None


def chain(ctx: ShapeContext, buildings: list[str]) -> list[str]:
    """Order buildings as a chain: start at the first, then always hop to the nearest unvisited one."""
    order, rest = buildings[:1], buildings[1:]
    while rest:
        nearest = min(rest, key=lambda k: ctx.routes.latency_s[order[-1], k])
        order.append(nearest)
        rest.remove(nearest)
    return order


ORDERED_BLOCKS = 16
"""PP-out's blocks are reordered (`block_order`) up to this many: a pass weighs every swap, O(B^3) link lookups."""


def crossing_load(ctx: ShapeContext, order: list[str]) -> tuple[float, float]:
    """(max over links i of c_i / cap_i, sum of latencies) of a pipeline whose blocks sit in the buildings of `order`
    in turn: c_i counts the block boundaries whose sends (forward and back) cross link i, cap_i its capacity in Gb/s.
    What an order costs the pipeline sends before any pricing: boundaries whose routes share a link contend on it."""
    uses: dict[int, int] = {}
    for s, t in pairwise(order):
        for i in {i for i, _ in [*ctx.routes.arcs[s, t], *ctx.routes.arcs[t, s]]}:
            uses[i] = uses.get(i, 0) + 1
    return (max((n / ctx.routes.links[i].capacity_gbit_s for i, n in uses.items()), default=0.0),
            sum(ctx.routes.latency_s[pair] for pair in pairwise(order)))


def block_order(ctx: ShapeContext, buildings: list[str]) -> list[str]:
    """The order of PP-out's blocks (each building's stages) along the pipeline: the nearest-hop `chain` from the
    first, then, up to ORDERED_BLOCKS, while some swap of two blocks lowers their `crossing_load`, the swap that
    lowers it most. The nearest hop alone may send two boundaries over one link (generated medium seed 151: PP 4
    over four buildings, boundaries 0 and 1 over one thin lossy link, its plan replayed at 1.391 s; the reordered
    pattern led to a plan replayed at 1.032 s)."""
    order = chain(ctx, buildings)
    least = crossing_load(ctx, order)
    while len(order) <= ORDERED_BLOCKS:
        swaps = []
        for a in range(len(order)):
            for b in range(a + 1, len(order)):
                swapped = list(order)
                swapped[a], swapped[b] = order[b], order[a]
                swaps.append((crossing_load(ctx, swapped), swapped))
        better = min(swaps, default=None, key=lambda item: item[0])
        if better is None or better[0] >= least:
            break
        least, order = better
    return order


def pp_out_cells(ctx: ShapeContext) -> Cells | None:
    """Whole stages per building in contiguous blocks; None when the buildings cannot hold p whole stages."""
    p, cells_per_stage = ctx.shape.pp, ctx.shape.cells_per_stage
    stages_in: dict[str, int] = {}
    left = p
    for k in fastest_first(ctx):
        take = min(left, ctx.instance.topology.building(k).gpus // (ctx.shape.cell_gpus * cells_per_stage))
        if take:
            stages_in[k] = take
            left -= take
    if left:
        return None
    cells: Cells = {}
    stage = 0
    for k in block_order(ctx, list(stages_in)):
        for j in range(stage, stage + stages_in[k]):
            cells[j, k] = cells_per_stage
        stage += stages_in[k]
    return cells


def speed_layers(ctx: ShapeContext, cells: Cells, grain: int) -> list[int] | None:
    """Layers per stage in proportion to the speed (1 / one layer's time) of the slowest building holding each stage
    under `cells`, in units of `grain` layers, at least one unit each (largest remainder); None when the model does
    not split so. The split a pattern's cells suggest: with its cells fixed, HiGHS's node budget may stop short of it
    (generated medium seed 104: PP 21 over two B200 halls, 200 nodes ended at 6.40 s with stages of 2 to 8 layers,
    the even split prices 5.34 s). When no admissible pair holds that split in memory, the split within the rooms
    (`stage_rooms`) of the pair that holds the most layers: each stage capped at its room, the layers above a cap
    shared by the others in proportion to speed (generated medium seed 10: Llama 4 Maverick, PP 16 over five B200
    and eleven H100 stages, the speed split gave H100 stages 3-4 layers where 2 fit, and no pattern had a plan in 5 s);
    None when none holds the layers."""
    total, p = ctx.instance.model_spec.layers, ctx.shape.pp
    if total % grain or total // grain < p:
        return None
    pace = {j: max(ctx.gpu(k).layer.total_s for (i, k), n in cells.items() if i == j and n) for j in range(p)}
    speed = [1.0 / pace[j] for j in range(p)]
    units = total // grain
    split = [c * grain for c in capped_split(units, speed, [units] * p)]
    rooms = stage_rooms(ctx, cells)
    if not rooms or any(holds(split, room) for room in rooms):
        return split
    capped = capped_split(units, speed, [r // grain for r in max(rooms, key=sum)])
    return None if capped is None else [c * grain for c in capped]


def holds(layers: list[int], room: list[int]) -> bool:
    """Whether every stage's layers fit its room."""
    return all(n <= r for n, r in zip(layers, room, strict=True))


def holding_pairs(ctx: ShapeContext, cells: Cells, layers: list[int]) -> list[Pair]:
    """ctx's admissible pairs under which every stage holds its `layers` in HBM (`stage_rooms`)."""
    return [pair for pair, room in zip(ctx.pairs, stage_rooms(ctx, cells), strict=True) if holds(layers, room)]


def stage_rooms(ctx: ShapeContext, cells: Cells) -> list[list[int]]:
    """Per admissible (option, variant) pair of ctx, the layers each stage can hold on the smallest usable HBM among
    the buildings `cells` put it in (`context.stage_room_table`); none when ctx has no admissible pair."""
    if not ctx.pairs:
        return []
    options = list(dict.fromkeys(o for o, _ in ctx.pairs))
    variants = list(dict.fromkeys(v for _, v in ctx.pairs))
    hbm = [min(ctx.gpu(k).hbm_usable_bytes for (i, k), n in cells.items() if i == j and n) for j in range(ctx.shape.pp)]
    tables = {size: stage_room_table(ctx.costs, size, ctx.shape, options, variants, ctx.moe_memory)
              for size in set(hbm)}
    return [[int(tables[size][options.index(o), variants.index(v), j]) for j, size in enumerate(hbm)]
            for o, v in ctx.pairs]


def capped_split(units: int, speed: list[float], caps: list[int]) -> list[int] | None:
    """`units` over the stages, at least one each and at most caps[j], the rest in proportion to speed (stages whose
    share passes their cap held at it, the others sharing what is left), to whole units by largest remainder; None
    when the caps cannot hold them."""
    p = len(speed)
    if min(caps) < 1 or sum(caps) < units:
        return None
    exact, free, left = [1.0] * p, set(range(p)), units - p
    while free:
        pace = left / sum(speed[j] for j in free)
        over = {j for j in free if 1 + pace * speed[j] >= caps[j]}
        if not over:
            for j in free:
                exact[j] = 1 + pace * speed[j]
            break
        for j in over:
            exact[j] = caps[j]
            left -= caps[j] - 1
        free -= over
    counts = [math.floor(e) for e in exact]
    for j in sorted(range(p), key=lambda j: counts[j] - exact[j])[: units - sum(counts)]:
        counts[j] += 1
    return counts


@dataclass(frozen=True)
class Restriction:
    """The buildings a shape's restriction is solved over, and the named patterns' cells that fill them."""

    buildings: list[str]
    """In the instance's order."""
    patterns: list[Cells]


def restrictions(ctx: ShapeContext) -> list[Restriction]:
    """The shape's restrictions, fewest buildings first, each smaller than the cluster: over the buildings DP-out
    fills (`dp_out_cells`), over those PP-out's stages sit in (`pp_out_cells`) and over the one building whose
    layers cost least (`one_building_cells`), once per building set with the distinct patterns filling it."""
    sets: dict[tuple[str, ...], list[Cells]] = {}
    for cells in [*(pattern_cells(ctx, pattern) for pattern in Pattern), one_building_cells(ctx)]:
        held = set() if cells is None else holders(cells)
        if held and len(held) < len(ctx.buildings):
            patterns = sets.setdefault(tuple(k for k in ctx.buildings if k in held), [])
            patterns += [cells] if cells not in patterns else []
    return [Restriction(list(buildings), patterns)
            for buildings, patterns in sorted(sets.items(), key=lambda item: len(item[0]))]


def pattern_cells(ctx: ShapeContext, pattern: Pattern) -> Cells | None:
    return dp_out_cells(ctx) if pattern is Pattern.dp_out else pp_out_cells(ctx)


def holders(cells: Cells) -> set[str]:
    """The buildings `cells` put some stage cell in."""
    return {k for (_, k), n in cells.items() if n}


def spans_all(ctx: ShapeContext, cells: Cells) -> bool:
    """Whether `cells` use every building of the shape's routes (a pattern no restriction holds)."""
    return len(holders(cells)) == len(ctx.buildings)


@contextmanager
def fixed_cells(m: pyo.ConcreteModel, cells: Cells | None) -> Iterator[None]:
    """Fix x (and y) to `cells` inside the block (nothing when None); the model is restored on exit."""
    if cells is None:
        yield
        return
    fixed = [m.x[j, k] for j in m.J for k in m.K] + [m.y[j, k] for j in m.J for k in m.K]
    for j in m.J:
        for k in m.K:
            count = cells.get((j, k), 0)
            m.x[j, k].fix(count)
            m.y[j, k].fix(1 if count else 0)
    try:
        yield
    finally:
        for var in fixed:
            var.unfix()
