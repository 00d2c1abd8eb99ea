"""Check a layout against its instance and turn it into distinct pipeline patterns.

A pattern is a building sequence (the building of each rank's stage) with the number of pipelines that follow
it; pipelines of one pattern behave alike, so the replay simulates each pattern once and counts its flows
`pipelines` times on the links. Every inconsistency (a layout that does not describe a job of the instance)
raises InputError naming the field. What the hardware cannot run is listed with its binding figure in
`ResolvedLayout.infeasible`, as `solve` screens it: per stage and building, activations in flight plus states
above the usable HBM (`costmodel.memory.stage_bytes`, the MILP's tables); a TP group wider than the
building's NVLink domain; a building holding more GPUs than it has. `check` refuses such a layout.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from scaleacross_milp.costmodel.actions import ScheduleActions, build_actions, read_csv
from scaleacross_milp.costmodel.build import build_shape_costs
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.layer_kinds import stage_bytes_held
from scaleacross_milp.costmodel.schedule import ScheduleOption, overlaps_ep
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout, PipelineRoute, Shape, StageMemoryUse, StagePlacement
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.topology import Transport
from scaleacross_milp.spec.training import BatchRounding

GIB = 2**30


class InfeasibleLayout(InputError):
    """A consistent layout the hardware cannot run; `problems` holds one binding figure each."""

    SHOWN = 3

    def __init__(self, problems: list[str]) -> None:
        more = len(problems) - self.SHOWN
        super().__init__("; ".join(problems[:self.SHOWN]) + (f"; and {more} more" if more > 0 else ""))
        self.problems = problems


@dataclass(frozen=True)
class Pattern:
    buildings: tuple[str, ...]
    pipelines: int


@dataclass(frozen=True)
class ResolvedLayout:
    """A checked layout: schedule actions, DP variant, stages with layers, pipeline patterns, transports."""

    layout: Layout
    schedule: Schedule | None
    """The named schedule replayed (pp = 1 runs 1F1B unless GPipe); None for a custom CSV."""
    actions: ScheduleActions
    variant: DPVariant
    stages: tuple[StagePlacement, ...]
    patterns: tuple[Pattern, ...]
    transports: dict[str, Transport]
    notes: tuple[str, ...]
    memory: tuple[StageMemoryUse, ...] = ()
    """Per-GPU HBM needed and usable, per stage and building holding it."""
    infeasible: tuple[str, ...] = ()
    """What the hardware cannot run (memory, NVLink domain, building capacity), one binding figure each."""

    def cells(self, stage: int) -> dict[str, int]:
        return self.stages[stage].cells_per_building

    def placed(self) -> Layout:
        """The layout with everything the replay resolved written out: the schedule replayed, the HSDP replica
        groups, stages, pipeline routes and transports."""
        replicas = self.variant.replicas if self.variant.mode is DPMode.hsdp else None
        return self.layout.model_copy(update={
            "schedule": self.schedule or self.layout.schedule, "hsdp_replicas": replicas,
            "stages": list(self.stages), "transports": dict(self.transports),
            "pipelines": [PipelineRoute(buildings=list(p.buildings), pipelines=p.pipelines) for p in self.patterns]})


def check(instance: Instance, layout: Layout, base_dir: Path = Path(), allow_infeasible: bool = False
          ) -> ResolvedLayout:
    """`resolve`, refusing a layout the hardware cannot run (InfeasibleLayout) unless `allow_infeasible`."""
    resolved = resolve(instance, layout, base_dir)
    if resolved.infeasible and not allow_infeasible:
        raise InfeasibleLayout(list(resolved.infeasible))
    return resolved


def resolve(instance: Instance, layout: Layout, base_dir: Path = Path()) -> ResolvedLayout:
    """Check `layout` against `instance`, derive what the replay needs and list what the hardware cannot run."""
    shape, notes = layout.shape, []
    if layout.instance is not None and layout.instance != instance.name:
        raise InputError(f"instance: the layout is for '{layout.instance}', not '{instance.name}'")
    if shape.dp % shape.ep:
        raise InputError(f"shape: dp ({shape.dp}) must be a multiple of ep ({shape.ep})")
    _check_batch(instance, shape)
    schedule, actions = _actions(layout, base_dir, overlaps_ep(instance.training, shape))
    if actions.merged and shape.pp > 1 and schedule not in (None, Schedule.interleaved):
        raise InputError(f"schedule: {schedule.value} with PP {shape.pp} and EP {shape.ep}: "
                         "training.overlap_moe_expert_parallel_comm needs the interleaved schedule when PP > 1 "
                         "(Megatron-core asserts it)")
    variant = _variant(layout)
    stages = list(layout.stages) if layout.stages is not None else _one_building(instance, layout, actions, notes)
    _check_stages(instance, layout, stages, actions)
    routes = layout.pipelines if layout.pipelines is not None else chain(stages, shape.ep)
    _check_routes(routes, stages, shape.dp, shape.ep)
    patterns = tuple(Pattern(tuple(r.buildings), r.pipelines) for r in routes)
    merged = Counter()
    for pattern in patterns:
        merged[pattern.buildings] += pattern.pipelines
    patterns = tuple(Pattern(b, n) for b, n in sorted(merged.items()))
    use = stage_memory(instance, shape, variant, inflight_microbatches(schedule, actions), stages, actions.rank_of)
    infeasible = (*_capacity_problems(instance, shape, stages), *_nvlink_problems(instance, shape, stages),
                  *_memory_problems(use))
    return ResolvedLayout(layout, schedule, actions, variant, tuple(stages), patterns, _transports(instance, layout),
                          tuple(notes), use, infeasible)


def _check_batch(instance: Instance, shape: Shape) -> None:
    """The layout's microbatches must be the m that training.batch_rounding gives its DP x micro-batch
    (`Training.rounded_microbatches`); the message names the batch the rule allows, if any."""
    training, q = instance.training, shape.dp * shape.micro_batch
    m = training.rounded_microbatches(q)
    if shape.microbatches == m:
        return
    rule = f"training.batch_rounding '{training.batch_rounding.value}'"
    if training.batch_rounding is not BatchRounding.exact:
        rule += f" within batch_tolerance {training.batch_tolerance * 100:.1f} %"
    allowed = (f"allows {q * m} sequences ({m} microbatches)" if m is not None else
               f"allows no batch (multiples of {q} nearest: {_nearest_multiples(training.batch_sequences, q)})")
    raise InputError(f"shape.microbatches: dp x micro_batch x microbatches = {shape.batch_sequences} sequences, but "
                     f"the instance's global batch is {training.batch_sequences}; with dp x micro_batch = {q}, "
                     f"{rule} {allowed}")


def _nearest_multiples(batch: int, q: int) -> str:
    """The multiples of q (at least q) around `batch`, each with its relative change."""
    runs = sorted({max(q, batch // q * q), -(-batch // q) * q})
    return ", ".join(f"{run} ({(run / batch - 1) * 100:+.1f} %)" for run in runs)


def inflight_microbatches(schedule: Schedule | None, actions: ScheduleActions) -> list[float]:
    """Peak activations each rank holds, in microbatches through its whole stage: the named schedule's count
    (costmodel.schedule, what the MILP reads); for a custom order, the most chunk forwards (F) whose backward
    (B or I) has not run yet, over the chunks per rank."""
    if schedule is not None:
        option = ScheduleOption(schedule, actions.chunks, actions.merged)
        return [option.inflight_microbatches(actions.ranks, r, actions.microbatches) for r in range(actions.ranks)]
    peaks = []
    for order in actions.order:
        held = peak = 0
        for action in order:
            held += (action.kind == "F") - (action.kind in ("B", "I"))
            peak = max(peak, held)
        peaks.append(peak / actions.chunks)
    return peaks


def stage_memory(instance: Instance, shape: Shape, variant: DPVariant, inflight: list[float],
                 stages: list[StagePlacement], stage_map: tuple[int, ...]) -> tuple[StageMemoryUse, ...]:
    """Per stage j and building k holding it: the bytes its layers, MoE layers counted, and fixed parts take
    (`costmodel.layer_kinds.stage_bytes_held`, the LM head on the rank of the last virtual stage of `stage_map`)
    against the usable HBM of k's GPU type."""
    costs = build_shape_costs(instance, shape, [variant])
    held = stage_bytes_held(instance, costs, variant, [stage.layers for stage in stages], stage_map, inflight)
    rows = []
    for j, (stage, needed) in enumerate(zip(stages, held, strict=True)):
        for name in stage.cells_per_building:
            gpu_type = instance.topology.building(name).gpu_type
            rows.append(StageMemoryUse(stage=j, building=name, gpu_type=gpu_type, used_gib=needed / GIB,
                                       usable_gib=costs.building(name).hbm_usable_bytes / GIB))
    return tuple(rows)


