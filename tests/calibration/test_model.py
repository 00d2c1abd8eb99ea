"""ProfileCollectiveModel against its table and its stated scaling rules."""

from __future__ import annotations

import math

import pytest

from scaleacross_milp.calibration.defaults import load_profile
from scaleacross_milp.calibration.model import ProfileCollectiveModel
from scaleacross_milp.calibration.profile import Curve, Point, Profile
from scaleacross_milp.costmodel.comm import AlphaBetaModel
from scaleacross_milp.spec.hardware import GPUType

H100 = GPUType(peak_dense_tflops={"bf16": 989}, hbm_gib=80, hbm_tbyte_s=3.35, nvlink_gbyte_s=370)


def curve(collective="all_reduce", tier="nvlink", ranks=8, nodes=1, points=((1e6, 50e-6), (4e6, 80e-6), (16e6,
          140e-6)), alpha=40e-6, bandwidth=400e9) -> Curve:
    return Curve(collective=collective, tier=tier, ranks=ranks, nodes=nodes, alpha_s=alpha,
                 bus_bandwidth_bytes_s=bandwidth, sources=["x:1"],
                 points=[Point(bytes=int(b), time_s=t, fit_rel_error=0.0) for b, t in points])


def model(*curves: Curve, fallback=None) -> ProfileCollectiveModel:
    return ProfileCollectiveModel(Profile(name="t", gpu_model="H100", curves=list(curves)), fallback=fallback)


def test_measured_sizes_return_the_table():
    default = load_profile(None)
    m = ProfileCollectiveModel(default)
    for c in default.curves:
        for p in c.points:
            assert m.time_s(c.collective, c.tier, c.ranks, p.bytes) == pytest.approx(p.time_s, rel=1e-12)


def test_log_log_interpolation_between_sizes():
    m = model(curve())
    # halfway in log size between 1 MB (50 us) and 4 MB (80 us): geometric mean of the times
    assert m.time_s("all_reduce", "nvlink", 8, 2e6) == pytest.approx(math.sqrt(50e-6 * 80e-6))


def test_outside_the_table_the_fitted_slope_continues():
    m = model(curve())
    per_byte = 1.75 / 400e9
    assert m.time_s("all_reduce", "nvlink", 8, 20e6) == pytest.approx(140e-6 + 4e6 * per_byte)
    assert m.time_s("all_reduce", "nvlink", 8, 0.9e6) == pytest.approx(50e-6 - 0.1e6 * per_byte)
    assert m.time_s("all_reduce", "nvlink", 8, 1.0) == pytest.approx(50e-6 - (1e6 - 1) * per_byte)
    steep = model(curve(bandwidth=40e9))  # the continued line would fall below the fitted latency: floored there
    assert steep.time_s("all_reduce", "nvlink", 8, 1.0) == pytest.approx(40e-6)


def test_fewer_ranks_scale_by_the_ring_formula():
    m = model(curve())
    # 4 ranks: S' = S * (2*3/4)/(2*7/8) and the latency scales by ring steps 6/14
    s = 4e6 * (1.5 / 1.75)
    expected = math.exp(math.log(50e-6) + (math.log(80e-6) - math.log(50e-6)) * math.log(s / 1e6) / math.log(4))
    assert m.time_s("all_reduce", "nvlink", 4, 4e6) == pytest.approx(expected + 40e-6 * (6 / 14 - 1))


def test_fabric_ranks_per_node_scale_the_bandwidth():
    m = model(curve(tier="fabric", ranks=80, nodes=10))
    one_per_node = m.time_s("all_reduce", "fabric", 80, 2e6, ranks_per_node=1)
    assert one_per_node == pytest.approx(m.time_s("all_reduce", "fabric", 80, 16e6))  # 8x the bytes per NIC
    assert m.time_s("all_reduce", "fabric", 80, 2e6, ranks_per_node=8) == m.time_s("all_reduce", "fabric", 80, 2e6)


def test_cross_building_is_derived_from_the_fabric_fit():
    m = ProfileCollectiveModel(Profile(name="t", gpu_model="H100", curves=[curve(tier="fabric", ranks=16, nodes=2)]),
                               cross_building_alpha_s=1e-3)
    # 2 ranks, 1 per node: latency 40 us * 2/30 steps + 2 steps * 1 ms + factor(2)=1 * S * (8/1) / 400 GB/s
    expected = 40e-6 * 2 / 30 + 2 * 1e-3 + 1e9 * 8 / 400e9
    assert m.time_s("all_reduce", "cross_building", 2, 1e9) == pytest.approx(expected)
    assert m.measured_bytes("all_reduce", "cross_building", 2) == ()


def test_missing_collectives_use_the_fallback_and_zero_work_is_free():
    datasheet = AlphaBetaModel.from_gpu(H100)
    m = model(curve(), fallback=datasheet)
    assert m.time_s("all_gather", "nvlink", 8, 1e6) == datasheet.time_s("all_gather", "nvlink", 8, 1e6)
    assert m.time_s("all_reduce", "nvlink", 1, 1e6) == 0.0 == m.time_s("all_reduce", "nvlink", 8, 0)
    with pytest.raises(KeyError, match="no all_gather"):
        model(curve()).time_s("all_gather", "nvlink", 8, 1e6)


def test_nearest_rank_count_is_chosen():
    m = model(curve(tier="fabric", ranks=16, nodes=2), curve(tier="fabric", ranks=80, nodes=10))
    assert m.curve_for("all_reduce", "fabric", 20).ranks == 16
    assert m.curve_for("all_reduce", "fabric", 64).ranks == 80
