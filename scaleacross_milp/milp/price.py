"""The MILP's own price of a fixed layout: its shape's model with every decision the layout makes held fixed.

Fixed from the layout (`formulation.build.LAYOUT_DECISIONS`): the schedule option and DP variant (the only choices
the model is built with), layers n[j] (and each stage's MoE layers at the layout's own count), stage cells x[j,k]
and holders y[j,k], pipeline flows f[b,k,k'] (each route's pipelines / EP, boundary by boundary, and from its last
building back to its first for interleaving's wrap) with their crossings h, and each link's transport z. What is
left free is what the model derives (times, loads, the price line each load is charged at), so the minimum T is the
iteration time the optimiser would have predicted had it chosen this layout: set beside the replay, it shows whether
the optimiser ranks the layout as the verifier does.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pyomo.environ as pyo

from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.layer_kinds import moe_layers_per_rank
from scaleacross_milp.costmodel.schedule import ScheduleOption, overlaps_ep
from scaleacross_milp.milp.context import ShapeContext, shape_context
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import HighsModel, MILPStatus
from scaleacross_milp.milp.path_cuts import solve_with_cuts
from scaleacross_milp.milp.routes import RouteTable, route_table
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import Schedule

PRICE_LIMIT_S = 60.0
"""Wall-clock ceiling of one pricing solve; with every placement decision fixed it takes well under a second."""


def layout_option(instance: Instance, layout: Layout) -> ScheduleOption:
    """The layout's schedule as the MILP's option (chunks: the interleave factor, 2 for ZB-V, else 1; merged as
    `costmodel.schedule.overlaps_ep` says)."""
    chunks = layout.interleave if layout.schedule is Schedule.interleaved else 2 if layout.schedule is Schedule.zb_v \
        else 1
    return ScheduleOption(layout.schedule, chunks, overlaps_ep(instance.training, layout.shape))


def layout_flows(layout: Layout, wraps: bool) -> Counter[tuple[int, str, str]]:
    """f[b,k,k'] of the layout's pipeline routes, in stage cells (a route's pipelines / EP)."""
    flows: Counter[tuple[int, str, str]] = Counter()
    for route in layout.pipelines:
        cells = route.pipelines // layout.shape.ep
        hops = list(itertools.pairwise(route.buildings))
        if wraps:
            hops.append((route.buildings[-1], route.buildings[0]))
        for b, (k, k2) in enumerate(hops):
            flows[b, k, k2] += cells
    return flows


def fixed_layout_model(instance: Instance, layout: Layout,
                       routes: RouteTable) -> tuple[ShapeContext, pyo.ConcreteModel]:
    """The layout's shape model (built with only its schedule option and DP variant) with every decision it makes
    fixed (module docstring)."""
    if layout.schedule is None or layout.stages is None or layout.pipelines is None:
        raise ValueError("price_layout needs a named schedule, stages and pipelines (a resolved layout)")
    variant = DPVariant(layout.dp_mode, layout.hsdp_replicas or 1)
    ctx = shape_context(instance, layout.shape, routes, choices=([layout_option(instance, layout)], [variant]))
    m = build_model(ctx)
    m.u[0].fix(1)
    m.w[0].fix(1)
    for stage in layout.stages:
        m.n[stage.stage].fix(stage.layers)
        for k in ctx.buildings:
            cells = stage.cells_per_building.get(k, 0)
            m.x[stage.stage, k].fix(cells)
            m.y[stage.stage, k].fix(1 if cells else 0)
    if hasattr(m, "moe_layers"):  # the layout's own MoE layers in place of the most (and fewest) a stage may hold
        m.moe_layers_rows.deactivate()
        m.moe_fewest_rows.deactivate()
        layers = [stage.layers for stage in sorted(layout.stages, key=lambda stage: stage.stage)]
        counts = moe_layers_per_rank(instance.model_spec, layers, ctx.options[0].stage_map(layout.shape.pp))
        for j, count in enumerate(counts):
            m.moe_layers[j].fix(count)
            m.moe_fewest[j].fix(count)
    flows = layout_flows(layout, wraps=(layout.shape.pp - 1) in m.B)
    for b, k, k2 in m.f:
        m.f[b, k, k2].fix(flows.get((b, k, k2), 0))
        if k != k2:
            m.h[b, k, k2].fix(1 if flows.get((b, k, k2), 0) else 0)
    chosen = layout.link_transports()
    for i, link in enumerate(routes.links):
        transport = chosen.get(f"{link.a}-{link.b}", link.transports[0])
        for t in link.transports:
            m.z[i, t].fix(1 if t == transport else 0)
    return ctx, m


def price_layout(instance: Instance, layout: Layout, routes: RouteTable | None = None) -> float | None:
    """The MILP's iteration time for `layout` (stages and pipelines given, a named schedule), or None when the
    model cannot hold it (it fails the memory rows or a building's capacity)."""
    ctx, m = fixed_layout_model(instance, layout, routes or route_table(instance.topology))
    outcome = solve_with_cuts(HighsModel(m), ctx, time_limit_s=PRICE_LIMIT_S, rel_gap=0.0, threads=1)
    return None if outcome.status is MILPStatus.infeasible else outcome.incumbent