def _memory_problems(use: tuple[StageMemoryUse, ...]) -> list[str]:
    return [f"stages[{row.stage}] in {row.building}: {row.used_gib:.1f} GiB needed per GPU > "
            f"{row.usable_gib:.1f} GiB usable ({row.gpu_type})" for row in use if row.free_gib < 0]


def _nvlink_problems(instance: Instance, shape: Shape, stages: list[StagePlacement]) -> list[str]:
    """TP must fit one NVLink domain in every building holding a stage (its collectives run every layer). CP may
    span domains (Llama 3 405B ran CP 16 over TP 8), priced at the fabric tier by the cost model."""
    problems, seen = [], set()
    for j, stage in enumerate(stages):
        for name in stage.cells_per_building:
            gpu_type = instance.topology.building(name).gpu_type
            domain = instance.gpu_types[gpu_type].nvlink_domain_gpus
            if shape.tp > domain and name not in seen:
                seen.add(name)
                problems.append(f"stages[{j}] in {name}: TP {shape.tp} is wider than the NVLink domain of "
                                f"{domain} GPUs ({gpu_type})")
    return problems


def _capacity_problems(instance: Instance, shape: Shape, stages: list[StagePlacement]) -> list[str]:
    used: Counter[str] = Counter()
    for stage in stages:
        for name, cells in stage.cells_per_building.items():
            used[name] += cells * shape.cell_gpus
    problems = []
    for name, gpus in used.items():
        have = instance.topology.building(name).gpus
        if gpus > have:
            problems.append(f"stages: building {name} is over capacity: {gpus:,} GPUs placed, it has {have:,}")
    return problems


