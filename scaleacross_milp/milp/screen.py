"""Screening: the necessary conditions every shape must meet before its MILP is worth building, and the analytical
lower bound of each shape that meets them, within a deadline.

A shape needs an attainable schedule option (`context.attainable`), a DP variant, stage cells the buildings hold
(p x D cells) and an admissible (option, variant) pair (`context.admissible`: the model fits in HBM). These checks
read only byte counts (`costmodel.memory.shape_memory`), and a shape's first bound is its compute floor
(`bounds.compute_floor_s`, from the per-cell layer times the instance prices once), so screening prices no shape in
time. A candidate is priced (`Candidate.context`: its cost table, from the instance's shared `InstanceTables`) and
bounded (`bounds.lower_bound_s`) once, when the search first reaches it; both stay on its context.

Shapes are screened in order of their compute floor, so under a deadline (the search's work clock, `milp.work`) the
most promising are screened first; the shapes the deadline leaves unscreened are bounded by the least of their
compute floors, which keeps the search's bound valid.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from scaleacross_milp.costmodel.build import InstanceTables, cell_costs, instance_tables
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.layer_kinds import MoEMemory, moe_memory
from scaleacross_milp.costmodel.memory import ShapeMemory, memory_key, shape_memory
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.milp.bounds import (
    LinkTable,
    compute_floor_s,
    crossing_floors,
    link_table,
    lower_bound_s,
    screening_bubble,
    type_floors_s,
)
from scaleacross_milp.milp.context import (
    HBMTier,
    Pair,
    ShapeContext,
    admissible,
    attainable,
    hbm_tiers,
    shape_context,
    shape_options,
    stage_memory_table,
)
from scaleacross_milp.milp.routes import RouteTable
from scaleacross_milp.milp.shapes import enumerate_shapes, per_requested
from scaleacross_milp.milp.work import FLOOR_S_PER_SHAPE, SCREEN_S_PER_SHAPE, WorkClock
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape


@dataclass
class Candidate:
    """A shape that passed the necessary conditions, with its compute floor, the options and variants of its
    admissible pairs, and (once the search reaches it, `context`) its priced context and screening bound."""

    shape: Shape
    index: int
    """Its place in enumeration order (ties between equal bounds go to the earlier shape)."""
    floor_s: float
    """The compute floor per requested batch (x B_requested / B_run, `Shape.batch_factor`)."""
    options: list[ScheduleOption]
    variants: list[DPVariant]
    pairs: list[Pair]
    ctx: ShapeContext | None = None
    bound_s: float = math.nan
    """`bounds.lower_bound_s` of the priced context, per requested batch (`shapes.per_requested`)."""

    def context(self, instance: Instance, routes: RouteTable, tables: InstanceTables) -> ShapeContext:
        """The shape's context, priced and bounded on first use."""
        if self.ctx is None:
            self.ctx = shape_context(instance, self.shape, routes, tables, (self.options, self.variants), self.pairs)
            self.bound_s = lower_bound_s(self.ctx, self.ctx.pairs) * per_requested(self.ctx)
        return self.ctx


@dataclass
class Screening:
    """Shapes that passed the necessary conditions (in order of compute floor), why the others did not, and the
    shapes a deadline left unscreened."""

    instance: Instance
    routes: RouteTable
    tables: InstanceTables
    total: int = 0
    candidates: list[Candidate] = field(default_factory=list)
    no_schedule: int = 0
    no_dp_variant: int = 0
    no_capacity: int = 0
    no_memory: list[tuple[float, Shape]] = field(default_factory=list)
    """(least per-GPU GiB over its options and variants, shape) of each shape that fits under none."""
    unscreened: int = 0
    unscreened_bound_s: float = math.inf
    """The least compute floor of the unscreened shapes: a valid bound over them (infinite when none)."""
    wall_s: float = 0.0
    links: LinkTable | None = None

    @property
    def hbm_gib(self) -> float:
        return self.tables.hbm_bytes / 2**30

    def crossing_floor_s(self, candidate: Candidate) -> float:
        """The candidate's floor with what crossing buildings costs it at least (`shape_floor_s` with the links), per
        requested batch: a step between its compute floor and its pricing (`ShapeSearch.best_first`), as it takes
        about 0.15 ms a shape, which over every shape of a 16-building instance doubled screening."""
        return shape_floor_s(self.instance, candidate.shape, self.links, candidate.options, candidate.variants,
                             self.tables) * candidate.shape.batch_factor(self.instance.training.batch_sequences)

    def context(self, candidate: Candidate) -> ShapeContext:
        """A candidate's context, priced and bounded on first use."""
        return candidate.context(self.instance, self.routes, self.tables)


