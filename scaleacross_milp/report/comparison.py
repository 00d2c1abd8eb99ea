"""Render the optimiser's plan beside the baselines (`solve --compare`) and a baseline's own report lines."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scaleacross_milp.baselines import BaselineResult
from scaleacross_milp.report.summary import dp_mode_label, percent, schedule_label, seconds
from scaleacross_milp.spec.plan import BaselineComparison, Layout


def layout_label(layout: Layout) -> str:
    """Shape, schedule and DP mode on one line."""
    return f"{layout.shape.label()}, {schedule_label(layout)}, {dp_mode_label(layout)}"


def comparison_table(rows: list[BaselineComparison], plan_s: float, plan_tokens_per_s: float) -> Table:
    table = Table(title="Optimiser vs baselines (each replayed by the verifier)")
    for column in ("kind", "iteration", "tokens/s", "speedup", "layout", "note"):
        table.add_column(column, justify="right" if column in ("iteration", "tokens/s", "speedup") else "left")
    table.add_row("optimiser", seconds(plan_s), f"{plan_tokens_per_s:,.0f}", "", "this plan", "")
    for row in rows:
        table.add_row(row.kind, seconds(row.iteration_s),
                      f"{row.tokens_per_s:,.0f}" if row.tokens_per_s is not None else "-",
                      f"{'+' if row.speedup >= 0 else ''}{percent(row.speedup)}" if row.speedup is not None else "-",
                      escape(layout_label(row.layout)) if row.layout else "-", escape(row.note))
    return table


def render_comparison(rows: list[BaselineComparison], plan_s: float, plan_tokens_per_s: float,
                      console: Console) -> None:
    console.print(comparison_table(rows, plan_s, plan_tokens_per_s))
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