def _actions(layout: Layout, base_dir: Path, merged: bool) -> tuple[Schedule | None, ScheduleActions]:
    p, m = layout.shape.pp, layout.shape.microbatches
    if layout.schedule_csv is not None:
        return None, read_csv(base_dir / layout.schedule_csv, p, m)
    schedule = layout.schedule
    if p == 1:
        schedule = Schedule.one_f_one_b if schedule is not Schedule.gpipe else schedule
    elif schedule is Schedule.interleaved and layout.interleave < 2:
        raise InputError("interleave: the interleaved schedule needs interleave >= 2")
    elif schedule in (Schedule.zb_h1, Schedule.zb_v) and m < p:
        raise InputError(f"schedule: {schedule.value} needs microbatches ({m}) >= pp ({p})")
    return schedule, build_actions(schedule, p, m, layout.interleave, merged)


def _variant(layout: Layout) -> DPVariant:
    cells = layout.shape.dp // layout.shape.ep
    if layout.dp_mode is not DPMode.hsdp:
        return DPVariant(layout.dp_mode)
    r = layout.hsdp_replicas
    if r is None or r < 2 or cells % r:
        raise InputError(f"hsdp_replicas: HSDP needs replica groups r >= 2 dividing the {cells} cells per stage, "
                         f"got {r}")
    return DPVariant(DPMode.hsdp, r)


