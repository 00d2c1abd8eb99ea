"""Fidelity against published training runs: every row of ../shared/data/published/training_throughput.csv
(Megatron-LM 2021 / 2022 on A100, Llama 3, torchtitan) and of benchmarks/published/*.csv (NVIDIA's H100 runs:
DGX Cloud benchmarking, NeMo, Megatron-Bridge) is turned into its single-building instance and fixed layout,
replayed by the verifier (what `scaleacross-milp evaluate` runs), and its iteration time converted into the
published metric.

    PYTHONPATH=. python benchmarks/fidelity.py [--csv PATH ...]

Prints per row: source, model, GPUs, precision, metric, published, predicted, error, the shares of the replayed
iteration spent in exposed TP + CP collectives, exposed DP synchronisation and pipeline bubble, and whether the row
was used to fit a parameter (fidelity.rows.TUNED_ROWS); then mean and max absolute percentage error per family
(fidelity.rows.FAMILIES) over tuned and held-out rows, and over all tuned, held-out and all rows. Target (issue 16):
per family held-out mean <= 5 %, max <= 10 %, and no family's held-out mean more than 2 points above the tuned
rows'.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.fidelity.predict import RowPrediction, predict
from scaleacross_milp.fidelity.rows import FAMILIES, read_rows

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "published" / "training_throughput.csv"
"""The published runs in the shared data folder next to the repository (../shared/data from its root)."""
PROJECT = sorted((ROOT / "benchmarks" / "published").glob("*.csv"))
"""The published runs converted into the project (each row with its reference)."""


def summary(name: str, predictions: list[RowPrediction]) -> str:
    errors = [abs(p.error) for p in predictions]
    if not errors:
        return f"{name}: no rows"
    return (f"{name} ({len(errors)} rows): mean APE {statistics.mean(errors):.1%}, "
            f"max APE {max(errors):.1%}")


def exposed_shares(prediction: RowPrediction) -> tuple[str, str, str]:
    """The replayed iteration's exposed TP + CP collectives, exposed DP synchronisation and pipeline bubble, as
    shares of it: what a framework's communication overlap could hide, and the schedule's idle time."""
    v = prediction.verification
    parts = (v.breakdown.exposed_tp_cp_s, v.breakdown.exposed_dp_s, v.breakdown.bubble_s)
    return tuple(f"{part / v.iteration_s:.0%}" for part in parts)


def groups(predictions: list[RowPrediction]) -> list[tuple[str, list[RowPrediction]]]:
    """Per family its tuned and its held-out rows, then all tuned, all held-out and all rows."""
    out = []
    for family in FAMILIES:
        rows = [p for p in predictions if p.row.family == family]
        out += [(f"{family}, tuned", [p for p in rows if p.row.tuned]),
                (f"{family}, held out", [p for p in rows if not p.row.tuned])]
    return out + [("tuned", [p for p in predictions if p.row.tuned]),
                  ("held out", [p for p in predictions if not p.row.tuned]), ("all", predictions)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, nargs="+", default=[p for p in (DATA, *PROJECT) if p.exists()],
                        help="published runs (default: %(default)s)")
    args = parser.parse_args()

    console = Console(width=170)
    table = Table(title="scaleacross-milp: predicted vs published training runs")
    numbers = ("GPUs", "published", "predicted", "error", "TP+CP", "DP", "bubble")
    for column in ("source", "model", "GPUs", "precision", "recompute", "metric", "published", "predicted", "error",
                   "TP+CP", "DP", "bubble", "tuned"):
        table.add_column(column, justify="right" if column in numbers else "left")
    predictions = []
    for row in (row for path in args.csv for row in read_rows(path)):
        p = predict(row)
        predictions.append(p)
        table.add_row(row.source, row.model, f"{row.gpus:,}", row.precision, row.recompute, row.metric,
                      f"{row.value:g}", f"{p.predicted:.4g}", f"{p.error:+.1%}", *exposed_shares(p),
                      "yes" if row.tuned else "held out")
    console.print(table)
    for name, subset in groups(predictions):
        console.print(summary(name, subset))


if __name__ == "__main__":
    main()
