"""The fluid link model: fair sharing, bottlenecks across resources, NIC caps, ECMP's expected collisions vs
spraying, per-connection loss recovery, all read from costmodel.network.link_efficiency (what the MILP prices)."""

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


def test_a_capped_flow_leaves_the_rest_to_the_other():
    net = FluidNetwork()
    link = net.add_resource(10.0)
    net.add_flow(1, [((link,), 1)], 4.0, cap=2.0)
    net.add_flow(2, [((link,), 1)], 40.0, cap=1e9)
    # 2 and 8 B/s until flow 1 ends at t = 2; flow 2 has 40 - 16 = 24 B left at 10 B/s
    assert run_to_end(net) == {1: pytest.approx(2.0), 2: pytest.approx(4.4)}


def test_a_flow_over_two_resources_is_held_by_the_tighter_and_frees_both():
    net = FluidNetwork()
    r1, r2 = net.add_resource(10.0), net.add_resource(20.0)
    net.add_flow(1, [((r1, r2), 1)], 10.0, cap=1e9)
    net.add_flow(2, [((r1,), 1)], 50.0, cap=1e9)
    net.add_flow(3, [((r2,), 1)], 100.0, cap=1e9)
    # r1 saturates first: flows 1, 2 at 5 B/s, flow 3 takes r2's other 15 B/s; flow 1 ends at t = 2,
    # then flow 2 has 40 B at 10 B/s (t = 6), flow 3 has 70 B at 20 B/s (t = 5.5)
    assert run_to_end(net) == {1: pytest.approx(2.0), 2: pytest.approx(6.0), 3: pytest.approx(5.5)}


def topology(paths: int, loss: float = 0.0) -> Topology:
    return Topology(
        buildings=[{"name": "A", "gpus": 8, "gpu_type": "g"}, {"name": "B", "gpus": 8, "gpu_type": "g"}],
        links=[{"a": "A", "b": "B", "capacity_gbit_s": 800, "latency_ms": 1.0, "paths": paths, "loss_rate": loss,
                "transports": ["ecmp_go_back_n", "ecmp_selective_repeat", "spray_selective_repeat"]}],
    )


def transfer_time(transport: Transport, subflows: int, paths: int = 8, loss: float = 0.0) -> float:
    net = FluidNetwork()
    fabric = Fabric(topology(paths, loss), {"A-B": transport}, net)
    nbytes = 100e9
    net.add_flow(0, fabric.classes("A", "B", subflows), nbytes / subflows, cap=1e15)
    return run_to_end(net)[0]


def test_one_ecmp_flow_gets_one_path_spraying_gets_all():
    capacity = 800e9 / 8
    assert transfer_time(Transport.ecmp_selective_repeat, 1) == pytest.approx(100e9 / (capacity / 8))
    assert transfer_time(Transport.spray_selective_repeat, 1) == pytest.approx(100e9 / (capacity * 0.98))


def test_ecmp_collisions_pace_the_transfer_by_the_expected_busiest_path():
    # 2 connections on 2 paths share one with probability 1/2: E[k_max] = 1.5, so the transfer takes 1.5 times
    # the ideal c / 2 per connection
    capacity = 800e9 / 8
    assert transfer_time(Transport.ecmp_selective_repeat, 2, paths=2) == pytest.approx(1.5 * 100e9 / capacity)


def test_concurrent_ecmp_flows_are_charged_the_collisions_of_all_connections_on_the_link():
    # two one-connection flows on 2 paths of 50 GB/s: 2 connections on the link, E[k_max] = 1.5, so the link
    # delivers 100 GB/s x (2 / 2) / 1.5 and each flow 33.3 GB/s; flow 1 (100 GB) ends at 3 s, then flow 2 alone
    # has one connection (50 GB/s) for its 200 GB left: 4 s more
    net = FluidNetwork()
    fabric = Fabric(topology(2), {"A-B": Transport.ecmp_selective_repeat}, net)
    net.add_flow(1, fabric.classes("A", "B", 1), 100e9, cap=1e15)
    net.add_flow(2, fabric.classes("A", "B", 1), 300e9, cap=1e15)
    assert run_to_end(net) == {1: pytest.approx(3.0), 2: pytest.approx(7.0)}


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


def test_a_lone_transfer_takes_what_the_shared_efficiency_prices():
    # N b / (c e(N)) for the MILP's link_efficiency e, with and without loss, for few and many connections
    for transport, loss in ((Transport.ecmp_selective_repeat, 0.0), (Transport.ecmp_go_back_n, 1e-4)):
        link = topology(8, loss).links[0]
        for subflows in (3, 8, 100):
            expected = 100e9 / (link.capacity_byte_s * link_efficiency(link, transport, subflows))
            assert transfer_time(transport, subflows, loss=loss) == pytest.approx(expected, rel=1e-9)


