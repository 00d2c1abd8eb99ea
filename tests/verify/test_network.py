"""The fluid link model: fair sharing, ECMP collisions vs spraying, NIC caps, seeded hashing, loss goodput."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.network import go_back_n_goodput
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
    net.add_flow(0, fabric.classes("A", "B", subflows), nbytes / subflows, cap=1e15)
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
    window_goodput = go_back_n_goodput(loss, 1e-3, 800e9 / 8)
    assert gbn / lossless == pytest.approx(1 / window_goodput, rel=1e-6)
    assert sr / lossless == pytest.approx(1 / (1 - loss - 0.01), rel=1e-6)
    assert gbn > 5 * sr
