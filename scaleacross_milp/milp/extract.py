"""Read a solved shape MILP back into the plan contract, with the breakdown and a short explanation."""

from __future__ import annotations

from collections import Counter

import pyomo.environ as pyo

from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.layer_kinds import excess_s
from scaleacross_milp.milp.formulation.pipeline import bubble_s
from scaleacross_milp.spec.plan import (
    Breakdown,
    LinkUse,
    PipelineRoute,
    Plan,
    Prediction,
    SolveStats,
    StagePlacement,
)


def _val(component) -> float:
    """A solution value; every quantity read here is non-negative, so a value below zero is the solver's
    feasibility tolerance (-1e-16 on an unpolished point) and reads as 0."""
    return max(0.0, float(pyo.value(component)))


def _chosen(indexed, keys) -> int:
    return max(keys, key=lambda key: _val(indexed[key]))


def pipeline_routes(m: pyo.ConcreteModel, ctx: ShapeContext) -> list[PipelineRoute]:
    """Decompose the stage-to-stage flows into building sequences with pipeline counts."""
    paths: Counter[tuple[str, ...]] = Counter(
        {(k,): round(_val(m.x[0, k])) for k in ctx.buildings if round(_val(m.x[0, k]))}
    )
    for b in range(ctx.shape.pp - 1):
        left = {(k, k2): round(_val(m.f[b, k, k2])) for k in ctx.buildings for k2 in ctx.buildings}
        extended: Counter[tuple[str, ...]] = Counter()
        for path, count in paths.items():
            for k2 in ctx.buildings:
                take = min(count, left[path[-1], k2])
                if take:
                    extended[path + (k2,)] += take
                    left[path[-1], k2] -= take
                    count -= take
        paths = extended
    ep = ctx.shape.ep
    return [PipelineRoute(buildings=list(path), pipelines=count * ep) for path, count in sorted(paths.items())]


def link_uses(m: pyo.ConcreteModel, ctx: ShapeContext) -> list[LinkUse]:
    """Per link, its busier direction: loads (GB per iteration), the busy time the MILP priced (`busy`, polished
    to its lower bound: the price line the loads' crossing units are charged at) and the efficiency that implies,
    load / (capacity x busy) (the best case, `ShapeContext.efficiency`, on an idle link)."""
    uses = []
    for i, link in enumerate(ctx.routes.links):
        transport = _chosen(m.z, [(i, t) for t in link.transports])[1]
        busy, d = max((_val(m.busy[i, d]), d) for d in (1, -1))
        pp = _val(m.pp[i, d]) * ctx.shape.microbatches
        dp = _val(m.dp[i, d])
        priced = (pp + dp) * 1e9 / (link.capacity_byte_s * busy) if busy > 0 else ctx.efficiency[i, transport]
        uses.append(LinkUse(a=link.a, b=link.b, transport=transport, efficiency=min(1.0, priced),
                            pp_gbyte=pp, dp_gbyte=dp, busy_s=busy))
    return uses


def held(m: pyo.ConcreteModel, ctx: ShapeContext) -> list[tuple[int, str]]:
    return [(j, k) for j in range(ctx.shape.pp) for k in ctx.buildings if round(_val(m.x[j, k])) > 0]


def stage_times(m: pyo.ConcreteModel, ctx: ShapeContext, option: int) -> list[tuple[float, int, str]]:
    """(seconds per microbatch, j, k) of each stage j held in building k under `option`, as the stage_time rows
    price it: n[j] tau_k, its MoE layers beyond the average share, and its fixed work."""
    return [(round(_val(m.n[j])) * ctx.gpu(k).layer.total_s + _val(excess_s(m, j, ctx.kind_layer_s(k)))
             + ctx.stage_fixed_s(j, k, ctx.options[option]), j, k) for j, k in held(m, ctx)]


def breakdown(m: pyo.ConcreteModel, ctx: ShapeContext, option: int, links: list[LinkUse]) -> Breakdown:
    """Split the iteration time: the slowest stage's own work over m microbatches, its TP/EP share, the
    schedule's bubble, what pipeline sends and DP sync add, and the optimizer step; the parts sum to T, what T
    holds beyond them (a link-bound remainder) charged to whichever traffic dominates the busiest link."""
    opt, mb = ctx.options[option], ctx.shape.microbatches
    stage_s, _, k = max(stage_times(m, ctx, option))
    gpu = ctx.gpu(k)
    comm_share = gpu.layer_comm_s / gpu.layer.total_s
    cycle = _val(m.cycle)
    bubble = bubble_s(ctx, option, [_val(m.Cst[j]) for j in m.J], cycle)
    wrap = ctx.shape.pp - 1 if (ctx.shape.pp - 1) in m.B else None
    latency = sum(_val(m.lat[b]) * (opt.wrap_crossings if b == wrap else opt.boundary_crossings) for b in m.B)
    unpaired = _val(m.ep_unpaired) if hasattr(m, "ep_unpaired") else 0.0
    pipe = mb * cycle + bubble + 2 * latency + _val(m.fill_sends) + unpaired
    dp = max(0.0, _val(m.dp_exposed) - _val(m.lag0))  # rank 0's reduction counts from its own end
    gathers = mb * max(0.0, min(_val(m.gather), cycle) - stage_s)  # cycle time the comm stream adds
    dp += _val(m.gather0) + _val(m.fill_gathers) + gathers
    optimizer = _val(m.opt)
    exposed_pp = max(0.0, pipe - mb * stage_s - bubble - gathers - unpaired)
    remainder = max(0.0, _val(m.T) - (mb * stage_s + unpaired + bubble + exposed_pp + dp + optimizer))
    busiest = max(links, key=lambda use: use.busy_s, default=None)
    if busiest is not None and busiest.pp_gbyte >= busiest.dp_gbyte:
        exposed_pp += remainder
    else:
        dp += remainder
    return Breakdown(compute_s=mb * stage_s * (1 - comm_share), exposed_tp_ep_s=mb * stage_s * comm_share + unpaired,
                     bubble_s=bubble, exposed_pp_s=exposed_pp, exposed_dp_s=dp, optimizer_s=optimizer)


