"""The fluid link model: fair sharing, ECMP collisions vs spraying, NIC caps, seeded hashing that does not depend
on the order flows start, per-connection loss recovery, and agreement in expectation with
costmodel.network.link_efficiency (what the MILP prices)."""

from __future__ import annotations

import numpy as np
import pytest

from scaleacross_milp.costmodel.network import link_efficiency
from scaleacross_milp.spec.topology import Topology, Transport
from scaleacross_milp.verify.network import Fabric, FluidNetwork


def run_to_end(network: FluidNetwork) -> dict[int, float]:
    done = {}
    while network.pending:
        t = network.next_completion()
        for flow in network.advance(t):
            done[flow] = t
    return done


def test_two_flows_share_a_resource_fairly_then_the_survivor_speeds_up():
    net = FluidNetwork()
    link = net.add_resource(100.0)
    net.add_flow(1, [((link,), 1)], 100.0, cap=1e9)
    net.add_flow(2, [((link,), 1)], 300.0, cap=1e9)
    done = run_to_end(net)
    # both at 50 B/s until flow 1 ends at t = 2; flow 2 has 200 B left at 100 B/s
    assert done == {1: pytest.approx(2.0), 2: pytest.approx(4.0)}


def test_subflow_cap_limits_rate():
    net = FluidNetwork()
    link = net.add_resource(100.0)
    net.add_flow(1, [((link,), 2)], 10.0, cap=5.0)  # 2 subflows of 10 B at <= 5 B/s each
    assert run_to_end(net) == {1: pytest.approx(2.0)}


def topology(paths: int, loss: float = 0.0) -> Topology:
    return Topology(
        buildings=[{"name": "A", "gpus": 8, "gpu_type": "g"}, {"name": "B", "gpus": 8, "gpu_type": "g"}],
        links=[{"a": "A", "b": "B", "capacity_gbit_s": 800, "latency_ms": 1.0, "paths": paths, "loss_rate": loss,
                "transports": ["ecmp_go_back_n", "ecmp_selective_repeat", "spray_selective_repeat"]}],
    )


def transfer_time(transport: Transport, subflows: int, paths: int = 8, loss: float = 0.0, seed: int = 0) -> float:
    net = FluidNetwork()
    fabric = Fabric(topology(paths, loss), {"A-B": transport}, net, seed=seed)
    nbytes = 100e9
    net.add_flow(0, fabric.classes("A", "B", subflows, "x"), nbytes / subflows, cap=1e15)
    return run_to_end(net)[0]


def test_one_ecmp_flow_gets_one_path_spraying_gets_all():
    capacity = 800e9 / 8
    assert transfer_time(Transport.ecmp_selective_repeat, 1) == pytest.approx(100e9 / (capacity / 8))
    assert transfer_time(Transport.spray_selective_repeat, 1) == pytest.approx(100e9 / (capacity * 0.98))


def test_ecmp_collisions_finish_with_the_busiest_path():
    # 8 connections hashed onto 8 paths collide: the transfer lasts as long as the busiest path
    capacity = 800e9 / 8
    t = transfer_time(Transport.ecmp_selective_repeat, 8)
    ideal = 100e9 / capacity
    assert t > ideal * 1.5
    assert t == transfer_time(Transport.ecmp_selective_repeat, 8)  # seeded: reproducible
    assert any(transfer_time(Transport.ecmp_selective_repeat, 8, seed=s) != t for s in range(1, 5))


def test_loss_goodput_by_transport():
    loss = 1e-4
    gbn = transfer_time(Transport.ecmp_go_back_n, 4096, loss=loss)
    sr = transfer_time(Transport.ecmp_selective_repeat, 4096, loss=loss)
    lossless = transfer_time(Transport.ecmp_selective_repeat, 4096)
    assert sr / lossless == pytest.approx(1 / (1 - loss - 0.01), rel=1e-6)
    # 512 connections a path: windows of 12 packets, so go-back-N loses less than selective repeat's overhead;
    # one connection a path resends a 6,104-packet window per loss
    assert gbn < sr
    assert transfer_time(Transport.ecmp_go_back_n, 1, loss=loss) > 1.5 * transfer_time(
        Transport.ecmp_selective_repeat, 1, loss=loss)


def test_go_back_n_resends_each_connections_window():
    # one path of 100 GB/s, RTT 2 ms: k connections on it each run at 100/k GB/s with a window of
    # (100/k GB/s x 2 ms) / 4 KiB packets; goodput 1 / (1 + p W), so 100 GB take k-independent ... / goodput
    capacity, loss = 800e9 / 8, 1e-4
    for k in (1, 4, 32):
        window = capacity / k * 2e-3 / 4096
        expected = 100e9 / capacity * (1 + loss * window)
        assert transfer_time(Transport.ecmp_go_back_n, k, paths=1, loss=loss) == pytest.approx(expected, rel=1e-9)


def test_replay_matches_the_shared_efficiency_in_expectation():
    # Over hashings, the mean transfer time is N b / (c e(N)): exact for E[k_max] lossless, and under go-back-N
    # too, since a path with k subflows takes k b / (c/P) (1 + p W_1 / k) = (k + p W_1) b P / c, linear in k.
    topo = topology(8, 1e-4)
    capacity = 800e9 / 8
    for transport, loss in ((Transport.ecmp_selective_repeat, 0.0), (Transport.ecmp_go_back_n, 1e-4)):
        times = [transfer_time(transport, 8, loss=loss, seed=s) for s in range(600)]
        expected = 100e9 / (capacity * link_efficiency(topo.links[0].model_copy(update={"loss_rate": loss}),
                                                       transport, 8))
        # k_max of 8 on 8 paths has sd ~0.75 around 2.6: the mean of 600 is within ~1.2 % (2 sd)
        assert float(np.mean(times)) == pytest.approx(expected, rel=0.02)


def test_reported_link_rate_is_the_shared_efficiency_at_the_connections_carried():
    net = FluidNetwork()
    fabric = Fabric(topology(8), {"A-B": Transport.ecmp_selective_repeat}, net)
    fabric.classes("A", "B", 8, "x")
    fabric.classes("A", "B", 24, "y")
    model = fabric.links[0, 1]
    assert model.effective_byte_s == pytest.approx(800e9 / 8 * link_efficiency(model.link, model.transport, 16))


def test_ecmp_hashing_depends_on_the_flow_not_on_the_order_flows_start():
    def fabric() -> Fabric:
        return Fabric(topology(8), {"A-B": Transport.ecmp_selective_repeat}, FluidNetwork())

    first, second = fabric(), fabric()
    x, y = first.classes("A", "B", 16, "x"), first.classes("A", "B", 16, "y")
    assert second.classes("A", "B", 16, "y") == y and second.classes("A", "B", 16, "x") == x
    assert x != y  # two flows of 16 connections on 8 paths: same counts per path with odds ~1e-9
    # each of the 16 subflows lands on one of the 8 path resources of direction A -> B
    paths = set(first.links[0, 1].resources)
    assert sum(n for _, n in x) == 16 and all(len(res) == 1 and res[0] in paths for res, _ in x)
