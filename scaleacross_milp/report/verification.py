"""Render a Verification for the terminal: prediction vs replay, the replay's breakdown, measured effects,
per-link load and notes."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from scaleacross_milp.report.summary import cost_line, percent, seconds
from scaleacross_milp.spec.plan import Verification

VERIFIED_LABELS = {
    "compute_s": "compute",
    "exposed_tp_cp_s": "TP/CP collectives (exposed)",
    "exposed_ep_s": "EP all-to-all (exposed)",
    "bubble_s": "pipeline bubble",
    "exposed_pp_s": "pipeline sends (exposed)",
    "exposed_dp_s": "DP synchronisation (exposed)",
    "optimizer_s": "optimizer step",
}


def signed(value: float) -> str:
    return ("+" if value >= 0 else "-") + seconds(abs(value))


def comparison_lines(v: Verification) -> list[str]:
    lines = ["[bold]Verification[/bold] (event replay of one iteration)"]
    if v.predicted_s is not None and v.difference_s is not None:
        lines += [
            f"MILP predicted: {seconds(v.predicted_s)}",
            f"Verifier: {seconds(v.iteration_s)}",
            f"Difference: {signed(v.difference_s)} ({v.relative_difference * 100:+.1f} %)",
        ]
    else:
        lines.append(f"Verifier: {seconds(v.iteration_s)}")
    lines.append(f"Verifier throughput: {v.tokens_per_s:,.0f} tokens/s")
    if v.cost is not None:
        lines.append(cost_line(v.cost, "verified"))
    return lines


def verified_breakdown_table(v: Verification) -> Table:
    table = Table(title=f"Verifier breakdown: {seconds(v.iteration_s)}")
    table.add_column("part")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    for field, label in VERIFIED_LABELS.items():
        value = getattr(v.breakdown, field)
        table.add_row(label, seconds(value), percent(value / v.iteration_s if v.iteration_s > 0 else None))
    return table


def effects_table(v: Verification) -> Table:
    table = Table(title="Difference explained (replays without each effect)")
    table.add_column("effect")
    table.add_column("time", justify="right")
    table.add_column("why")
    for effect in v.effects:
        table.add_row(effect.name, signed(effect.seconds), effect.detail)
    return table


def residual_line(v: Verification) -> str:
    share = v.residual_s / v.predicted_s
    verdict = "within" if abs(share) <= v.tolerance else "OUTSIDE"
    return (f"Residual (modelled alike by both): {signed(v.residual_s)} ({share * 100:+.1f} %), {verdict} the "
            f"±{v.tolerance * 100:.0f} % tolerance")


def link_load_table(v: Verification) -> Table:
    table = Table(title="Links as replayed (per iteration, per direction)")
    for name in ("link", "transport", "PP", "DP", "busy", "utilisation"):
        table.add_column(name, justify="left" if name in ("link", "transport") else "right")
    for load in v.links:
        table.add_row(f"{load.a}->{load.b}", load.transport.value, f"{load.pp_gbyte:.1f} GB",
                      f"{load.dp_gbyte:.1f} GB", seconds(load.busy_s), percent(load.utilisation))
    return table


def render_verification(v: Verification, console: Console) -> None:
    for line in comparison_lines(v):
        console.print(line)
    console.print(verified_breakdown_table(v))
    if v.effects:
        console.print(effects_table(v))
    if v.residual_s is not None and v.predicted_s:
        console.print(residual_line(v))
    if v.links:
        console.print(link_load_table(v))
    for note in v.notes:
        console.print(f"- {note}", markup=False)
    console.print(f"Replay wall time: {v.replay_wall_s:.2f} s")
