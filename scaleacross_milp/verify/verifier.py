"""Verify a layout: replay it, decompose the time, and set it beside the optimiser's prediction.

Breakdown by successive replays (each adds one group of effects, so the parts add up to the total):
  A compute only        compute + TP/CP + EP = busiest rank's work; bubble = makespan(A) - that
  B + pipeline sends    exposed PP = makespan(B) - makespan(A)
  D + DP sync, optimizer, FSDP/HSDP all-gathers = the iteration time
  optimizer = the last rank's step (capped by D - B); exposed DP = D - B - optimizer.
Effects the MILP does not linearise, each measured by a replay without it:
  schedule bubble     bubble(A) - beta (sum_j C_j - max_j C_j), beta = costmodel.schedule's coefficient,
                      C_j rank j's work per microbatch (the MILP's fill/drain formula, exact only in steady
                      state, e.g. ZB-V needs m >= 2p - 1)
and a full replay without one more:
  steady sends        D - D2, D2 = D with cross-building sends moving bytes only in fill and drain: neighbours
                      across a boundary wait on each other's sends every microbatch; the MILP prices this for GPipe,
                      1F1B, ZB-H1 and ZB-V (STEADY_PRICED; their warm-up and cool-down waits, a few transfers, fall
                      in the residual), so it is measured for interleaved and custom orders
residual = (verifier - prediction) - effects: what both model and must agree within TOLERANCE. (Dense and MoE
layers were an effect, D with every layer at the average one, until the MILP priced each stage's MoE layers,
`milp.formulation.layer_kinds`.)
"""

from __future__ import annotations

import time
from pathlib import Path

from scaleacross_milp.costmodel.price import iteration_cost, priced
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Effect, Layout, LinkLoad, Plan, Verification, VerifiedBreakdown
from scaleacross_milp.spec.search import Schedule
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.replay import FULL, Level, ReplayResult, replay
from scaleacross_milp.verify.workload import Workload, build_workload

TOLERANCE = 0.10
"""|residual| <= 10 % of the prediction. What both sides model alike still differs by: the cross-building DP
phase of a chunk starts in the replay only once every layer of that chunk is reduced in every building (the MILP
overlaps it with the last backward: up to +8 % on a one-stage job split over two buildings); the MILP's ring of 2
latency steps vs 2(B-1) in the replay; ECMP's expected maximum load at the connections a link carries at each
moment vs at the MILP's priced connection count;
fair sharing of a link by concurrent flows vs its average load; per-chunk sends (v per microbatch) vs the MILP's
two; max over ranks of (sync + optimizer) vs the MILP's sum of maxima. Measured residuals on the bundled and
generated instances: -5.1 % .. +8.5 % (benchmarks/verify_instances.py)."""

COMPUTE = Level(sends=False, dp_sync=False, all_gathers=False, optimizer=False)
SENDS = Level(dp_sync=False, all_gathers=False, optimizer=False)
STEADY_OFF = Level(steady_transfers=False)
"""D2's level: the full replay without the steady-state cross-building sends."""
STEADY_PRICED = (Schedule.gpipe, Schedule.one_f_one_b, Schedule.zb_h1, Schedule.zb_v)
"""Schedules whose steady-state cross-building sends the MILP prices (its two-rank chains across a boundary)."""


