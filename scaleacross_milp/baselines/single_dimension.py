"""The single-dimension baseline (the strongest prior approach): optimise one dimension at a time from the
production layout, by coordinate descent over three dimensions, in turn, until every dimension has been searched
once since the last change without gain (searching the one that changed again would return the same layout).

  placement   shape, stage cells per building, layer split and pipeline routes: the MILP (milp.solve) on the
              instance with the other dimensions fixed through its search options (schedules and interleave_chunks
              to the current schedule, dp_modes to the current mode) and each link's transports to the current one;
              its plan is replayed (an HSDP plan keeps the MILP's replica count)
  schedule    every schedule option (costmodel.schedule.schedule_options) and DP variant (milp.context.dp_variants)
              of the searched space on the current placement, each replayed; options whose chunks per rank do not
              divide a stage's layers, and memory-infeasible layouts, are skipped
  transports  every combination of the links' transports on the current layout, each replayed, while there are at
              most TRANSPORT_PRODUCT_LIMIT; beyond that (14 links of 2-3 transports make 36,864) each uniform choice
              (one transport on every link that offers it: a route over several links is paced by its slowest, so
              one link's change alone may gain nothing), then link by link from the best: each link's other
              transports with the rest held, the best kept, in sweeps until one changes nothing
A step is taken only when the verified time drops (by more than IMPROVEMENT), so the descent ends and the result is
never slower than production. Every step is recorded (its dimension, the change or "no change", the verified time).
Each distinct layout is replayed once (`Replays`): the steps meet the same layouts again (the current one among a
step's candidates, a placement the MILP returns unchanged), and at 131,072 GPUs a replay takes 5-10 s.
"""

from __future__ import annotations

import itertools
import math

from scaleacross_milp.baselines.exhaustive import transport_choices
from scaleacross_milp.baselines.pricing import priced, replay_s
from scaleacross_milp.baselines.production import production
from scaleacross_milp.baselines.result import BaselineResult, Kind, Step
from scaleacross_milp.costmodel.schedule import searched_options
from scaleacross_milp.milp.context import dp_variants
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout, dp_mode_label, schedule_label
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.topology import Transport

IMPROVEMENT = 1e-9
"""Relative drop of the verified time below which a step counts as no change (replay round-off)."""
TRANSPORT_PRODUCT_LIMIT = 64
"""Most transport combinations the transports step replays all of; beyond it the step goes link by link."""


def placement_label(layout: Layout) -> str:
    stages = "; ".join(f"{s.layers} layers {dict(sorted(s.cells_per_building.items()))}" for s in layout.stages)
    return f"{layout.shape.label()}: {stages}"


def choice_label(layout: Layout) -> str:
    """Schedule and DP mode of a descent step (the report's labels)."""
    return f"{schedule_label(layout)}, {dp_mode_label(layout)}"


def transports_label(layout: Layout) -> str:
    return ", ".join(f"{key} {t.value}" for key, t in sorted(layout.link_transports().items())) or "no links"


def restricted(instance: Instance, layout: Layout) -> Instance:
    """`instance` whose search allows only `layout`'s schedule and DP mode and whose links only its transports."""
    search = instance.search.model_copy(update={
        "schedules": [layout.schedule], "interleave_chunks": [max(layout.interleave, 2)],
        "dp_modes": [layout.dp_mode]})
    chosen = layout.link_transports()
    links = [link.model_copy(update={"transports": [chosen[f"{link.a}-{link.b}"]]})
             for link in instance.topology.links]
    return instance.model_copy(update={"search": search,
                                       "topology": instance.topology.model_copy(update={"links": links})})


def best_placement(instance: Instance, layout: Layout, time_limit_s: float | None) -> Layout:
    """The MILP's placement with `layout`'s schedule, DP mode and transports."""
    try:
        plan = solve_instance(restricted(instance, layout), time_limit_s=time_limit_s)
    except InputError:
        return layout
    return layout.model_copy(update={"shape": plan.shape, "stages": plan.stages, "pipelines": plan.pipelines,
                                     "hsdp_replicas": plan.hsdp_replicas})


