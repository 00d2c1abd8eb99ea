"""Latency-bandwidth fit of one measured table.

Model: t(S) = alpha + x / B with x = factor(collective, n) * S (the bytes each rank moves: 2(n-1)/n * S
all-reduce, (n-1)/n * S all-gather / reduce-scatter / all-to-all, S point-to-point), so B is nccl-tests'
bus bandwidth. Fitted by least squares on the *relative* residual, minimising sum_i ((alpha + x_i/B - t_i)/t_i)^2,
so 8 B and 16 GiB rows weigh alike; with alpha >= 0 and B > 0 (if the free fit gives alpha < 0, alpha = 0 and
1/B = sum(x_i/t_i) / sum(x_i^2/t_i^2)). Fit quality: the relative error (model - measured)/measured per size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scaleacross_milp.calibration.collective import Collective, bandwidth_factor

SIGNIFICANT_DIGITS = 6
"""Fitted values are rounded to 6 significant digits, so a rebuilt profile is byte-identical across platforms
(the last bits of a least-squares solve are not)."""


@dataclass(frozen=True)
class AlphaBetaFit:
    alpha_s: float
    bus_bandwidth_bytes_s: float
    rel_errors: tuple[float, ...]

    @property
    def max_abs_rel_error(self) -> float:
        return max(abs(e) for e in self.rel_errors)


def fit_alpha_beta(collective: Collective, ranks: int, sizes_bytes: Sequence[float],
                   times_s: Sequence[float]) -> AlphaBetaFit:
    """Fit t = alpha + factor(collective, ranks) * S / B to measured (S, t) pairs (at least one)."""
    x = bandwidth_factor(collective, ranks) * np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if x.size == 0 or np.any(x <= 0) or np.any(t <= 0):
        raise ValueError("need at least one (size > 0, time > 0) point")
    design = np.column_stack([1 / t, x / t])
    (alpha, inv_b), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if x.size < 2 or alpha < 0 or inv_b <= 0:
        alpha, inv_b = 0.0, float(np.sum(x / t) / np.sum((x / t) ** 2))
    alpha, bandwidth = significant(alpha), significant(1 / inv_b)
    predicted = alpha + x / bandwidth
    return AlphaBetaFit(alpha, bandwidth, tuple(significant(e) for e in (predicted - t) / t))


def significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """`value` rounded to `digits` significant digits."""
    return float(f"{value:.{digits}g}")
