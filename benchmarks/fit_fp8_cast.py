"""Fit the one FP8 parameter, gamma = costmodel.compute.FP8_CAST_BYTES_PER_FLOP_H, on the tuned FP8 row
(fidelity.rows.TUNED_ROWS: NVIDIA DGX Cloud Llama 3.1 8B FP8 on 8 H100), every other parameter fixed.

    PYTHONPATH=. python benchmarks/fit_fp8_cast.py [--csv PATH]

The replayed step time grows with gamma, so bisection on [0, 10] to 0.001 finds where it meets the
published step; the script prints the multiple of 0.01 of least |error| and every FP8 row's error at it (all but the
tuned one held out: they are not fitted).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fidelity import PROJECT

from scaleacross_milp.costmodel import compute
from scaleacross_milp.fidelity.predict import predict
from scaleacross_milp.fidelity.rows import PublishedRow, read_rows

LOW, HIGH, GRID = 0.0, 10.0, 0.01


def error(row: PublishedRow, gamma: float) -> float:
    """The row's error with FP8_CAST_BYTES_PER_FLOP_H = gamma (the module constant set for the replay)."""
    compute.FP8_CAST_BYTES_PER_FLOP_H = gamma
    return predict(row).error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, nargs="+", default=PROJECT, help="published runs (default: %(default)s)")
    rows = [row for path in parser.parse_args().csv for row in read_rows(path) if row.precision == "fp8"]
    [tuned] = [row for row in rows if row.tuned]
    sign = -1 if tuned.metric == "iteration_time_s" else 1  # a larger gamma lengthens the step
    low, high = LOW, HIGH
    while high - low > 0.001:
        mid = (low + high) / 2
        low, high = (mid, high) if sign * error(tuned, mid) > 0 else (low, mid)
    fitted = min((GRID * round(x / GRID) for x in (low, high)), key=lambda x: abs(error(tuned, x)))
    print(f"fitted FP8_CAST_BYTES_PER_FLOP_H: {fitted:.2f} "
          f"({tuned.model}, {tuned.gpus} GPUs: {error(tuned, fitted):+.1%})")
    for row in rows:
        print(f"  {row.source:18} {row.model:15} {row.gpus:>5} GPUs: {error(row, fitted):+.1%}"
              f" ({'tuned' if row.tuned else 'held out'})")


if __name__ == "__main__":
    main()
