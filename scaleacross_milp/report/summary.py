"""Render a Plan for the terminal: shape, placement, routes, links, prediction and the solve report; and its
use of the cluster (GPUs and buildings idle with their cause, HBM per stage and building, cheapest change)."""

from __future__ import annotations

from itertools import groupby

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scaleacross_milp.spec.plan import (
    BatchUse,
    Breakdown,
    Cost,
    Plan,
    SolveStats,
    StageMemoryUse,
    Usage,
    dp_mode_label,
    schedule_label,
)
from scaleacross_milp.spec.search import Objective

BREAKDOWN_LABELS = {
    "compute_s": "compute",
    "exposed_tp_ep_s": "TP/CP/EP collectives (exposed)",
    "bubble_s": "pipeline bubble",
    "exposed_pp_s": "pipeline sends + latency (exposed)",
    "exposed_dp_s": "DP synchronisation (exposed)",
    "optimizer_s": "optimizer step",
}


def seconds(value: float | None) -> str:
    """A duration with its unit: seconds from 1 s up, milliseconds below; tiny float noise shows as 0."""
    if value is None:
        return "n/a"
    if abs(value) < 5e-7:
        return "0 ms"
    if abs(value) >= 1.0:
        return f"{value:.3f} s"
    return f"{value * 1e3:.1f} ms"


def usd(value: float | None) -> str:
    """Dollars: cents from $100 up, four significant digits below, `$0` for nothing; `n/a` for None."""
    if value is None:
        return "n/a"
    if value == 0:
        return "$0"
    return f"${value:,.2f}" if abs(value) >= 100 else f"${value:#.4g}"


def cost_line(cost: Cost, label: str) -> str:
    """`Cost (predicted): $0.2307/iteration, $0.05501/M tokens (128 GPUs held for 3.244 s: $0.2307; egress 0.0 GB:
    $0)`."""
    return (f"Cost ({label}): {usd(cost.usd_per_iteration)}/iteration, {usd(cost.usd_per_million_tokens)}/M tokens "
            f"({cost.held_gpus:,} GPUs held for {seconds(cost.iteration_s)}: {usd(cost.gpu_usd)}; egress "
            f"{cost.egress_gbyte:,.1f} GB: {usd(cost.egress_usd)})")


def percent(fraction: float | None, digits: int = 1) -> str:
    return "n/a" if fraction is None else f"{fraction * 100:.{digits}f} %"


def compress_route(buildings: list[str]) -> str:
    """'A A A B' -> 'A x3 -> B'; consecutive stages in the same building are run-length encoded."""
    parts = []
    for name, run in groupby(buildings):
        count = len(list(run))
        parts.append(name if count == 1 else f"{name} x{count}")
    return " -> ".join(parts)


def header_lines(plan: Plan) -> list[str]:
    s = plan.shape
    return [
        f"[bold]Plan for {escape(plan.instance)}[/bold]",
        f"Shape: TP {s.tp}  CP {s.cp}  EP {s.ep}  PP {s.pp}  DP {s.dp}   "
        f"micro-batch {s.micro_batch} x {s.microbatches} microbatches ({s.batch_sequences:,} sequences)   "
        f"GPUs used {s.gpus:,} "
        f"(cell = {s.cell_gpus} GPUs)",
        f"Schedule: {schedule_label(plan)}   DP mode: {dp_mode_label(plan)}",
    ]


def placement_table(plan: Plan) -> Table:
    buildings = sorted({k for stage in plan.stages for k in stage.cells_per_building})
    table = Table(title="Placement per stage (cells / GPUs)")
    table.add_column("stage", justify="right")
    table.add_column("layers", justify="right")
    for name in buildings:
        table.add_column(name, justify="right")
    table.add_column("GPUs", justify="right")
    cell = plan.shape.cell_gpus
    for stage in plan.stages:
        cells = [stage.cells_per_building.get(name, 0) for name in buildings]
        table.add_row(
            str(stage.stage), str(stage.layers),
            *(f"{c} / {c * cell:,}" if c else "-" for c in cells),
            f"{sum(cells) * cell:,}",
        )
    return table


def routes_table(plan: Plan) -> Table:
    table = Table(title="Pipeline routes")
    table.add_column("buildings (stage 0 -> last)")
    table.add_column("pipelines", justify="right")
    for route in plan.pipelines:
        table.add_row(compress_route(route.buildings), str(route.pipelines))
    return table


def links_table(plan: Plan) -> Table:
    table = Table(title="Inter-building links (per iteration, one direction)")
    for name, justify in [("link", "left"), ("transport", "left"), ("efficiency", "right"),
                          ("PP", "right"), ("DP", "right"), ("busy", "right")]:
        table.add_column(name, justify=justify)
    for use in plan.links:
        table.add_row(f"{use.a}-{use.b}", use.transport.value, percent(use.efficiency),
                      f"{use.pp_gbyte:.1f} GB", f"{use.dp_gbyte:.1f} GB", seconds(use.busy_s))
    return table


def breakdown_table(parts: Breakdown, iteration_s: float) -> Table:
    table = Table(title=f"Predicted iteration time: {seconds(iteration_s)}")
    table.add_column("part")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    for field, label in BREAKDOWN_LABELS.items():
        value = getattr(parts, field)
        share = value / iteration_s if iteration_s > 0 else None
        table.add_row(label, seconds(value), percent(share))
    return table


def prediction_lines(plan: Plan) -> list[str]:
    p = plan.prediction
    return [
        f"Iteration time: {seconds(p.iteration_s)}",
        f"Throughput: {p.tokens_per_s:,.0f} tokens/s",
        f"MFU: {percent(p.mfu)}",
    ] + ([cost_line(p.cost, "predicted")] if p.cost is not None else [])


