"""Breakpoints and convexity detection."""

from __future__ import annotations

import math

import pytest

from scaleacross_milp.calibration.defaults import load_profile
from scaleacross_milp.calibration.model import ProfileCollectiveModel
from scaleacross_milp.calibration.piecewise import breakpoints, collective_breakpoints, is_convex
from scaleacross_milp.costmodel.comm import AlphaBetaModel
from scaleacross_milp.spec.hardware import GPUType


def test_convex_curve_is_detected_and_its_epigraph_is_exact():
    f = lambda s: 20e-6 + s / 400e9 + (s / 1e9) ** 2 * 1e-3  # noqa: E731 - convex: affine plus a square
    bp = breakpoints(f, 1e6, 1e10, rel_tol=0.001)
    assert bp.convex
    for s in (3e6, 7e8, 5e9):
        epigraph = max(a + b * s for b, a in bp.segments())
        assert epigraph == pytest.approx(bp.value_at(s))  # max of segments = the interpolant
        assert abs(bp.value_at(s) - f(s)) <= 0.001 * f(s) * 1.01 or s < bp.x[1]


def test_concave_and_wiggly_curves_are_not_convex():
    assert not breakpoints(lambda s: math.sqrt(s), 1.0, 1e6).convex
    assert not is_convex([0, 1, 2, 3], [0, 2, 3, 5])  # slope 2, 1, 2
    assert is_convex([0, 1, 2, 3], [0, 1, 2, 3])  # a line is convex
    assert is_convex([0, 1, 2], [5, 5, 6])


def test_chords_within_tolerance():
    f = lambda s: 1e-5 * math.log1p(s)  # noqa: E731
    bp = breakpoints(f, 1.0, 1e9, rel_tol=0.02, max_points=200)
    for a, b, ya, yb in zip(bp.x, bp.x[1:], bp.y, bp.y[1:], strict=False):
        mid = math.sqrt(a * b)
        assert abs(ya + (yb - ya) * (mid - a) / (b - a) - f(mid)) <= 0.02 * f(mid)


def test_profile_curve_keeps_the_measured_sizes_as_breakpoints():
    m = ProfileCollectiveModel(load_profile(None))
    bp = collective_breakpoints(m, "all_reduce", "nvlink", 8, 2**25, 2**34)
    assert set(bp.x) >= {float(2**k) for k in range(25, 35)}
    assert all(y == pytest.approx(m.time_s("all_reduce", "nvlink", 8, x)) for x, y in zip(bp.x, bp.y,
                                                                                            strict=True))
    # busbw rises from 321 to 482 GB/s with size: time per byte falls, the measured curve is not convex
    assert not bp.convex


def test_alpha_beta_curve_is_one_convex_segment():
    gpu = GPUType(peak_dense_tflops={"bf16": 989}, hbm_gib=80, hbm_tbyte_s=3.35, nvlink_gbyte_s=370)
    bp = collective_breakpoints(AlphaBetaModel.from_gpu(gpu), "all_gather", "fabric", 64, 1e6, 1e9)
    assert bp.convex and len(bp.x) == 2
