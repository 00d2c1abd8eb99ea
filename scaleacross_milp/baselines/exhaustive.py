"""The exhaustive baseline: every layout of the instance's searched space that the hardware can run, each replayed
by the verifier; the ground truth for optimality on small instances.

The space (what the MILP searches):
  shapes      milp.shapes.enumerate_shapes
  schedules   costmodel.schedule.schedule_options of each shape (interleaving with every search.interleave_chunks)
              whose layer granularity g (chunks per rank) the model meets: L a multiple of g, L >= g pp
  DP modes    milp.context.dp_variants (HSDP with every replica count r in 2..buildings dividing the cells)
  layer split every composition of L / g units into pp positive parts: C(L / g - 1, pp - 1)
  placement   every pp x K matrix of stage cells per building with row sums C = dp / ep and column sums within
              each building's cells (floor(G_k / cell GPUs))
  routes      every way to chain those cells into pipelines: a multiset of C routes (building sequences
              (k_0, ..., k_pp-1), one cell of each stage; a cell's ep pipelines follow one route) whose stage-j
              counts are row j of the placement (`routings`); together, placement and routes are every multiset
              of C routes with building k used at most its cells times over all stages and routes
  transports  every combination of each link's transports; a layout in one building uses no link and is replayed
              once (no byte crosses a link, so the transports cannot change its time)
Memory-infeasible layouts (verify.layout.resolve) are counted but not replayed.

Symmetry: when the instance has exactly two buildings whose specs are identical (the one link joins them, so their
link sets are too), swapping them maps every layout to another of equal time; of a placement and its mirror image
only the smaller is replayed (with all its routes; a placement equal to its mirror keeps all its routes). Exact: for
two buildings the replay's name-ordered choices (FSDP / HSDP shard groups laid out in name order) are mirror images
under the swap (tests check the times agree).
Three or more buildings are not pruned: a relabelling changes those orders non-isomorphically.

The count is taken before any replay (`count_layouts`) and an instance above LIMIT is refused. One replay of a
small instance takes about 9 ms (845 replays of a two-building, 32-GPU Llama 3 8B space with PP 1-2 in 7.5 s on 2
shared cores; more stages and microbatches cost more), so LIMIT layouts take some 3 minutes and more. Replays run
in one process: with 2 shared cores, spawned workers do not pay.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from itertools import product
from typing import TypeAlias

from scaleacross_milp.baselines.pricing import priced, replay_s
from scaleacross_milp.baselines.result import BaselineResult, Kind
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.schedule import ScheduleOption, searched_options
from scaleacross_milp.milp.context import dp_variants
from scaleacross_milp.milp.shapes import enumerate_shapes
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout, PipelineRoute, Shape, StagePlacement
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.topology import Transport

LIMIT = 20_000
"""Most layouts `exhaustive` enumerates (module docstring: a few minutes of replays)."""

COUNT_STATES = 200_000
"""Largest table the exact placement count of one family may build (count_layouts)."""

Cells = tuple[tuple[int, ...], ...]
"""Stage cells per (stage, building), buildings in instance order."""
Routing: TypeAlias = tuple[tuple[tuple[int, ...], int], ...]
"""(route, cells) pairs: a route is the building index of each stage so far."""


@dataclass(frozen=True)
class Family:
    """A shape with one schedule option and one DP variant: what a layer split, placement and transports complete."""

    shape: Shape
    option: ScheduleOption
    variant: DPVariant

    def layout(self, instance: Instance, split: tuple[int, ...], cells: Cells, routing: Routing,
               transports: dict[str, Transport]) -> Layout:
        names = [b.name for b in instance.topology.buildings]
        stages = [StagePlacement(stage=j, layers=n, cells_per_building={k: x for k, x in zip(names, row, strict=True)
                                                                        if x})
                  for j, (n, row) in enumerate(zip(split, cells, strict=True))]
        routes = [PipelineRoute(buildings=[names[k] for k in route], pipelines=n * self.shape.ep)
                  for route, n in sorted(routing)]
        hsdp = self.variant.mode is DPMode.hsdp
        return Layout(instance=instance.name, shape=self.shape, schedule=self.option.schedule,
                      interleave=self.option.chunks if self.option.schedule is Schedule.interleaved else 1,
                      dp_mode=self.variant.mode, hsdp_replicas=self.variant.replicas if hsdp else None,
                      stages=stages, pipelines=routes, transports=transports)


def families(instance: Instance) -> list[Family]:
    """Every (shape, schedule option, DP variant) of the searched space whose layer granularity the model meets."""
    search, layers = instance.search, instance.model_spec.layers
    buildings = len(instance.topology.buildings)
    found = []
    for shape in enumerate_shapes(instance):
        options = [o for o in searched_options(instance, shape)
                   if layers % o.layer_granularity == 0 and layers >= o.layer_granularity * shape.pp]
        variants = dp_variants(search.dp_modes, shape.cells_per_stage, buildings)
        found += [Family(shape, o, v) for o in options for v in variants]
    return found


def splits(layers: int, pp: int, granularity: int) -> Iterator[tuple[int, ...]]:
    """Every composition of layers / granularity units into pp positive parts, in layers."""
    units = layers // granularity
    if pp == 1:
        yield (layers,)
        return
    for first in range(1, units - pp + 2):
        for rest in splits(layers - first * granularity, pp - 1, granularity):
            yield (first * granularity, *rest)


def room(instance: Instance, cell_gpus: int) -> tuple[int, ...]:
    return tuple(b.gpus // cell_gpus for b in instance.topology.buildings)


def rows(total: int, caps: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Every way to put `total` cells into buildings holding at most caps[k] each."""
    if len(caps) == 1:
        if total <= caps[0]:
            yield (total,)
        return
    for x in range(min(total, caps[0]) + 1):
        for rest in rows(total - x, caps[1:]):
            yield (x, *rest)