def solve_lines(stats: SolveStats) -> list[str]:
    screened = stats.shapes_solved + stats.shapes_pruned + stats.shapes_open
    return [
        "[bold]Solve[/bold]",
        f"Objective: {stats.objective.value}",
        f"Status: {stats.status}" + (f" ({escape(stats.stopped_early)})" if stats.stopped_early else ""),
        *([f"Incumbent: {usd(stats.incumbent_usd)}/iteration ({seconds(stats.incumbent_s)})",
           f"Best bound: {usd(stats.bound_usd)}/iteration"] if stats.objective is Objective.cost else
          [f"Incumbent: {seconds(stats.incumbent_s)}", f"Best bound: {seconds(stats.bound_s)}"]),
        f"Relative gap: {percent(stats.rel_gap, 3)}",
        f"Wall time: {stats.wall_s:.2f} s; work: {stats.work_s:.2f} s of the reference machine"
        + (" (the wall clock ended the search first: on a slower or busier machine the plan may differ)"
           if stats.wall_bound else " (the same steps and plan on any load)"),
        f"Shapes: {stats.shapes_total} enumerated, {screened} passed screening, "
        f"{stats.shapes_solved} solved, {stats.shapes_pruned} pruned by bound"
        + (f", {stats.shapes_open} left open at the limit" if stats.shapes_open else ""),
        f"Model size (chosen shape): {stats.variables} variables ({stats.binaries} binary, "
        f"{stats.integers} integer), {stats.constraints} constraints",
    ]


def render_plan(plan: Plan, console: Console) -> None:
    """Print the whole plan summary to `console`."""
    for line in header_lines(plan):
        console.print(line)
    console.print(placement_table(plan))
    console.print(routes_table(plan))
    if plan.links:
        console.print(links_table(plan))
    console.print(breakdown_table(plan.prediction.breakdown, plan.prediction.iteration_s))
    for line in prediction_lines(plan) + solve_lines(plan.solve):
        console.print(line)
    if plan.explanation:
        console.print("[bold]Explanation[/bold]")
        for line in plan.explanation:
            console.print(f"- {line}", markup=False)


def usage_lines(usage: Usage) -> list[str]:
    """Infeasibility first, then GPUs used, idle GPUs with their cause and the cheapest changes."""
    lines = ["[bold]Cluster use[/bold]"]
    if usage.infeasible:
        lines.append("[bold red]INFEASIBLE[/bold red] on this hardware, priced anyway: "
                     + escape("; ".join(usage.infeasible)))
    if usage.batch is not None:
        lines.append(batch_line(usage.batch))
    share = usage.used_gpus / usage.gpus if usage.gpus else None
    lines.append(f"GPUs used: {usage.used_gpus:,} of {usage.gpus:,} ({percent(share)})")
    idle = [b.name for b in usage.buildings if b.used_gpus == 0]
    if idle:
        lines.append(f"Buildings idle: {escape(', '.join(idle))}")
    lines += [f"Idle: {item.gpus:,} GPUs in {escape(', '.join(item.buildings))} ({item.cause.value}): "
              f"{escape(item.detail)}" for item in usage.idle]
    lines += [f"Cheapest change: {escape(change)}" for change in usage.suggestions]
    return lines


def batch_line(batch: BatchUse) -> str:
    """`Batch: 512 sequences run (requested 509, +0.6 %, rounded up under batch_rounding 'nearest'), N tokens/s on
    the batch run`."""
    if batch.run_sequences == batch.requested_sequences:
        how = "as requested"
    else:
        direction = "up" if batch.run_sequences > batch.requested_sequences else "down"
        how = (f"requested {batch.requested_sequences:,}, {batch.change * 100:+.1f} %, rounded {direction} under "
               f"batch_rounding '{batch.rounding.value}'")
    line = f"Batch: {batch.run_sequences:,} sequences run ({how})"
    if batch.tokens_per_s is not None:
        line += f", {batch.tokens_per_s:,.0f} tokens/s on the batch run"
    return line


def buildings_table(usage: Usage) -> Table:
    table = Table(title="GPUs per building")
    for name, justify in [("building", "left"), ("GPU type", "left"), ("GPUs", "right"), ("used", "right"),
                          ("idle", "right")]:
        table.add_column(name, justify=justify)
    for b in usage.buildings:
        table.add_row(b.name, b.gpu_type, f"{b.gpus:,}", f"{b.used_gpus:,}", f"{b.gpus - b.used_gpus:,}")
    return table


def memory_table(rows: list[StageMemoryUse]) -> Table:
    """One row per stage and GPU type (the buildings of one type hold a stage alike)."""
    table = Table(title="HBM per GPU (activations in flight + states)")
    for name, justify in [("stage", "right"), ("buildings", "left"), ("GPU type", "left"), ("used", "right"),
                          ("usable", "right"), ("free", "right")]:
        table.add_column(name, justify=justify)
    for (stage, gpu_type), group in groupby(rows, key=lambda r: (r.stage, r.gpu_type)):
        group = list(group)
        row = group[0]
        table.add_row(str(stage), ", ".join(r.building for r in group), gpu_type, f"{row.used_gib:.1f} GiB",
                      f"{row.usable_gib:.1f} GiB", f"{row.free_gib:.1f} GiB")
    return table


def render_usage(usage: Usage, console: Console) -> None:
    """Print what the plan uses of the cluster, what it leaves idle and why, and HBM per stage."""
    for line in usage_lines(usage):
        console.print(line)
    console.print(buildings_table(usage))
    console.print(memory_table(usage.memory))
