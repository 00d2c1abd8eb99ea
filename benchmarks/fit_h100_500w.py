"""Refit the one torchtitan parameter: the effective dense BF16 peak of the 500 W H100 (fidelity/hardware.py,
H100_500W_PEAK) on the tuned torchtitan row (fidelity/rows.py, TUNED_ROWS: 8 GPUs, eager).

    python benchmarks/fit_h100_500w.py [--csv PATH]

The predicted tokens/s grow with the peak, so bisection on [500, 989] TFLOP/s to 1 TFLOP/s finds where the
replayed row meets the published value; the script prints the grid point (multiple of 5) of least |error| and the
error of every torchtitan row at it (the two 128-GPU rows are held out: they are not fitted).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fidelity import DATA

from scaleacross_milp.fidelity.hardware import GPU_TYPES
from scaleacross_milp.fidelity.predict import predict
from scaleacross_milp.fidelity.rows import PublishedRow, read_rows
from scaleacross_milp.spec.hardware import GPUType

GPU = "h100-96gb-500w"
LOW, HIGH, GRID = 500.0, 989.0, 5


def at_peak(tflops: float) -> GPUType:
    return GPU_TYPES[GPU].model_copy(update={"peak_dense_tflops": {"bf16": tflops, "fp16": tflops}})


def error(row: PublishedRow, tflops: float) -> float:
    return predict(row, at_peak(tflops)).error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=DATA, help="published runs (default: %(default)s)")
    rows = [row for row in read_rows(parser.parse_args().csv) if row.gpu == GPU]
    [tuned] = [row for row in rows if row.tuned]
    low, high = LOW, HIGH
    while high - low > 1.0:
        mid = (low + high) / 2
        low, high = (mid, high) if error(tuned, mid) < 0 else (low, mid)
    fitted = min((GRID * round(x / GRID) for x in (low, high)), key=lambda x: abs(error(tuned, x)))
    print(f"fitted effective peak of {GPU}: {fitted:g} TFLOP/s (published bracket 835-989 at boost clock)")
    for row in rows:
        kind = "tuned" if row.tuned else "held out"
        print(f"  {row.gpus:>4} GPUs, {row.notes}: {error(row, fitted):+.1%} ({kind})")


if __name__ == "__main__":
    main()