def placements(pp: int, cells: int, caps: tuple[int, ...]) -> Iterator[Cells]:
    """Every pp x K matrix with row sums `cells` and column sums within `caps`."""
    if pp == 0:
        yield ()
        return
    for row in rows(cells, caps):
        left = tuple(c - x for c, x in zip(caps, row, strict=True))
        for rest in placements(pp - 1, cells, left):
            yield (row, *rest)


@cache
def placement_count(pp: int, cells: int, caps: tuple[int, ...]) -> int:
    """len(placements(pp, cells, caps)) by dynamic programming over stages, each building's room clipped to the
    cells the remaining stages can use (which leaves the count unchanged)."""
    if pp == 0:
        return 1
    caps = tuple(min(c, pp * cells) for c in caps)
    return sum(placement_count(pp - 1, cells, tuple(c - x for c, x in zip(caps, row, strict=True)))
               for row in rows(cells, caps))


def routings(cells: Cells) -> Iterator[Routing]:
    """Every multiset of routes through the stages whose stage-j counts per building are cells[j]: each route group
    of the stages so far split over the next stage's buildings (`rows`), all of that stage's cells used."""
    start = tuple(((k,), n) for k, n in enumerate(cells[0]) if n)
    yield from _extend(start, cells[1:])


def _extend(routing: Routing, rest: Cells) -> Iterator[Routing]:
    if not rest:
        yield routing
        return
    for extended in _split(routing, rest[0]):
        yield from _extend(extended, rest[1:])


def _split(routing: Routing, left: tuple[int, ...]) -> Iterator[Routing]:
    """Each (route, n) of `routing` extended by n cells of the next stage, taking left[k] cells in building k."""
    if not routing:
        yield ()
        return
    (route, count), others = routing[0], routing[1:]
    for row in rows(count, left):
        rest = tuple(c - x for c, x in zip(left, row, strict=True))
        for tail in _split(others, rest):
            yield tuple((route + (k,), x) for k, x in enumerate(row) if x) + tail


@cache
def route_multisets(pp: int, cells: int, caps: tuple[int, ...]) -> int:
    """Placements with their routes (sum over placements of len(routings)): multisets of `cells` routes in K^pp
    with building k occurring at most caps[k] times over all routes and stages, counted by dynamic programming over
    the K^pp routes (how many cells take each; state: cells left, room left per building, the caps clipped to
    pp x cells)."""
    states: Counter[tuple[int, tuple[int, ...]]] = Counter({(cells, tuple(min(c, pp * cells) for c in caps)): 1})
    for route in product(range(len(caps)), repeat=pp):
        uses = [route.count(k) for k in range(len(caps))]
        following: Counter[tuple[int, tuple[int, ...]]] = Counter()
        for (left, room_left), ways in states.items():
            x = 0
            while x <= left and all(x * u <= r for u, r in zip(uses, room_left, strict=True)):
                following[left - x, tuple(r - x * u for u, r in zip(uses, room_left, strict=True))] += ways
                x += 1
        states = following
    return sum(ways for (left, _), ways in states.items() if left == 0)


@cache
def row_count(total: int, caps: tuple[int, ...]) -> int:
    if len(caps) == 1:
        return int(total <= caps[0])
    return sum(row_count(total - x, caps[1:]) for x in range(min(total, caps[0]) + 1))