def fits_capacity(instance: Instance, shape: Shape) -> bool:
    """The buildings hold the shape's p x D stage cells: sum_k floor(gpus_k / cell GPUs) >= p D."""
    room = sum(b.gpus // shape.cell_gpus for b in instance.topology.buildings)
    return room >= shape.pp * shape.cells_per_stage


def min_memory_gib(memory: ShapeMemory, shape: Shape, layers: int, options: list[ScheduleOption],
                   variants: list[DPVariant]) -> float:
    """Smallest per-GPU memory the shape can need: best schedule option and variant, ceil(L / p) layers a stage."""
    fixed, per_layer = stage_memory_table(memory, shape, options, variants)
    return float(np.max(fixed + math.ceil(layers / shape.pp) * per_layer, axis=2).min()) / 2**30


def shape_floor_s(instance: Instance, shape: Shape, links: LinkTable | None, options: list[ScheduleOption],
                  variants: list[DPVariant], tables: InstanceTables) -> float:
    """`compute_floor_s` of a shape from its cells' costs on the GPU types in use, every layer at the least pace a
    stage can run at and the cycle at least what the buildings' GPU types allow (`type_floors_s`), with its crossing
    floors over `links` when given (`crossing_floors`: pipeline sends and cross-building DP of the layouts it can
    take); infinite without an option. Bubble coefficients (`screening_bubble`) and chunk credits on the first
    building's type, as `lower_bound_s` takes them."""
    if not options:
        return math.inf
    cells = {name: cell_costs(instance, shape, name, tables) for name in tables.comm}
    fixed = (min(cell.first_stage_extra.total_s for cell in cells.values())
             + min(cell.last_stage_extra.total_s for cell in cells.values()))
    layer = cells[instance.topology.buildings[0].gpu_type].layer
    tau = min(cell.layer.total_s for cell in cells.values())
    rooms: dict[float, int] = {}
    for building in instance.topology.buildings:
        speed = cells[building.gpu_type].layer.total_s
        rooms[speed] = rooms.get(speed, 0) + building.gpus // shape.cell_gpus
    layers = instance.model_spec.layers
    stage_tau, cycle = type_floors_s(layers, shape, sorted(rooms.items()))
    bubble = min(screening_bubble(option, layer, shape.pp) for option in options)
    return compute_floor_s(shape, layers, stage_tau, fixed, bubble,
                           crossing_floors(instance, shape, links, options, variants, layer, tau), cycle)


def screen(instance: Instance, routes: RouteTable, clock: WorkClock | None = None, tail_s: float = 0.0) -> Screening:
    """Screen every enumerated shape (module docstring); with a `clock`, charging it FLOOR_S_PER_SHAPE per shape
    enumerated and SCREEN_S_PER_SHAPE per shape screened, until only `tail_s` of its work budget is left (or the wall
    time that work may take, `WorkClock.step_wall_s`, has passed), or past that until one shape passes."""
    start = time.perf_counter()
    tables = instance_tables(instance)
    shapes = enumerate_shapes(instance)
    model, training = instance.model_spec, instance.training
    result = Screening(instance, routes, tables, total=len(shapes))
    choices = []
    for shape in shapes:
        options, variants = shape_options(instance, shape, len(routes.buildings))
        choices.append((attainable(options, model.layers, shape.pp), variants))
    result.links = link_table(routes)
    floors = [shape_floor_s(instance, shape, None, options, variants, tables)
              * shape.batch_factor(training.batch_sequences)
              for shape, (options, variants) in zip(shapes, choices, strict=True)]
    order = sorted(range(len(shapes)), key=floors.__getitem__)
    memories: dict[tuple, tuple[ShapeMemory, MoEMemory | None]] = {}  # by `memory_key` and variants
    tiers: dict[tuple[int, int], list[HBMTier]] = {}  # `hbm_tiers` by (cell GPUs, cells per stage)
    if clock is not None:
        clock.charge(FLOOR_S_PER_SHAPE * len(shapes))
        wall_until_s = clock.wall_s + clock.step_wall_s(max(clock.work_left_s(tail_s), 0.0))
    for n, index in enumerate(order):
        if clock is not None and result.candidates and (clock.work_left_s(tail_s) <= 0 or clock.wall_s >= wall_until_s):
            clock.wall_bound |= clock.work_left_s(tail_s) > 0
            result.unscreened = len(order) - n
            result.unscreened_bound_s = floors[index]
            break
        shape = shapes[index]
        options, variants = choices[index]
        if clock is not None:
            clock.charge(SCREEN_S_PER_SHAPE)
        if not options:
            result.no_schedule += 1
        elif not variants:
            result.no_dp_variant += 1
        elif not fits_capacity(instance, shape):
            result.no_capacity += 1
        else:
            key = (memory_key(shape), tuple(variants))
            if key not in memories:
                memories[key] = (shape_memory(model, shape, training, variants),
                                 moe_memory(model, shape, training, variants))
            memory, moe = memories[key]
            cells = (shape.cell_gpus, shape.cells_per_stage)
            if cells not in tiers:
                tiers[cells] = hbm_tiers(instance, routes.buildings, shape)
            pairs = admissible(memory, tiers[cells], shape, model.layers, options, variants, moe)
            if not pairs:
                result.no_memory.append((min_memory_gib(memory, shape, model.layers, options, variants), shape))
                continue
            used_options, used_variants = {o for o, _ in pairs}, {v for _, v in pairs}
            result.candidates.append(Candidate(
                shape, index, floors[index], [o for o in options if o in used_options],
                [v for v in variants if v in used_variants], pairs))
    result.wall_s = time.perf_counter() - start
    return result
