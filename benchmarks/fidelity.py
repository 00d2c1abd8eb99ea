"""Fidelity against published training runs: every row of ../shared/data/published/training_throughput.csv is
turned into its single-building instance and fixed layout, replayed by the verifier (what `scaleacross-milp
evaluate` runs), and its iteration time converted into the published metric.

    python benchmarks/fidelity.py [--csv PATH]

Prints per row: source, model, GPUs, metric, published, predicted, error and whether the row was used to fit a
parameter (fidelity.rows.TUNED_ROWS); then mean and max absolute percentage error per source and over tuned, held-out
and all rows. Target
(issue 4): mean under 5 %, max under 10 % on held-out rows as well as tuned ones (Calculon: 3.65 % / 8.87 %).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.fidelity.predict import RowPrediction, predict
from scaleacross_milp.fidelity.rows import read_rows

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "published" / "training_throughput.csv"
"""The published runs in the shared data folder next to the repository (../shared/data from its root)."""


def summary(name: str, predictions: list[RowPrediction]) -> str:
    errors = [abs(p.error) for p in predictions]
    if not errors:
        return f"{name}: no rows"
    return (f"{name} ({len(errors)} rows): mean APE {statistics.mean(errors):.1%}, "
            f"max APE {max(errors):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=DATA, help="published runs (default: %(default)s)")
    args = parser.parse_args()

    console = Console(width=160)
    table = Table(title="scaleacross-milp: predicted vs published training runs")
    for column in ("source", "model", "GPUs", "recompute", "metric", "published", "predicted", "error", "tuned"):
        table.add_column(column, justify="right" if column in ("GPUs", "published", "predicted", "error") else "left")
    predictions = []
    for row in read_rows(args.csv):
        p = predict(row)
        predictions.append(p)
        table.add_row(row.source, row.model, f"{row.gpus:,}", row.recompute, row.metric, f"{row.value:g}",
                      f"{p.predicted:.4g}", f"{p.error:+.1%}", "yes" if row.tuned else "held out")
    console.print(table)
    sources = dict.fromkeys(p.row.source for p in predictions)
    groups = [(source, [p for p in predictions if p.row.source == source]) for source in sources] + [
        ("tuned", [p for p in predictions if p.row.tuned]),
        ("held out", [p for p in predictions if not p.row.tuned]),
        ("all", predictions),
    ]
    for name, subset in groups:
        console.print(summary(name, subset))


if __name__ == "__main__":
    main()