def schedule_candidates(instance: Instance, layout: Layout) -> list[Layout]:
    """`layout` under every schedule option and DP variant of the searched space its layer split admits."""
    search, shape = instance.search, layout.shape
    options = [o for o in searched_options(instance, shape)
               if all(s.layers % o.layer_granularity == 0 for s in layout.stages)]
    variants = dp_variants(search.dp_modes, shape.cells_per_stage, len(instance.topology.buildings))
    return [layout.model_copy(update={
        "schedule": o.schedule, "interleave": o.chunks if o.schedule is Schedule.interleaved else 1,
        "dp_mode": v.mode, "hsdp_replicas": v.replicas if v.mode is DPMode.hsdp else None})
        for o in options for v in variants]


class Replays:
    """`replay_s` of each distinct layout of `instance`, computed once."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.seconds: dict[str, float | None] = {}

    def __call__(self, layout: Layout) -> float | None:
        key = layout.model_dump_json()
        if key not in self.seconds:
            self.seconds[key] = replay_s(self.instance, layout)
        return self.seconds[key]


def fastest(replays: Replays, candidates: list[Layout]) -> tuple[Layout | None, float]:
    best, best_s = None, float("inf")
    for candidate in candidates:
        seconds = replays(candidate)
        if seconds is not None and seconds < best_s:
            best, best_s = candidate, seconds
    return best, best_s


def best_transports(replays: Replays, layout: Layout, layout_s: float) -> tuple[Layout | None, float]:
    """The transports step on `layout` (replayed at `layout_s`): see the module docstring."""
    instance = replays.instance
    links = instance.topology.links
    if math.prod(len(link.transports) for link in links) <= TRANSPORT_PRODUCT_LIMIT:
        return fastest(replays, [layout.model_copy(update={"transports": t}) for t in transport_choices(instance)])
    held = layout.link_transports()
    best, best_s = fastest(replays, [layout.model_copy(update={"transports": {
        f"{link.a}-{link.b}": t if t in link.transports else held.get(f"{link.a}-{link.b}", link.transports[0])
        for link in links}})
        for t in Transport])
    if best is None or best_s >= layout_s * (1 - IMPROVEMENT):
        best, best_s = layout, layout_s
    improved = True
    while improved:
        improved = False
        for link in links:
            key, held = f"{link.a}-{link.b}", best.link_transports()
            candidate, seconds = fastest(replays, [best.model_copy(update={"transports": {**held, key: t}})
                                                    for t in link.transports if t is not held.get(key)])
            if candidate is not None and seconds < best_s * (1 - IMPROVEMENT):
                best, best_s, improved = candidate, seconds, True
    return best, best_s


def single_dimension(instance: Instance, time_limit_s: float | None = None) -> BaselineResult:
    """Coordinate descent from production's layout (module docstring); `time_limit_s` bounds each MILP solve."""
    start = production(instance)
    layout, current = start.layout, start.iteration_s
    steps = [Step(dimension="start", change=f"production: {placement_label(layout)}; {choice_label(layout)}; "
                                            f"{transports_label(layout)}", iteration_s=current)]
    replays = Replays(instance)
    dimensions = (
        ("placement", placement_label, lambda: fastest(replays, [best_placement(instance, layout, time_limit_s)])),
        ("schedule and DP mode", choice_label, lambda: fastest(replays, schedule_candidates(instance, layout))),
        ("transports", transports_label, lambda: best_transports(replays, layout, current)),
    )
    unchanged = 0
    for name, label, search in itertools.cycle(dimensions):
        candidate, seconds = search()
        if candidate is not None and seconds < current * (1 - IMPROVEMENT):
            steps.append(Step(dimension=name, change=f"{label(layout)} -> {label(candidate)}", iteration_s=seconds))
            layout, current, unchanged = candidate, seconds, 1
        else:
            steps.append(Step(dimension=name, change="no change", iteration_s=current))
            unchanged += 1
        if unchanged == len(dimensions):
            break
    return priced(Kind.single_dimension, instance, layout, start.notes, steps)
