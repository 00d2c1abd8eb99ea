"""Render the optimiser's plan beside the baselines (`solve --compare`) and a baseline's own report lines."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scaleacross_milp.baselines import BaselineResult
from scaleacross_milp.report.summary import dp_mode_label, percent, schedule_label, seconds, usd
from scaleacross_milp.spec.plan import BaselineComparison, Cost, Layout, Verification


def layout_label(layout: Layout) -> str:
    """Shape, schedule and DP mode on one line."""
    return f"{layout.shape.label()}, {schedule_label(layout)}, {dp_mode_label(layout)}"


def comparison_table(rows: list[BaselineComparison], plan: Verification) -> Table:
    """The plan's replay and each baseline's: iteration, tokens/s, speedup and, when the instance gives prices,
    $ per iteration and per million tokens."""
    table = Table(title="Optimiser vs baselines (each replayed by the verifier)")
    costed = plan.cost is not None
    money = ("$/iteration", "$/M tokens") if costed else ()
    numbers = ("iteration", "tokens/s", "speedup", *money)
    for column in ("kind", *numbers, "layout", "note"):
        table.add_column(column, justify="right" if column in numbers else "left")

    def dollars(cost: Cost | None) -> tuple[str, ...]:
        if not costed:
            return ()
        return ("-", "-") if cost is None else (usd(cost.usd_per_iteration), usd(cost.usd_per_million_tokens))

    table.add_row("optimiser", seconds(plan.iteration_s), f"{plan.tokens_per_s:,.0f}", "", *dollars(plan.cost),
                  "this plan", "")
    for row in rows:
        table.add_row(row.kind, seconds(row.iteration_s),
                      f"{row.tokens_per_s:,.0f}" if row.tokens_per_s is not None else "-",
                      f"{'+' if row.speedup >= 0 else ''}{percent(row.speedup)}" if row.speedup is not None else "-",
                      *dollars(row.cost), escape(layout_label(row.layout)) if row.layout else "-", escape(row.note))
    return table


def render_comparison(rows: list[BaselineComparison], plan: Verification, console: Console) -> None:
    console.print(comparison_table(rows, plan))
    console.print("speedup = optimiser tokens/s / baseline tokens/s - 1 (baseline time / optimiser time - 1 at the "
                  "same batch)")


def baseline_lines(result: BaselineResult) -> list[str]:
    """The baseline's layout, its notes and (single-dimension) each step of its descent."""
    lines = [f"[bold]Baseline[/bold] {result.kind.value}: {escape(layout_label(result.layout))}"]
    lines += [f"- {escape(note)}" for note in result.notes]
    if result.evaluated is not None:
        lines.append(f"Layouts replayed: {result.evaluated:,}")
    lines += [f"Step {i}: {step.dimension}: {escape(step.change)} -> {seconds(step.iteration_s)}"
              for i, step in enumerate(result.steps)]
    return lines