def layout_pattern(stages: list[StagePlacement], pipelines: list[PipelineRoute]) -> str:
    used = {k for stage in stages for k in stage.cells_per_building}
    if len(used) == 1:
        return "single-building"
    if all(len(set(route.buildings)) == 1 for route in pipelines):
        return "DP-out (whole pipelines per building; only DP synchronisation crosses)"
    if all(len(stage.cells_per_building) == 1 for stage in stages):
        return "PP-out (each stage in one building; only pipeline activations cross)"
    return "hybrid (pipelines and DP groups both cross buildings)"


def explain(plan_parts: dict, links: list[LinkUse], parts: Breakdown, iteration_s: float) -> list[str]:
    stages, pipelines = plan_parts["stages"], plan_parts["pipelines"]
    lines = [f"Layout: {layout_pattern(stages, pipelines)}."]
    busiest = max(links, key=lambda use: use.busy_s, default=None)
    if busiest is not None and busiest.busy_s >= 0.999 * iteration_s:
        lines.append(
            f"Bottleneck: link {busiest.a}-{busiest.b} is busy the whole iteration ({busiest.busy_s:.3f} s) carrying "
            f"{busiest.pp_gbyte:.1f} GB of pipeline and {busiest.dp_gbyte:.1f} GB of DP traffic at "
            f"{busiest.efficiency:.0%} effective capacity ({busiest.transport.value})."
        )
    else:
        parts_by_size = sorted(
            [("compute", parts.compute_s), ("TP/CP/EP communication", parts.exposed_tp_ep_s),
             ("pipeline bubble", parts.bubble_s), ("exposed pipeline sends and latency", parts.exposed_pp_s),
             ("exposed DP synchronisation", parts.exposed_dp_s), ("optimizer step", parts.optimizer_s)],
            key=lambda item: -item[1],
        )
        slow = plan_parts["slowest"]
        lines.append(
            f"Bottleneck: stage {slow[0]} in {slow[1]} ({slow[2]} layers) sets the pipeline cycle; after "
            f"{parts_by_size[0][0]} ({parts_by_size[0][1]:.3f} s) the largest cost is {parts_by_size[1][0]} "
            f"({parts_by_size[1][1]:.3f} s)."
        )
        if busiest is not None and busiest.busy_s > 0:
            lines.append(
                f"Busiest link {busiest.a}-{busiest.b}: {busiest.pp_gbyte:.1f} GB pipeline + {busiest.dp_gbyte:.1f} GB "
                f"DP per iteration, busy {busiest.busy_s / iteration_s:.0%} of the iteration."
            )
    return lines


def extract_plan(m: pyo.ConcreteModel, ctx: ShapeContext, stats: SolveStats) -> Plan:
    option = _chosen(m.u, list(m.O))
    variant = ctx.variants[_chosen(m.w, list(m.V))]
    stages = [
        StagePlacement(
            stage=j, layers=round(_val(m.n[j])),
            cells_per_building={k: round(_val(m.x[j, k])) for k in ctx.buildings if round(_val(m.x[j, k]))},
        )
        for j in range(ctx.shape.pp)
    ]
    pipelines = pipeline_routes(m, ctx)
    links = link_uses(m, ctx)
    parts = breakdown(m, ctx, option, links)
    iteration = (parts.compute_s + parts.exposed_tp_ep_s + parts.bubble_s + parts.exposed_pp_s
                 + parts.exposed_dp_s + parts.optimizer_s)
    _, *slowest = max(stage_times(m, ctx, option))
    tokens = ctx.shape.batch_sequences * ctx.instance.training.seq_len
    peak = sum(
        count * ctx.shape.cell_gpus
        * ctx.instance.gpu_type_of(k).peak_dense_tflops[ctx.instance.training.precision] * 1e12
        for stage in stages for k, count in stage.cells_per_building.items()
    )
    option_spec = ctx.options[option]
    return Plan(
        instance=ctx.instance.name,
        shape=ctx.shape,
        schedule=option_spec.schedule,
        interleave=option_spec.chunks,
        dp_mode=variant.mode,
        hsdp_replicas=variant.replicas if variant.mode.value == "hsdp" else None,
        stages=stages,
        pipelines=pipelines,
        links=links,
        prediction=Prediction(
            iteration_s=iteration, breakdown=parts, tokens_per_s=tokens / iteration,
            mfu=ctx.costs.model_flops_per_iteration / (iteration * peak),
        ),
        solve=stats,
        explanation=explain(
            {"stages": stages, "pipelines": pipelines,
             "slowest": (slowest[0], slowest[1], round(_val(m.n[slowest[0]])))},
            links, parts, iteration,
        ),
    )