def test_a_route_over_two_links_is_one_class_on_both():
    topo = Topology(
        buildings=[{"name": n, "gpus": 8, "gpu_type": "g"} for n in "ABC"],
        links=[{"a": "A", "b": "B", "capacity_gbit_s": 800, "latency_ms": 1.0, "paths": 8},
               {"a": "B", "b": "C", "capacity_gbit_s": 400, "latency_ms": 1.0, "paths": 4}],
    )
    fabric = Fabric(topo, {}, FluidNetwork())
    route = (fabric.links[0, 1].resource, fabric.links[1, 1].resource)
    assert fabric.classes("A", "C", 12) == [(route, 12)]


def test_busy_time_is_the_time_a_resource_carries_traffic_not_its_bytes_over_a_lone_transfer_s_rate():
    # Two transfers of 100 B at once on a 100 B/s resource end together at 2 s; after 3 idle seconds a third runs
    # 1 s. The link was busy 3 s of 6, however many transfers or subflows it carried; the other resource 0 s.
    net = FluidNetwork()
    link, idle = net.add_resource(100.0), net.add_resource(100.0)
    net.add_flow(1, [((link,), 1)], 100.0, cap=1e9)
    net.add_flow(2, [((link,), 1)], 100.0, cap=1e9)
    assert run_to_end(net) == {1: pytest.approx(2.0), 2: pytest.approx(2.0)}
    net.advance(5.0)
    net.add_flow(3, [((link,), 1)], 100.0, cap=1e9)
    assert run_to_end(net) == {3: pytest.approx(6.0)}
    assert net.busy_s[link] == pytest.approx(3.0)
    assert net.busy_s[idle] == 0.0


def test_flows_started_in_either_order_finish_alike():
    def finish(order: list[int]) -> dict[int, float]:
        net = FluidNetwork()
        fabric = Fabric(topology(8), {"A-B": Transport.ecmp_go_back_n}, net)
        for flow in order:
            net.add_flow(flow, fabric.classes("A", "B", 4 * flow), 1e9 * flow, cap=5e9)
        return run_to_end(net)

    assert finish([1, 2, 3]) == finish([3, 1, 2])


def from_scratch_max_min(capacity: list[float], classes: list[tuple[tuple[int, ...], int, float]]) -> list[float]:
    """Oracle: plain progressive filling of (resources, subflows, cap) classes, recomputed from nothing."""
    rates, residual, unfrozen = [0.0] * len(classes), list(capacity), set(range(len(classes)))
    while unfrozen:
        weight = [sum(classes[i][1] for i in unfrozen if r in classes[i][0]) for r in range(len(capacity))]
        share = [residual[r] / w if w else float("inf") for r, w in enumerate(weight)]
        level = min(min(share), min(classes[i][2] for i in unfrozen))
        tight = {r for r, s in enumerate(share) if s <= level * (1 + 1e-12)}
        for i in sorted(unfrozen):
            resources, w, cap = classes[i]
            if cap <= level * (1 + 1e-12) or tight.intersection(resources):
                rates[i] = level
                unfrozen.discard(i)
                for r in resources:
                    residual[r] -= w * level
    return rates


def test_incremental_filling_matches_filling_from_scratch_at_every_event():
    # 3 resources, 30 flows over one or two of them, staggered starts, mixed caps: every finish time agrees with
    # a replay that recomputes max-min over all live flows after each start and finish
    rng = np.random.default_rng(7)
    capacity = [10.0, 6.0, 15.0]
    routes = [(0,), (1,), (2,), (0, 1), (1, 2), (0, 2)]
    flows = [(float(rng.uniform(0, 20)), routes[rng.integers(len(routes))], int(rng.integers(1, 4)),
              float(rng.uniform(5, 40)), float(rng.choice([1.0, 3.0, 1e9]))) for _ in range(30)]
    starts = sorted(range(len(flows)), key=lambda f: flows[f][0])

    net = FluidNetwork()
    for c in capacity:
        net.add_resource(c)
    done, queue = {}, list(starts)
    while queue or net.pending:
        t_start = flows[queue[0]][0] if queue else float("inf")
        t_finish = net.next_completion()
        if t_finish <= t_start:
            done.update(dict.fromkeys(net.advance(t_finish), t_finish))
        else:
            net.advance(t_start)
            f = queue.pop(0)
            net.add_flow(f, [(flows[f][1], flows[f][2])], flows[f][3], cap=flows[f][4])

    expected, left, t, queue = {}, {}, 0.0, list(starts)
    while queue or left:
        live = sorted(left)
        rates = from_scratch_max_min(capacity, [(flows[f][1], flows[f][2], flows[f][4]) for f in live])
        step = min([left[f] / rate for f, rate in zip(live, rates, strict=True)] + [float("inf")])
        t_start = flows[queue[0]][0] if queue else float("inf")
        dt = min(step, t_start - t)
        for f, rate in zip(live, rates, strict=True):
            left[f] -= rate * dt
        t += dt
        for f in live:
            if left[f] <= 1e-9:
                expected[f] = t
                del left[f]
        while queue and flows[queue[0]][0] <= t:
            f = queue.pop(0)
            left[f] = flows[f][3]
    assert done.keys() == expected.keys()
    for f in expected:
        assert done[f] == pytest.approx(expected[f], rel=1e-9)
