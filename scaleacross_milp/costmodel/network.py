"""Inter-building link behaviour: load balance over parallel paths and goodput under loss.

link efficiency = load-balance efficiency x loss goodput (both in (0, 1]).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from scaleacross_milp.spec.topology import Link, Transport

PACKET_BYTES = 4096
"""RoCE MTU-sized packets (4 KiB) for window sizes in packets."""
SPRAY_REORDER_OVERHEAD = 0.02
"""Assumed throughput lost to reordering handling when packets are sprayed over paths (receiver tolerates
out-of-order delivery; a few % for extra completions / reorder buffers). An assumption, not a measurement."""
SELECTIVE_REPEAT_OVERHEAD = 0.01
"""Assumed extra loss-recovery overhead (NACKs, timers) of selective repeat when loss is non-zero."""
MC_TRIALS = 4096
MC_SEED = 0


@lru_cache(maxsize=4096)
def expected_max_load(flows: int, paths: int) -> float:
    """E[max over paths of flows hashed to it] for `flows` uniform independent hashes onto `paths` paths.
    Exact for paths == 1 (flows) and flows == 1 (1); otherwise a fixed-seed Monte Carlo (deterministic)."""
    if paths == 1:
        return float(flows)
    if flows <= 1:
        return float(flows)
    rng = np.random.default_rng(MC_SEED)
    trials = max(64, min(MC_TRIALS, 20_000_000 // flows))
    hashes = rng.integers(0, paths, size=(trials, flows))
    offsets = (np.arange(trials) * paths)[:, None]
    counts = np.bincount((hashes + offsets).ravel(), minlength=trials * paths).reshape(trials, paths)
    return float(counts.max(axis=1).mean())


def ecmp_efficiency(flows: int, paths: int) -> float:
    """Ideal-over-actual throughput of ECMP: (flows/paths) / E[max path load]. A path carries its flows at
    full rate only if the busiest path finishes with the rest, so the transfer takes E[max load] path-times
    instead of flows/paths. 1.0 when paths == 1; 1/paths for a single flow."""
    if flows < 1:
        raise ValueError("flows must be >= 1")
    if paths == 1:
        return 1.0
    return (flows / paths) / expected_max_load(flows, paths)


def spray_efficiency(paths: int) -> float:
    """Packet spraying balances perfectly, minus SPRAY_REORDER_OVERHEAD when there is more than one path."""
    return 1.0 if paths == 1 else 1.0 - SPRAY_REORDER_OVERHEAD


def go_back_n_goodput(loss_rate: float, one_way_latency_s: float, capacity_byte_s: float) -> float:
    """1 / (1 + p * W): every loss resends the window in flight, W = capacity * RTT / 4 KiB packets (>= 1)."""
    window = max(1.0, capacity_byte_s * 2 * one_way_latency_s / PACKET_BYTES)
    return 1.0 / (1.0 + loss_rate * window)


def selective_repeat_goodput(loss_rate: float) -> float:
    """(1 - p) - SELECTIVE_REPEAT_OVERHEAD when p > 0: only lost packets are resent."""
    return 1.0 if loss_rate == 0 else max(0.0, (1.0 - loss_rate) - SELECTIVE_REPEAT_OVERHEAD)


def loss_goodput(
    transport: Transport, loss_rate: float, one_way_latency_s: float, capacity_byte_s: float
) -> float:
    """Fraction of capacity delivering new data under random loss `loss_rate`; 1.0 without loss."""
    if loss_rate == 0:
        return 1.0
    if transport is Transport.ecmp_go_back_n:
        return go_back_n_goodput(loss_rate, one_way_latency_s, capacity_byte_s)
    return selective_repeat_goodput(loss_rate)


def load_balance_efficiency(link: Link, transport: Transport, flows: int) -> float:
    """Spraying: spray_efficiency; ECMP: ecmp_efficiency(flows * queue_pairs_per_connection, paths)."""
    if transport is Transport.spray_selective_repeat:
        return spray_efficiency(link.paths)
    return ecmp_efficiency(max(1, flows) * link.queue_pairs_per_connection, link.paths)


def link_efficiency(link: Link, transport: Transport, flows: int) -> float:
    """Load-balance efficiency x loss goodput of `flows` concurrent connections on `link` over `transport`."""
    goodput = loss_goodput(transport, link.loss_rate, link.one_way_latency_s, link.capacity_byte_s)
    return load_balance_efficiency(link, transport, flows) * goodput
