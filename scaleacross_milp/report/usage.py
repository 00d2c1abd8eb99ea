"""What a plan uses of the cluster, what it leaves idle and why, and the cheapest change that would use it.

With u = tp cp pp GPUs per DP replica, c = tp cp ep GPUs per stage cell, B the global batch and b the micro-batch,
a DP degree d' is possible when ep | d', training.batch_rounding gives d' b a microbatch count m(d' b)
(`Training.rounded_microbatches`; under `exact`, d' b | B) and the cluster holds its cells:
pp d'/ep <= sum_k floor(G_k/c). The plan runs B_run = d b m sequences (`BatchUse`: against B, with tokens/s on
B_run). GPUs are idle
  batch   when no possible d' exceeds the plan's d: the batch does not divide or round (the cheapest changes: the
          batch B' nearest to B that d_max b divides, d_max the largest d' the cells allow, or rounding `nearest`
          with batch_tolerance >= |B' - B| / B);
  cell    when the free GPUs hold no further replica (d_max = d), or in a building whose free GPUs hold less than
          one stage cell;
  memory  in an unused building whose GPU type cannot hold any of the plan's stages;
  price   in an unused building the search left out at its price (a solved plan of a priced instance): it minimised
          cost, or holding the building, G_k p_k / 3600 x the iteration time, with the used ones breaks the budget;
  compute in an unused building when the replicas the next possible d' adds (m' = m(d' b) microbatches per
          pipeline, every replica runs the same) would compute no faster than the plan's pipelines:
          m' t_pace >= m max_used t, t a GPU type's time per layer and microbatch, pace the slowest building
          the added cells need when filled fastest type first;
  link    in an unused building otherwise: replicas there would all-reduce every stage's gradient S_j across the
          bottleneck link of the lowest-latency path to a used building, sum_j S_j / (capacity x efficiency);
  slower  in a used building otherwise: the next possible d' fits but the optimiser did not find it faster.
"""

from __future__ import annotations

import math

import networkx as nx

from scaleacross_milp.costmodel.build import build_shape_costs
from scaleacross_milp.costmodel.costs import DPVariant, ShapeCosts
from scaleacross_milp.costmodel.layer_kinds import stage_bytes_held
from scaleacross_milp.costmodel.network import link_efficiency
from scaleacross_milp.costmodel.price import gpu_hour_usd, held_usd_per_s, priced
from scaleacross_milp.report.summary import usd
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import BatchUse, BuildingUse, IdleCause, IdleGPUs, Shape, SolveStats, Usage
from scaleacross_milp.spec.search import DPMode, Objective
from scaleacross_milp.spec.topology import Link
from scaleacross_milp.spec.training import BatchRounding
from scaleacross_milp.verify.layout import GIB, ResolvedLayout, inflight_microbatches

GB = 1e9


def plan_usage(instance: Instance, resolved: ResolvedLayout, iteration_s: float | None = None,
               solve: SolveStats | None = None) -> Usage:
    """Usage of `resolved` on `instance`; `iteration_s` (predicted or replayed) and `solve` (the search's bound
    and gap) put the link figures in context."""
    shape = resolved.layout.shape
    used = {b.name: 0 for b in instance.topology.buildings}
    for stage in resolved.stages:
        for name, cells in stage.cells_per_building.items():
            used[name] += cells * shape.cell_gpus
    buildings = [BuildingUse(name=b.name, gpu_type=b.gpu_type, gpus=b.gpus, used_gpus=used[b.name])
                 for b in instance.topology.buildings]
    idle, suggestions = _idle(instance, resolved, buildings, iteration_s, solve)
    return Usage(gpus=sum(b.gpus for b in buildings), used_gpus=sum(used.values()),
                 batch=batch_use(instance, shape, iteration_s), buildings=buildings, memory=list(resolved.memory),
                 idle=idle, suggestions=suggestions, infeasible=list(resolved.infeasible))