def verify(instance: Instance, layout: Layout, base_dir: Path = Path(),
           predicted_s: float | None = None) -> tuple[Verification, ReplayResult]:
    """Replay `layout` on `instance`; compare with the plan's prediction when it is a Plan, else with `predicted_s`
    (the optimiser's price of the layout, `milp.price`) when given. When the instance gives prices, the verification
    carries the iteration's cost (costmodel.price.iteration_cost) at the replayed time, holding the buildings of the
    resolved stages and paying egress on the GB the replay sent over each link and direction."""
    started = time.perf_counter()
    resolved = resolve(instance, layout, base_dir)
    workload = build_workload(instance, resolved)
    predicted = layout.prediction.iteration_s if isinstance(layout, Plan) else predicted_s
    runs = {name: replay(workload, instance.topology, level) for name, level in
            (("A", COMPUTE), ("B", SENDS), ("D", FULL))}
    a, b, d = runs["A"], runs["B"], runs["D"]
    total = d.makespan_s
    busy = a.busiest_compute_s + a.busiest_tp_cp_s + a.busiest_ep_s
    optimizer = min(d.last_optimizer_s, max(0.0, total - b.makespan_s))
    parts = VerifiedBreakdown(
        compute_s=a.busiest_compute_s, exposed_tp_cp_s=a.busiest_tp_cp_s, exposed_ep_s=a.busiest_ep_s,
        bubble_s=max(0.0, a.makespan_s - busy), exposed_pp_s=max(0.0, b.makespan_s - a.makespan_s),
        exposed_dp_s=max(0.0, total - b.makespan_s - optimizer), optimizer_s=optimizer,
    )
    if predicted is not None:
        runs.update(_effect_runs(instance, workload))
    effects = _effects(workload, runs) if predicted is not None else []
    difference = total - predicted if predicted is not None else None
    tokens = layout.shape.batch_sequences * instance.training.seq_len
    links = _link_loads(d, total)
    cost = iteration_cost(instance, {k for stage in resolved.stages for k in stage.cells_per_building}, total,
                          [(load.a, load.b, load.pp_gbyte + load.dp_gbyte) for load in links], tokens) if priced(
        instance) else None
    notes = list(resolved.notes) + [
        f"{len(resolved.patterns)} distinct pipeline pattern(s) replayed for {layout.shape.dp:,} pipelines; "
        f"schedule {resolved.actions.name}, {resolved.actions.stages} virtual stages; DP {resolved.variant.label()}."
    ]
    verification = Verification(
        iteration_s=total, breakdown=parts, predicted_s=predicted, difference_s=difference,
        relative_difference=difference / predicted if predicted else None,
        tokens_per_s=tokens / total if total > 0 else 0.0, patterns=len(resolved.patterns),
        pipelines=layout.shape.dp, links=links, effects=effects, cost=cost,
        residual_s=difference - sum(e.seconds for e in effects) if difference is not None else None,
        tolerance=TOLERANCE if predicted is not None else None, notes=notes,
        replay_wall_s=time.perf_counter() - started,
    )
    return verification, d


def _effect_runs(instance: Instance, workload: Workload) -> dict[str, ReplayResult]:
    """The replay the steady-sends effect needs (D2), when it can differ from D: some pattern changes building (a
    send crosses one) and the MILP does not price the schedule's steady sends (STEADY_PRICED)."""
    resolved = workload.resolved
    crosses = any(len(set(pattern.buildings)) > 1 for pattern in resolved.patterns) and (
        resolved.schedule not in STEADY_PRICED)
    return {"D2": replay(workload, instance.topology, STEADY_OFF)} if crosses else {}


def _formula_bubble(workload: Workload) -> float:
    """beta (sum_j C_j - max_j C_j) over the first pattern's ranks, C_j = rank j's work per microbatch."""
    resolved = workload.resolved
    if resolved.schedule is None:
        return 0.0
    pattern = resolved.patterns[0]
    per_rank = []
    for rank, building in enumerate(pattern.buildings):
        work = workload.rank(building, rank)
        per_rank.append(sum(stage.ops.total_s for stage in work.stages.values()) + 2 * work.send_s)
    chunks = resolved.actions.chunks
    option = ScheduleOption(resolved.schedule, chunks, resolved.actions.merged)
    layer = next(iter(workload.costs.per_class.values())).layer
    return option.bubble_coefficient(layer) * (sum(per_rank) - max(per_rank))


def _effects(workload: Workload, runs: dict[str, ReplayResult]) -> list[Effect]:
    a = runs["A"]
    bubble = max(0.0, a.makespan_s - a.busiest_compute_s - a.busiest_tp_cp_s - a.busiest_ep_s)
    formula = _formula_bubble(workload)
    resolved = workload.resolved
    effects = []
    if bubble - formula > 0:
        effects.append(Effect(
            name="schedule bubble", seconds=bubble - formula,
            detail=f"the replayed {resolved.actions.name} order (p={resolved.actions.ranks}, "
                   f"m={resolved.actions.microbatches}) idles {bubble:.4f} s; the steady-state bubble formula "
                   f"gives {formula:.4f} s",
        ))
    seconds = runs["D"].makespan_s - runs["D2"].makespan_s if "D2" in runs else 0.0
    if seconds > 0:
        effects.append(Effect(
            name="steady sends", seconds=seconds,
            detail="neighbours across a building boundary wait on each other's sends every microbatch, so one "
                   "microbatch's cross-building transfer time adds to the cycle there; the MILP prices it in fill "
                   "and drain only"))
    return effects


def _link_loads(run: ReplayResult, iteration_s: float) -> list[LinkLoad]:
    loads = []
    for (_, direction), model in sorted(run.fabric.links.items()):
        total = model.pp_bytes + model.dp_bytes
        if total <= 0:
            continue
        link = model.link
        a, b = (link.a, link.b) if direction == 1 else (link.b, link.a)
        busy = run.fabric.network.busy_s[model.resource]
        loads.append(LinkLoad(a=a, b=b, transport=model.transport, pp_gbyte=model.pp_bytes / 1e9,
                              dp_gbyte=model.dp_bytes / 1e9, busy_s=busy,
                              utilisation=busy / iteration_s if iteration_s > 0 else 0.0))
    return loads
