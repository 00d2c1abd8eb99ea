"""The latency-bandwidth fit: exact on synthetic alpha-beta data, and its quality on the real logs."""

from __future__ import annotations

import pytest

from scaleacross_milp.calibration.assemble import Given, profile_from_logs
from scaleacross_milp.calibration.fit import fit_alpha_beta


def test_recovers_alpha_and_bus_bandwidth():
    sizes = [2**k for k in range(3, 34, 2)]
    # all-reduce on 8 ranks: t = 20 us + 2*7/8 * S / 400 GB/s
    times = [20e-6 + 1.75 * s / 400e9 for s in sizes]
    fit = fit_alpha_beta("all_reduce", 8, sizes, times)
    assert fit.alpha_s == pytest.approx(20e-6, rel=1e-5)
    assert fit.bus_bandwidth_bytes_s == pytest.approx(400e9, rel=1e-5)
    assert fit.max_abs_rel_error < 1e-5


def test_negative_intercept_is_clamped_to_zero_latency():
    sizes = [1e6, 2e6, 4e6]
    times = [s / 50e9 - 1e-6 for s in sizes]  # a free fit would want alpha < 0
    fit = fit_alpha_beta("p2p", 2, sizes, times)
    assert fit.alpha_s == 0.0
    inv_b = sum(s / t for s, t in zip(sizes, times, strict=True)) / sum(
        (s / t) ** 2 for s, t in zip(sizes, times, strict=True))  # least squares on the relative residual
    assert fit.bus_bandwidth_bytes_s == pytest.approx(1 / inv_b, rel=1e-5)
    assert len(fit.rel_errors) == 3


# (file, collective on that tier, largest |relative error| bound) -- the figures the README quotes
QUALITY = [
    ("nccl_h100-sxm-cluster01-1node_all_reduce_8gpus.txt", 0.04),  # 32 MiB-16 GiB: alpha-beta fits within 3.5 %
    ("nccl_h100-sxm-cluster00-2nodes_sendrecv_16gpus.txt", 0.005),  # bandwidth-bound: 0.1 %
    ("nccl_h100-sxm-cluster01-10nodes_all_gather_80gpus.txt", 0.25),
    ("nccl_dgx-h100_all_reduce_8gpus.txt", 0.45),  # 8 B-16 GiB: one line cannot follow NCCL's protocol switches
]


@pytest.mark.parametrize(("name", "bound"), QUALITY)
def test_fit_quality_on_real_logs(logs, name, bound):
    (curve,) = profile_from_logs([logs / name], "x")[0].curves
    assert curve.max_abs_fit_rel_error < bound
    for point in curve.points:  # the stored error is (fit - measured) / measured at that size
        factor = {"all_reduce": 1.75 if curve.ranks == 8 else 2 * 79 / 80, "all_gather": 79 / 80, "p2p": 1.0}
        fitted = curve.alpha_s + factor[curve.collective] * point.bytes / curve.bus_bandwidth_bytes_s
        assert point.fit_rel_error == pytest.approx((fitted - point.time_s) / point.time_s, abs=2e-6)


def test_fitted_bandwidths_are_physical(logs):
    nvlink = profile_from_logs([logs / "nccl_h100-sxm-cluster01-1node_all_reduce_8gpus.txt"], "x")[0].curves[0]
    pair = profile_from_logs([logs / "nccl_h100-sxm-cluster01-2nodes_sendrecv_16gpus.txt"], "x")[0].curves[0]
    assert 440e9 < nvlink.bus_bandwidth_bytes_s < 490e9  # busbw column reaches 482 GB/s
    assert 45e9 < pair.bus_bandwidth_bytes_s < 47e9  # 45.87 GB/s per GPU pair over the NIC
    with pytest.raises(ValueError):
        profile_from_logs([logs / "nccl_a100-8gpu-nvlink_sendrecv_8gpus.txt"], "x", Given(ranks=8))