def batch_use(instance: Instance, shape: Shape, iteration_s: float | None) -> BatchUse:
    """B_run = dp b m against the requested B, change B_run / B - 1, tokens/s = B_run seq_len / iteration_s."""
    training, run = instance.training, shape.batch_sequences
    tokens = run * training.seq_len / iteration_s if iteration_s else None
    return BatchUse(requested_sequences=training.batch_sequences, run_sequences=run,
                    rounding=training.batch_rounding, change=run / training.batch_sequences - 1, tokens_per_s=tokens)


def largest_dp(instance: Instance, shape: Shape) -> int:
    """d_max = ep floor(sum_k floor(G_k / c) / pp): the largest DP degree whose stage cells the buildings hold."""
    cells = sum(b.gpus // shape.cell_gpus for b in instance.topology.buildings)
    return shape.ep * (cells // shape.pp)


def possible_dp(instance: Instance, shape: Shape) -> list[int]:
    """DP degrees d' <= d_max with ep | d' to which the rounding rule gives a microbatch count m(d' b)."""
    training = instance.training
    return [d for d in range(shape.ep, largest_dp(instance, shape) + 1, shape.ep)
            if training.rounded_microbatches(d * shape.micro_batch) is not None]


def dividing_batch(instance: Instance, shape: Shape) -> tuple[int, int]:
    """(d_max, B'): B' the batch nearest to B (ties upward) that d_max b divides, at least one microbatch."""
    d_max = largest_dp(instance, shape)
    step = d_max * shape.micro_batch
    sequences = instance.training.batch_sequences
    below, above = max(step, sequences // step * step), -(-sequences // step) * step
    return d_max, below if sequences - below < above - sequences else above


def _idle(instance: Instance, resolved: ResolvedLayout, buildings: list[BuildingUse], iteration_s: float | None,
          solve: SolveStats | None) -> tuple[list[IdleGPUs], list[str]]:
    """Idle GPUs by cause (module docstring) and the cheapest changes that would use them."""
    shape = resolved.layout.shape
    free = {b.name: b.gpus - b.used_gpus for b in buildings if b.gpus > b.used_gpus}
    if not free:
        return [], []
    if largest_dp(instance, shape) <= shape.dp:
        cells = sum(b.gpus // shape.cell_gpus for b in instance.topology.buildings)
        return [IdleGPUs(cause=IdleCause.cell, buildings=sorted(free), gpus=sum(free.values()), detail=(
            f"the free GPUs hold no further DP replica: {shape.ep} more need PP {shape.pp} stage cells of "
            f"{shape.cell_gpus} GPUs; the buildings hold {cells:,} whole cells, "
            f"{shape.pp * shape.cells_per_stage:,} in use"))], []
    larger = [d for d in possible_dp(instance, shape) if d > shape.dp]
    if not larger:
        return _batch_idle(instance, shape, free)
    costs = build_shape_costs(instance, shape, [resolved.variant])
    fill = _fill(instance, shape, free, larger[0], costs)
    limiting = next(b for b in buildings if b.name == fill[-1])
    idle, suggestions, priced = [], [], []
    for b in buildings:
        if b.name in free:
            pace = limiting if b.name in fill else b
            item, changes = _building_idle(instance, resolved, costs, b, pace, larger[0], iteration_s, solve)
            idle.append(item)
            suggestions += changes
            priced += [b.name] if item.cause in (IdleCause.compute, IdleCause.link) else []
    if priced:
        d = larger[0]
        suggestions.append(
            f"to price using {', '.join(priced)}: evaluate a layout with DP {d} (same TP / CP / EP / PP, micro-batch "
            f"{shape.micro_batch} x {instance.training.rounded_microbatches(d * shape.micro_batch)} microbatches, "
            f"{d * shape.gpus // shape.dp:,} GPUs) whose extra replicas sit there")
    return _merged(idle), suggestions


def _fill(instance: Instance, shape: Shape, free: dict[str, int], dp: int, costs: ShapeCosts) -> list[str]:
    """Buildings the (dp - d) / ep x pp more stage cells of DP `dp` take, fastest GPU type first (then most free
    GPUs): the last one sets the pace of the added replicas."""
    def pace(name: str) -> tuple[float, int]:
        return costs.building(name).layer.total_s, -free[name]

    need, taken = (dp - shape.dp) // shape.ep * shape.pp, []
    for name in sorted(free, key=pace):
        if need <= 0:
            break
        if cells := free[name] // shape.cell_gpus:
            taken.append(name)
            need -= cells
    return taken


def _building_idle(instance: Instance, resolved: ResolvedLayout, costs: ShapeCosts, b: BuildingUse,
                   pace: BuildingUse, dp: int, iteration_s: float | None, solve: SolveStats | None
                   ) -> tuple[IdleGPUs, list[str]]:
    """Why `b`'s free GPUs are idle when the batch allows DP `dp` > the plan's: cell, memory, price, compute (at
    the speed of `pace`, the slowest building DP `dp` needs with `b`), link or slower, the first that holds."""
    shape, gpus = resolved.layout.shape, b.gpus - b.used_gpus
    if gpus < shape.cell_gpus:
        return IdleGPUs(cause=IdleCause.cell, buildings=[b.name], gpus=gpus, detail=(
            f"{gpus:,} GPUs free in {b.name}, fewer than one stage cell (TP x CP x EP = {shape.cell_gpus})")), []
    if b.used_gpus == 0:
        if (fits := _memory_idle(instance, resolved, costs, b)) is not None:
            return fits
        if (dear := _price_idle(instance, resolved, b, iteration_s, solve)) is not None:
            return dear, []
        if (slow := _compute_idle(instance, resolved, costs, b, pace, dp, solve)) is not None:
            return slow, []
        return _link_idle(instance, resolved, costs, b, iteration_s, solve), []
    return IdleGPUs(cause=IdleCause.slower, buildings=[b.name], gpus=gpus, detail=(
        f"DP {dp} ({dp * shape.gpus // shape.dp:,} GPUs) fits the cluster but the optimiser did not find it "
        f"faster{_bound_note(solve)}")), []


def _merged(idle: list[IdleGPUs]) -> list[IdleGPUs]:
    """Buildings idle for the same cause and detail as one entry."""
    merged: dict[tuple[IdleCause, str], IdleGPUs] = {}
    for item in idle:
        key = (item.cause, item.detail)
        if key in merged:
            first = merged[key]
            item = first.model_copy(update={"buildings": first.buildings + item.buildings,
                                            "gpus": first.gpus + item.gpus})
        merged[key] = item
    return list(merged.values())


def _batch_idle(instance: Instance, shape: Shape, free: dict[str, int]) -> tuple[list[IdleGPUs], list[str]]:
    training, b = instance.training, shape.micro_batch
    sequences = training.batch_sequences
    d_max, batch = dividing_batch(instance, shape)
    larger = (f"with micro-batch {b} no DP degree above {shape.dp} (up to the {d_max:,} the cluster holds at "
              f"{shape.gpus // shape.dp:,} GPUs per replica)")
    if training.batch_rounding is BatchRounding.exact:
        detail = (f"the batch does not divide: DP x micro-batch must divide the global batch of {sequences:,} "
                  f"sequences (training.batch_rounding 'exact'); {larger} divides it")
    else:
        detail = (f"the batch does not round: {larger} runs a batch within training.batch_tolerance "
                  f"{training.batch_tolerance * 100:.1f} % of {sequences:,} sequences under batch_rounding "
                  f"'{training.batch_rounding.value}'")
    idle = [IdleGPUs(cause=IdleCause.batch, buildings=sorted(free), gpus=sum(free.values()), detail=detail)]
    if d_max <= shape.dp:
        return idle, []
    uses = d_max * shape.gpus // shape.dp
    suggestions = [f"global batch {batch:,} sequences (DP {d_max:,} x micro-batch {b} x {batch // (d_max * b):,} "
                   f"microbatches) lets this shape use {uses:,} GPUs instead of {shape.gpus:,}"]
    tolerance = math.ceil(abs(batch - sequences) / sequences * 1000) / 1000
    if tolerance < 1:
        suggestions.append(f"training.batch_rounding 'nearest' with batch_tolerance >= {tolerance * 100:.1f} % lets "
                           f"DP {d_max:,} run {batch:,} sequences for the requested {sequences:,} "
                           f"({(batch / sequences - 1) * 100:+.1f} %), using {uses:,} GPUs")
    return idle, suggestions


def _memory_idle(instance: Instance, resolved: ResolvedLayout, costs: ShapeCosts, building: BuildingUse
                 ) -> tuple[IdleGPUs, list[str]] | None:
    """The memory cause when no stage of the plan fits `building`'s GPU type, with the first of zero1 (optimizer
    states sharded, the plan's DP traffic) and FSDP (everything sharded) that fits as the what-if."""
    shape, variant = resolved.layout.shape, resolved.variant
    usable = costs.building(building.name).hbm_usable_bytes
    least = min(_stage_needs(instance, costs, resolved, variant))
    if least <= usable:
        return None
    idle = IdleGPUs(cause=IdleCause.memory, buildings=[building.name], gpus=building.gpus, detail=(
        f"the plan's stages need {least / GIB:.1f} GiB per GPU at least, {building.gpu_type} offers "
        f"{usable / GIB:.1f} GiB usable"))
    for sharded in (DPVariant(DPMode.zero1), DPVariant(DPMode.fsdp)):
        if sharded == variant:
            continue
        needs = min(_stage_needs(instance, build_shape_costs(instance, shape, [sharded]), resolved, sharded))
        if needs <= usable:
            return idle, [f"dp_mode {sharded.mode.value} would bring the least stage to {needs / GIB:.1f} GiB per GPU, "
                          f"within {building.name}'s {usable / GIB:.1f} GiB"]
    return idle, []


def _price_idle(instance: Instance, resolved: ResolvedLayout, building: BuildingUse, iteration_s: float | None,
                solve: SolveStats | None) -> IdleGPUs | None:
    """`price` (module docstring) for an unused building, or None: the search minimised cost, or holding it with the
    used buildings at this iteration time alone costs more than search.max_cost_per_iteration (egress only adds)."""
    search = instance.search
    if solve is None or iteration_s is None or not priced(instance):
        return None
    extra = held_usd_per_s(instance, building.name) * iteration_s
    rate = f"{building.gpus:,} GPUs at ${gpu_hour_usd(instance, building.name):g}/GPU-hour"
    if solve.objective is Objective.cost:
        why = f"the search minimised cost (search.objective 'cost'): holding its {rate} adds {usd(extra)}"
    elif search.max_cost_per_iteration is not None:
        held = {k for stage in resolved.stages for k in stage.cells_per_building}
        used = sum(held_usd_per_s(instance, k) for k in held) * iteration_s
        if used + extra <= search.max_cost_per_iteration:
            return None
        why = (f"holding its {rate} with the buildings in use would cost {usd(used + extra)} before egress, over "
               f"search.max_cost_per_iteration ({usd(search.max_cost_per_iteration)})")
    else:
        return None
    return IdleGPUs(cause=IdleCause.price, buildings=[building.name], gpus=building.gpus,
                    detail=f"{why} per iteration at this plan's {iteration_s:.3f} s")


def _compute_idle(instance: Instance, resolved: ResolvedLayout, costs: ShapeCosts, building: BuildingUse,
                  pace: BuildingUse, dp: int, solve: SolveStats | None) -> IdleGPUs | None:
    """The compute cause when m' t_pace >= m t_used (module docstring), else None."""
    shape = resolved.layout.shape
    used = {instance.topology.building(name).gpu_type: name for s in resolved.stages for name in s.cells_per_building}
    slowest = max(used, key=lambda t: costs.building(used[t]).layer.total_s)
    t_used, t_k = costs.building(used[slowest]).layer.total_s, costs.building(pace.name).layer.total_s
    m, m_next = shape.microbatches, instance.training.rounded_microbatches(dp * shape.micro_batch)
    if m_next * t_k < m * t_used:
        return None
    extra = (dp - shape.dp) * (shape.gpus // shape.dp)
    also = "" if pace.name == building.name else f" ({extra:,} more GPUs for this shape, {pace.name}'s too)"
    detail = (f"DP {dp}{also} leaves every pipeline {m_next} microbatches; a layer takes {t_k * 1e3:.2f} ms per "
              f"microbatch on {pace.gpu_type}, {t_used * 1e3:.2f} ms on {slowest}: {m_next} x {t_k * 1e3:.2f} >= "
              f"{m} x {t_used * 1e3:.2f} ms, so the added replicas would be slower than the plan's before any link "
              f"time{_bound_note(solve)}")
    return IdleGPUs(cause=IdleCause.compute, buildings=[building.name], gpus=building.gpus, detail=detail)


def _stage_needs(instance: Instance, costs: ShapeCosts, resolved: ResolvedLayout, variant: DPVariant) -> list[float]:
    inflight = inflight_microbatches(resolved.schedule, resolved.actions)
    return stage_bytes_held(instance, costs, variant, [s.layers for s in resolved.stages],
                            resolved.actions.rank_of, inflight)


def _link_idle(instance: Instance, resolved: ResolvedLayout, costs: ShapeCosts, building: BuildingUse,
               iteration_s: float | None, solve: SolveStats | None) -> IdleGPUs:
    """The link cause: S = sum_j S_j (layers_j x gradient bytes per layer per cell + embedding / head) crosses the
    bottleneck of the lowest-latency path from a used building once each way, at capacity x best efficiency."""
    shape, graph = resolved.layout.shape, instance.topology.graph()
    sources = {name for stage in resolved.stages for name in stage.cells_per_building}
    lengths, paths = nx.multi_source_dijkstra(graph, sources, target=building.name, weight="latency_s")
    hops = [graph.edges[a, b]["link"] for a, b in zip(paths, paths[1:], strict=False)]
    bottleneck = min(hops, key=lambda link: _rate(link, shape))
    gradient = sum(s.layers for s in resolved.stages) * costs.grad_bytes_per_layer_per_cell
    gradient += costs.grad_bytes_fixed_first + costs.grad_bytes_fixed_last
    seconds = gradient / _rate(bottleneck, shape)
    against = f" against a {iteration_s:.3f} s iteration" if iteration_s else ""
    detail = (f"{' -> '.join(paths)} ({lengths * 1e3:.3g} ms one way), bottleneck {bottleneck.a}-"
              f"{bottleneck.b} {bottleneck.capacity_gbit_s:,g} Gbit/s; DP replicas there would move "
              f"{gradient / GB:,.1f} GB of gradients each way per iteration, {seconds:.3f} s at best{against}"
              f"{_bound_note(solve)}")
    return IdleGPUs(cause=IdleCause.link, buildings=[building.name], gpus=building.gpus, detail=detail)


def _rate(link: Link, shape: Shape) -> float:
    """Bytes/s the link carries at its best transport with the cell's tp cp ep connections."""
    return link.capacity_byte_s * max(link_efficiency(link, t, shape.cell_gpus) for t in link.transports)


def _bound_note(solve: SolveStats | None) -> str:
    if solve is None or solve.bound_s is None or solve.rel_gap is None:
        return ""
    return (f" (the search's bound {solve.bound_s:.3f} s covers layouts using them; this plan is within "
            f"{solve.rel_gap:.2%} of it)")