def _one_building(instance: Instance, layout: Layout, actions: ScheduleActions, notes: list[str]
                  ) -> list[StagePlacement]:
    """No placement given: the first building that holds every GPU, layers as even as the chunks allow."""
    shape, layers = layout.shape, instance.model_spec.layers
    home = next((b for b in instance.topology.buildings if b.gpus >= shape.gpus), None)
    if home is None:
        biggest = max(b.gpus for b in instance.topology.buildings)
        raise InputError(f"stages: no placement given and no building holds the shape's {shape.gpus:,} GPUs "
                         f"(largest: {biggest:,}); give stages and pipelines")
    v = actions.chunks
    if layers % v:
        raise InputError(f"stages: {layers} layers cannot be split into {v} chunks per rank; give stages")
    units = layers // v
    per_rank = [units // shape.pp + (1 if r < units % shape.pp else 0) for r in range(shape.pp)]
    if min(per_rank) < 1:
        raise InputError(f"shape: pp = {shape.pp} x {v} chunks exceeds the model's {layers} layers")
    notes.append(f"No placement given: all stages in building {home.name}, layers per stage "
                 f"{[u * v for u in per_rank]}.")
    cells = shape.cells_per_stage
    return [StagePlacement(stage=r, layers=u * v, cells_per_building={home.name: cells})
            for r, u in enumerate(per_rank)]


def _check_stages(instance: Instance, layout: Layout, stages: list[StagePlacement], actions: ScheduleActions
                  ) -> None:
    shape, known = layout.shape, [b.name for b in instance.topology.buildings]
    if [s.stage for s in stages] != list(range(shape.pp)):
        raise InputError(f"stages: expected stages 0..{shape.pp - 1} in order (pp = {shape.pp}), "
                         f"got {[s.stage for s in stages]}")
    layers = sum(s.layers for s in stages)
    if layers != instance.model_spec.layers:
        raise InputError(f"stages: layers add up to {layers}, the model has {instance.model_spec.layers}")
    for j, stage in enumerate(stages):
        for name in stage.cells_per_building:
            if name not in known:
                raise InputError(f"stages[{j}].cells_per_building: unknown building '{name}' (known: {known})")
        cells = sum(stage.cells_per_building.values())
        if cells != shape.cells_per_stage:
            raise InputError(f"stages[{j}]: {cells} cells ({cells * shape.cell_gpus:,} GPUs), the shape needs "
                             f"dp/ep = {shape.cells_per_stage} cells of {shape.cell_gpus} GPUs per stage")
        if stage.layers % actions.chunks:
            raise InputError(f"stages[{j}].layers: {stage.layers} layers do not split into the schedule's "
                             f"{actions.chunks} chunks per rank")


def chain(stages: list[StagePlacement], ep: int) -> list[PipelineRoute]:
    """Pipelines chained stage to stage, staying in the same building where possible."""
    routes: Counter[tuple[str, ...]] = Counter({(k,): n * ep for k, n in stages[0].cells_per_building.items()})
    for stage in stages[1:]:
        left = {k: n * ep for k, n in stage.cells_per_building.items()}
        extended: Counter[tuple[str, ...]] = Counter()
        for route, count in sorted(routes.items(), key=lambda item: item[0][-1] not in left):
            for k in [route[-1], *sorted(left)]:
                take = min(count, left.get(k, 0))
                if take:
                    extended[route + (k,)] += take
                    left[k] -= take
                    count -= take
        routes = extended
    return [PipelineRoute(buildings=list(r), pipelines=n) for r, n in sorted(routes.items())]


def _check_routes(routes: list[PipelineRoute], stages: list[StagePlacement], dp: int, ep: int) -> None:
    total = sum(r.pipelines for r in routes)
    if total != dp:
        raise InputError(f"pipelines: {total} pipelines, the shape has dp = {dp}")
    for i, route in enumerate(routes):
        if len(route.buildings) != len(stages):
            raise InputError(f"pipelines[{i}].buildings: {len(route.buildings)} buildings for {len(stages)} stages")
    for j, stage in enumerate(stages):
        held = Counter()
        for route in routes:
            held[route.buildings[j]] += route.pipelines
        want = {k: n * ep for k, n in stage.cells_per_building.items()}
        if dict(held) != want:
            raise InputError(f"pipelines: stage {j} is in {dict(sorted(held.items()))} by the routes but in "
                             f"{dict(sorted(want.items()))} (cells x ep) by stages[{j}]")


def _transports(instance: Instance, layout: Layout) -> dict[str, Transport]:
    links = {f"{link.a}-{link.b}": link for link in instance.topology.links}
    chosen = layout.link_transports()
    for key, transport in chosen.items():
        if key not in links:
            raise InputError(f"transports: unknown link '{key}' (links: {sorted(links)})")
        if transport not in links[key].transports:
            raise InputError(f"transports.{key}: '{transport.value}' is not among the link's transports "
                             f"{[t.value for t in links[key].transports]}")
    return {key: chosen.get(key, link.transports[0]) for key, link in links.items()}