def transport_choices(instance: Instance) -> list[dict[str, Transport]]:
    links = instance.topology.links
    keys = [f"{link.a}-{link.b}" for link in links]
    return [dict(zip(keys, combo, strict=True)) for combo in product(*(link.transports for link in links))]


def count_layouts(instance: Instance, limit: int | None = None) -> tuple[int, bool]:
    """(layouts in the searched space, exact). Per family: C(L/g - 1, pp - 1) splits x placements with their routes
    (route_multisets) x transport combinations. When the route count would need a large table (states beyond
    COUNT_STATES) the placement count stands in for it (every placement has at least one routing), and when that
    too would, its lower bound R^pp, R the rows within floor(room_k / pp) per building (any pp such rows fit); the
    count is then marked inexact (at least). With `limit`, routes are counted only when the placements alone stay
    within it (else the placement count is returned, inexact: enough to refuse the space)."""
    lower, exact = _count(instance, routes=False)
    if limit is not None and lower > limit:
        return lower, False
    return _count(instance, routes=True)


def _count(instance: Instance, routes: bool) -> tuple[int, bool]:
    """count_layouts with routes counted (`routes`) or each placement counted once (inexact when it has several)."""
    layers, combos = instance.model_spec.layers, len(transport_choices(instance))
    total, exact = 0, True
    for family in families(instance):
        shape = family.shape
        caps = room(instance, shape.cell_gpus)
        split_count = math.comb(layers // family.option.layer_granularity - 1, shape.pp - 1)
        states = math.prod(min(c, shape.pp * shape.cells_per_stage) + 1 for c in caps)
        if routes and states * shape.cells_per_stage * len(caps) ** shape.pp <= COUNT_STATES:
            fits = route_multisets(shape.pp, shape.cells_per_stage, caps)
        elif states * shape.pp <= COUNT_STATES:
            fits = placement_count(shape.pp, shape.cells_per_stage, caps)
            exact = exact and (shape.pp == 1 or len(caps) == 1)
        else:
            fits = row_count(shape.cells_per_stage, tuple(c // shape.pp for c in caps)) ** shape.pp
            exact = False
        total += split_count * fits * combos
    return total, exact


def mirror(instance: Instance) -> bool:
    """Two buildings with identical specs (names aside): the swap maps the instance onto itself."""
    buildings = instance.topology.buildings
    if len(buildings) != 2:
        return False
    a, b = (building.model_dump(exclude={"name"}) for building in buildings)
    return a == b


def canonical(cells: Cells, swap: bool) -> bool:
    """Whether `cells` is the smaller of itself and its mirror image (always, without the swap)."""
    return not swap or cells <= tuple(tuple(reversed(row)) for row in cells)


def layouts(instance: Instance) -> Iterator[Layout]:
    """Every layout of the space that is replayed (module docstring: one transport choice for one-building
    layouts, one of each mirror pair)."""
    layers, choices, swap = instance.model_spec.layers, transport_choices(instance), mirror(instance)
    for family in families(instance):
        shape = family.shape
        caps = room(instance, shape.cell_gpus)
        for cells in placements(shape.pp, shape.cells_per_stage, caps):
            if not canonical(cells, swap):
                continue
            used = {k for row in cells for k, x in enumerate(row) if x}
            for routing in routings(cells):
                for split in splits(layers, shape.pp, family.option.layer_granularity):
                    for transports in choices if len(used) > 1 else choices[:1]:
                        yield family.layout(instance, split, cells, routing, transports)


def exhaustive(instance: Instance, limit: int = LIMIT) -> BaselineResult:
    """The layout of least verified time over the whole searched space (InputError above `limit` layouts)."""
    count, exact = count_layouts(instance, limit)
    if count > limit:
        raise InputError(f"exhaustive: the searched space holds {'' if exact else 'at least '}{count:,} layouts, "
                         f"above the limit of {limit:,}; restrict search (pp_degrees, tp_degrees, cp_degrees, "
                         f"micro_batch_sizes, schedules, interleave_chunks, dp_modes) or use fewer buildings")
    best, best_s, replayed, infeasible = None, math.inf, 0, 0
    for layout in layouts(instance):
        seconds = replay_s(instance, layout)
        if seconds is None:
            infeasible += 1
            continue
        replayed += 1
        if seconds < best_s:
            best, best_s = layout, seconds
    if best is None:
        raise InputError(f"exhaustive: none of the {count:,} layouts fits the hardware (memory)")
    notes = [f"{count:,} layouts in the searched space; {replayed:,} replayed, {infeasible:,} do not fit memory, "
             f"the rest skipped as mirror images or transports of one-building layouts"]
    return priced(Kind.exhaustive, instance, best, notes, evaluated=replayed)
