"""A sweep's summary drawn: one metric against one axis, one series per value of a colour field (the DP mode, the
placement pattern, another axis), so regime changes show where the series cross or the colours switch."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, BinaryIO

COLUMN_UNITS = {"predicted_iteration_s": "s", "verified_iteration_s": "s", "best_bound_s": "s", "solve_wall_s": "s",
                "solve_work_s": "s", "wall_s": "s", "tokens_per_s": "tokens/s", "worker_rss_mib": "MiB",
                "link_distance_km": "km",
                "mfu": "fraction of peak", "rel_gap": "fraction", "predicted_usd_per_iteration": "$/iteration",
                "verified_usd_per_iteration": "$/iteration", "usd_per_m_tokens": "$/M tokens",
                "best_bound_usd": "$/iteration"}
"""Axis labels' units for the summary columns that have one (batch.summary.RESULT_COLUMNS)."""


class PlotError(ValueError):
    """A column the summary does not have, or that cannot be drawn as asked."""


def label(column: str) -> str:
    unit = COLUMN_UNITS.get(column)
    return f"{column} ({unit})" if unit else column


def numeric(rows: list[dict[str, Any]], column: str) -> None:
    """PlotError unless every present value of `column` is a number."""
    if any(not isinstance(row[column], int | float) or isinstance(row[column], bool)
           for row in rows if row[column] is not None):
        raise PlotError(f"{column}: not a numeric column (use it as --color)")


def series(rows: list[dict[str, Any]], x: str, y: str, color: str | None) -> dict[str, list[tuple[float, float]]]:
    """Colour value -> (x, y) points sorted by x, rows without a y (no plan) left out."""
    for column in (x, y, color):
        if column is not None and rows and column not in rows[0]:
            raise PlotError(f"{column}: no such column in the summary (columns: {', '.join(rows[0])})")
    numeric(rows, x)
    numeric(rows, y)
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if row[x] is not None and row[y] is not None:
            groups["all" if color is None else str(row[color])].append((row[x], row[y]))
    if not groups:
        raise PlotError(f"no scenario has both {x} and {y}")
    return {key: sorted(points) for key, points in sorted(groups.items())}


def draw_sweep(rows: list[dict[str, Any]], x: str, y: str, color: str | None, handle: BinaryIO, fmt: str,
               title: str) -> int:
    """Write the plot as `fmt` (png, svg) to an open binary file; returns the number of points drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = series(rows, x, y, color)
    fig, ax = plt.subplots(figsize=(8, 5))
    for key, points in groups.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=key)
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(y))
    ax.set_title(title)
    if color is not None:
        ax.legend(title=color, fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(handle, format=fmt, dpi=110)
    plt.close(fig)
    return sum(len(points) for points in groups.values())
