"""costmodel.network: hashed load balance, per-connection loss recovery, spraying, the MILP's price lines."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from scaleacross_milp.costmodel import network
from scaleacross_milp.spec.topology import Link, Transport

ECMP_GBN, ECMP_SR, SPRAY = Transport.ecmp_go_back_n, Transport.ecmp_selective_repeat, Transport.spray_selective_repeat
RTT = 2e-3
C = 100e9


def link(paths: int, loss: float = 0.0) -> Link:
    """800 Gb/s = 100 GB/s per direction, 1 ms one way (RTT 2 ms)."""
    return Link(a="x", b="y", capacity_gbit_s=800, latency_ms=1.0, paths=paths, loss_rate=loss,
                transports=[ECMP_GBN, ECMP_SR, SPRAY])


def brute_force_max_load(flows: int, paths: int) -> float:
    return float(np.mean([max(np.bincount(a, minlength=paths)) for a in itertools.product(range(paths), repeat=flows)]))


def test_expected_max_load_is_exact():
    assert network.expected_max_load(2, 2) == pytest.approx(1.5)  # same path with probability 1/2
    assert network.expected_max_load(3, 2) == pytest.approx(2.25)  # all three together with probability 1/4
    assert network.expected_max_load(2, 3) == pytest.approx(4 / 3)
    for flows, paths in ((5, 3), (6, 4), (8, 2), (7, 5)):
        assert network.expected_max_load(flows, paths) == pytest.approx(brute_force_max_load(flows, paths), rel=1e-9)
    # 64 on 2 paths: 32 + E|Bin(64, 1/2) - 32|
    k = np.arange(65)
    pmf = np.array([float(np.prod(np.arange(64 - i + 1, 65) / np.arange(1, i + 1))) for i in k]) / 2.0 ** 64
    assert network.expected_max_load(64, 2) == pytest.approx(32 + float(pmf @ np.abs(k - 32)), rel=1e-9)


def test_expected_max_load_of_many_subflows_is_the_poisson_limit():
    """Above EXACT_MEAN_LOAD per path: sum over k of 1 - F(k)^P with F the Poisson(N / P) law (scipy's, computed
    over every k from 0, where the module starts its sum near the mean)."""
    from scipy.stats import poisson

    for flows, paths in ((2_049, 32), (65_536, 64), (1_000_003, 32)):
        k = np.arange(0, flows // paths + 2_000)
        expected = float(np.sum(1.0 - poisson.cdf(k, flows / paths) ** paths))
        assert network.expected_max_load(flows, paths) == pytest.approx(expected, rel=1e-9)


def test_one_path_carries_everything():
    for n in (1, 7, 64):
        assert network.link_efficiency(link(1), ECMP_SR, n) == 1.0


def test_one_flow_on_p_paths_uses_one():
    assert network.link_efficiency(link(16), ECMP_SR, 1) == pytest.approx(1 / 16)


def test_many_flows_collide():
    assert network.link_efficiency(link(2), ECMP_SR, 2) == pytest.approx(2 / 3)  # (2/2) / 1.5
    assert network.link_efficiency(link(2), ECMP_SR, 3) == pytest.approx(2 / 3)  # 1.5 / 2.25
    assert network.link_efficiency(link(3), ECMP_SR, 2) == pytest.approx(1 / 2)  # (2/3) / (4/3)
    assert 0.85 < network.link_efficiency(link(16), ECMP_SR, 4096) < 0.95  # busiest path ~ 256 + 2.8 x 16


def test_go_back_n_resends_each_connections_own_window():
    # one connection alone on the path: W = 100 GB/s x 2 ms / 4 KiB = 48,828 packets
    alone = 1 / (1 + 1e-4 * C * RTT / 4096)
    assert network.link_efficiency(link(1, 1e-4), ECMP_GBN, 1) == pytest.approx(alone)
    # four on the path: each runs at 25 GB/s, a quarter of the window
    assert network.link_efficiency(link(1, 1e-4), ECMP_GBN, 4) == pytest.approx(1 / (1 + 1e-4 * C / 4 * RTT / 4096))
    # a 10 GB/s NIC share caps the window
    capped = network.link_efficiency(link(1, 1e-4), ECMP_GBN, 1, 10e9)
    assert capped == pytest.approx(1 / (1 + 1e-4 * 10e9 * RTT / 4096))
    # two on two paths: busiest path holds 1.5 on average, each at 50 / 1.5 GB/s
    gbn = network.link_efficiency(link(2, 1e-4), ECMP_GBN, 2)
    assert gbn == pytest.approx(2 / 3 / (1 + 1e-4 * C / 2 / 1.5 * RTT / 4096))
    assert network.link_efficiency(link(1, 0.01), ECMP_GBN, 1) < 0.01  # go-back-N collapses near 1 % loss


def test_selective_repeat_and_spraying():
    assert network.link_efficiency(link(1, 1e-4), ECMP_SR, 1) == pytest.approx(1 - 1e-4 - 0.01)
    assert network.link_efficiency(link(1, 1e-4), ECMP_SR, 64) == pytest.approx(1 - 1e-4 - 0.01)
    for n in (1, 8, 4096):
        assert network.link_efficiency(link(16), SPRAY, n) == pytest.approx(0.98)
        assert network.link_efficiency(link(16, 1e-4), SPRAY, n) == pytest.approx(0.98 * (1 - 1e-4 - 0.01))


def test_queue_pairs_are_more_hashed_subflows():
    one = link(16)
    assert network.link_efficiency(one, ECMP_GBN, 8 * 16) > network.link_efficiency(one, ECMP_GBN, 8)


def test_price_lines_bound_the_concave_time_from_above():
    # 2 paths, 1 subflow per unit: t(n) = n / e(n) = 2, 3, 4.5, 5.5 for n = 1..4 (E[max] = 1, 1.5, 2.25, 2.75).
    # Its concave envelope through the origin drops (2, 3): 2, 3.25, 4.5, 5.5. Line 0 is a lone unit's, 2 n; it
    # exceeds the envelope by more than 10 % from n = 2, where the tangent of slope 1.25 (intercept 0.75) prices
    # n = 2..4 within it (3.25, 4.5, 5.75 <= 1.1 x 5.5).
    lines = network.price_lines(link(2), ECMP_SR, 1, 4)
    assert [(line.slope, line.intercept) for line in lines] == [(pytest.approx(2.0), 0.0),
                                                                (pytest.approx(1.25), pytest.approx(0.75))]
    assert network.price_lines(link(1), ECMP_SR, 8, 40) == (network.PriceLine(1.0, 0.0),)  # one path: no collisions
    assert len(network.price_lines(link(16), SPRAY, 8, 40)) == 1


def test_price_lines_end_where_the_envelope_falls():
    # 3,200 Gb/s, 1,000 km, loss 1e-3, one path, go-back-N, 4 queue pairs: the time of n units falls from n = 31
    # (306.3) to n = 32 (271.7); the lines price the running maximum, so they end, and stay above every unit count.
    link = Link(a="A", b="B", capacity_gbit_s=3200, distance_km=1000, loss_rate=1e-3, paths=1,
                queue_pairs_per_connection=4, transports=["ecmp_go_back_n"])
    lines = network.price_lines(link, Transport.ecmp_go_back_n, 4, 32, 50e9 / 4)
    for n in range(1, 33):
        time_n = n / network.link_efficiency(link, Transport.ecmp_go_back_n, 4 * n, 50e9 / 4)
        assert min(line.intercept + line.slope * n for line in lines) >= time_n * (1 - 1e-9)


def test_a_unit_s_own_nics_bound_its_time_over_a_fat_link():
    # One cell of 8 GPUs, 16 queue pairs each at 25 GB/s / 16, over a lossless 12.8 Tb/s (1,600 GB/s) link: its bytes
    # take 8x their time at bare capacity; over a 400 Gb/s link the NICs are not what binds (1/4).
    fat = Link(a="x", b="y", capacity_gbit_s=12_800, distance_km=1.0, paths=1, transports=[ECMP_SR])
    thin = Link(a="x", b="y", capacity_gbit_s=400, distance_km=1.0, paths=1, transports=[ECMP_SR])
    assert network.nic_floor(fat, ECMP_SR, 8 * 16, 25e9 / 16) == pytest.approx(8.0)
    assert network.nic_floor(thin, ECMP_SR, 8 * 16, 25e9 / 16) == pytest.approx(0.25)
    # under loss, at the rate of a full queue pair, the goodput stretches it further
    lossy = Link(a="x", b="y", capacity_gbit_s=12_800, distance_km=1.0, paths=1, loss_rate=1e-3,
                 transports=[ECMP_SR])
    assert network.nic_floor(lossy, ECMP_SR, 8 * 16, 25e9 / 16) == pytest.approx(
        8.0 / network.connection_goodput(lossy, ECMP_SR, 25e9 / 16))
