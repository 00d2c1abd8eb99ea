"""Inter-building link behaviour: how concurrent connections share a link's parallel paths and what loss costs
each of them. The one definition the MILP (`milp.context.ShapeContext.efficiency`) and the verifier
(`verify.network.Fabric`) both read.

A link direction of capacity c has P equal-cost paths; N subflows (GPU-to-GPU connections x queue pairs, each
one ECMP hash key) cross it at once, each moving the same bytes b:
  ECMP      every subflow is hashed to one path; the k subflows of a path share c / P, so the transfer ends
            with the busiest path, after k_max b P / c instead of N b / c: load-balance efficiency
            (N / P) / E[k_max] (`ecmp_efficiency`).
  spraying  every packet goes to any path: all paths pooled, minus a reordering overhead (`spray_efficiency`).
Loss (probability p per packet) is recovered per connection (`connection_goodput`):
  go-back-N         a loss resends the window the connection has in flight, W = r RTT / 4 KiB packets at the
                    connection's own rate r (its share of its path, capped by its NIC), not the link's:
                    goodput 1 / (1 + p W). More connections on a path mean smaller windows.
  selective repeat  only the lost packet is resent: (1 - p) - SELECTIVE_REPEAT_OVERHEAD.
A resource (an ECMP path, or the sprayed pool) of raw capacity C carrying k subflows delivers
C x goodput(min(C / k, cap)) (`resource_goodput`); the link's efficiency is load balance x the goodput of the
busiest path (`link_efficiency`).
n crossing units (g subflows and at most u seconds of bytes at bare capacity each) take t(n) = n u / e(n g),
concave in n: the MILP prices a link by the least of a few lines a_k u + b_k n u, each above t at every n
(`price_lines`; `milp.formulation.traffic.line_rows` picks one per arc), the replay at the subflows it carries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from scaleacross_milp.costmodel.comm import AlphaBetaModel
from scaleacross_milp.spec.hardware import GPUType
from scaleacross_milp.spec.topology import Link, Transport

PACKET_BYTES = 4096
"""RoCE MTU-sized packets (4 KiB) for window sizes in packets."""
SPRAY_REORDER_OVERHEAD = 0.02
"""Assumed throughput lost to reordering handling when packets are sprayed over paths (receiver tolerates
out-of-order delivery; a few % for extra completions / reorder buffers). An assumption, not a measurement."""
SELECTIVE_REPEAT_OVERHEAD = 0.01
"""Assumed extra loss-recovery overhead (NACKs, timers) of selective repeat when loss is non-zero."""
EXACT_MEAN_LOAD = 32.0
"""Above this many subflows per path E[max load] takes the unconditioned Poisson limit F(k)^P (within 0.2 % of
the exact value there, and far cheaper)."""
TAIL = 1e-13
GRID_STEP = 1.125
"""Ratio between the unit counts `price_lines` evaluates above 16."""
LINE_TOLERANCE = 0.1
"""Largest share by which the least of `price_lines` may exceed the time of the units it prices."""


def _poisson(lam: float, low: int, top: int) -> tuple[np.ndarray, np.ndarray]:
    """(pmf, survival P(X > k)) of Poisson(lam) at k = low..top, the mass above `top` taken as nil: the log-pmf at
    `low` from lgamma, the rest by the ratio pmf(k) / pmf(k - 1) = lam / k (vectorised; no scipy at start-up)."""
    ratios = np.log(lam / np.arange(low + 1, top + 1))
    start = low * math.log(lam) - lam - math.lgamma(low + 1)
    pmf = np.exp(start + np.concatenate(([0.0], np.cumsum(ratios))))
    survival = np.append(np.cumsum(pmf[::-1])[::-1][1:], 0.0)
    return pmf, survival


def _conditioned_max_cdf(flows: int, paths: int, ks: np.ndarray, pmf: np.ndarray, cdf: np.ndarray) -> np.ndarray:
    """P(max load <= k) for each k in ks, exact: the loads of `flows` hashes onto `paths` paths are `paths` iid
    Poisson(flows/paths) (law `pmf`, `cdf`) conditioned on summing to `flows`, so
        P(max <= k) = F(k)^P * P(sum of P Poisson truncated to 0..k = N) / P(Poisson(N) = N),
    the truncated P-fold sum's law by FFT (length > P k: no wrap-around)."""
    size = 1 << (paths * int(ks[-1])).bit_length()
    f = cdf[ks]
    truncated = np.where(np.arange(int(ks[-1]) + 1)[None, :] <= ks[:, None], pmf[None, : ks[-1] + 1], 0.0) / f[:, None]
    total = np.fft.irfft(np.fft.rfft(truncated, size, axis=1) ** paths, size, axis=1)[:, flows]
    at_mean = math.exp(flows * math.log(flows) - flows - math.lgamma(flows + 1))
    return np.clip(f ** paths * total / at_mean, 0.0, 1.0)


@lru_cache(maxsize=65536)
def expected_max_load(flows: int, paths: int) -> float:
    """E[max over paths of the subflows hashed to it] for `flows` uniform independent hashes onto `paths` paths:
    the sum over k >= 0 of P(max > k), up to the first k with paths x P(Poisson(flows/paths) > k) < 1e-13 (a
    bound on the binomial tail beyond). Exact (`_conditioned_max_cdf`; P(max <= k) = 0 below ceil(flows / paths))
    up to EXACT_MEAN_LOAD subflows per path; above it the Poisson limit P(max <= k) = F(k)^P."""
    if paths == 1 or flows <= 1:
        return float(flows)
    lam = flows / paths
    spread = 20 * math.sqrt(lam) + 40
    if lam > EXACT_MEAN_LOAD:  # P(max <= k) = F(k)^P is nil below `low` (F(low) < 1e-80): each k there adds 1
        low = max(0, int(lam - spread))
        survival = _poisson(lam, low, int(lam + spread))[1]
        high = min(flows, low + int(np.argmax(paths * survival < TAIL)))
        return float(low + np.sum(1.0 - (1.0 - survival[: high - low + 1]) ** paths))
    pmf, survival = _poisson(lam, 0, int(lam + spread))
    high = min(flows, int(np.argmax(paths * survival < TAIL)))
    low = math.ceil(lam)
    ks = np.arange(low, max(low, high) + 1)
    return float(low + np.sum(1.0 - _conditioned_max_cdf(flows, paths, ks, pmf, 1.0 - survival)))


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


def go_back_n_goodput(loss_rate: float, rtt_s: float, rate_byte_s: float) -> float:
    """1 / (1 + p W): every loss resends the connection's window in flight, W = rate x RTT / 4 KiB (>= 1 packet)."""
    window = max(1.0, rate_byte_s * rtt_s / PACKET_BYTES)
    return 1.0 / (1.0 + loss_rate * window)


def selective_repeat_goodput(loss_rate: float) -> float:
    """(1 - p) - SELECTIVE_REPEAT_OVERHEAD when p > 0: only lost packets are resent."""
    return 1.0 if loss_rate == 0 else max(0.0, (1.0 - loss_rate) - SELECTIVE_REPEAT_OVERHEAD)


def connection_goodput(link: Link, transport: Transport, rate_byte_s: float) -> float:
    """Fraction of a connection's wire rate `rate_byte_s` on `link` that delivers new data; 1.0 without loss."""
    if link.loss_rate == 0:
        return 1.0
    if transport is Transport.ecmp_go_back_n:
        return go_back_n_goodput(link.loss_rate, 2 * link.one_way_latency_s, rate_byte_s)
    return selective_repeat_goodput(link.loss_rate)


def resource_capacity(link: Link, transport: Transport) -> float:
    """Raw byte/s of one fluid resource: a path (c / P) under ECMP, the pool c spray_efficiency(P) under spraying."""
    if transport is Transport.spray_selective_repeat:
        return link.capacity_byte_s * spray_efficiency(link.paths)
    return link.capacity_byte_s / link.paths


def resource_goodput(link: Link, transport: Transport, subflows: float, subflow_cap_byte_s: float = math.inf) -> float:
    """Goodput fraction of a resource shared by `subflows` subflows: each runs at min(C / k, cap) on the wire."""
    rate = min(resource_capacity(link, transport) / max(subflows, 1.0), subflow_cap_byte_s)
    return connection_goodput(link, transport, rate)


def link_efficiency(link: Link, transport: Transport, subflows: int, subflow_cap_byte_s: float = math.inf) -> float:
    """Fraction of `link`'s capacity a transfer of `subflows` equal subflows (connections x queue pairs) gets:
    ECMP: (N / P) / E[k_max] x goodput on the busiest path (k_max subflows at c / (P k_max) each);
    spraying: spray_efficiency(P) x goodput of N subflows sharing the pool. Each subflow's wire rate is capped
    at `subflow_cap_byte_s` (its NIC share) for the window."""
    n = max(1, subflows)
    if transport is Transport.spray_selective_repeat:
        return spray_efficiency(link.paths) * resource_goodput(link, transport, n, subflow_cap_byte_s)
    busiest = expected_max_load(n, link.paths)
    return ecmp_efficiency(n, link.paths) * resource_goodput(link, transport, busiest, subflow_cap_byte_s)


def nic_floor(link: Link, transport: Transport, unit_subflows: int, subflow_cap_byte_s: float) -> float:
    """The least time of one crossing unit's bytes, in units of their time at `link`'s bare capacity c, through the
    unit's own g = `unit_subflows` subflows at most cap = `subflow_cap_byte_s` each on the wire (its NICs' share per
    queue pair, at that rate's goodput): c / (g cap goodput(cap)). More units bring more NICs, so it bounds any
    number of units; above the lone unit's price line it binds: a few GPUs cannot fill a fat link (the replay caps
    every connection at its NIC)."""
    return link.capacity_byte_s / (unit_subflows * subflow_cap_byte_s
                                   * connection_goodput(link, transport, subflow_cap_byte_s))


def route_queue_pairs(links: Iterable[Link]) -> int:
    """Queue pairs one GPU-to-GPU connection opens along a route: the most any of its links asks. The setting is the
    connection's, end to end (its subflows cross every link of the route), so one value holds on all of them."""
    return max(link.queue_pairs_per_connection for link in links)


def fastest_nic_byte_s(gpus: Iterable[GPUType]) -> float:
    """The largest achievable NIC byte/s among `gpus`: the widest window a connection of theirs can open."""
    return max(AlphaBetaModel.from_gpu(gpu).bandwidth["fabric"] for gpu in gpus)


def _unit_grid(most: int) -> list[int]:
    """Unit counts 1..16, then steps of GRID_STEP up to `most` (and `most` itself)."""
    grid = list(range(1, min(16, most) + 1))
    while grid[-1] < most:
        grid.append(min(most, math.ceil(grid[-1] * GRID_STEP)))
    return grid


def _concave_envelope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The least concave function through (0, 0) at or above the points (x, y), at x (upper hull, monotone chain)."""
    hull = [(0.0, 0.0)]
    for point in zip(x.tolist(), y.tolist(), strict=True):
        while len(hull) >= 2 and ((hull[-1][1] - hull[-2][1]) * (point[0] - hull[-2][0])
                                  <= (point[1] - hull[-2][1]) * (hull[-1][0] - hull[-2][0])):
            hull.pop()
        hull.append(point)
    xs, ys = zip(*hull, strict=True)
    return np.interp(x, xs, ys)


def _reach(line: PriceLine, grid: np.ndarray, need: np.ndarray, over: np.ndarray) -> int:
    """How many grid points from the first one in `over` onwards `line` prices within LINE_TOLERANCE."""
    first = int(np.argmax(over))
    fits = line.intercept + line.slope * grid[first:] <= (1 + LINE_TOLERANCE) * need[first:]
    return len(fits) if fits.all() else int(np.argmin(fits))


@dataclass(frozen=True)
class PriceLine:
    """One line of a link's concave time: n units of u seconds (at bare capacity) each take at most
    intercept u + slope n u."""

    slope: float
    intercept: float


def price_lines(link: Link, transport: Transport, unit_subflows: int, most: int,
                subflow_cap_byte_s: float = math.inf) -> tuple[PriceLine, ...]:
    """Lines whose minimum bounds a link's time from above, for any number n <= `most` of crossing units.

    A unit opens g = `unit_subflows` subflows and moves at most u seconds of bytes at the link's bare capacity; n
    units take t(n) = n u / e(n g) (e = link_efficiency, non-decreasing in n: collisions even out and loss windows
    shrink), concave in n. On `_unit_grid` (consecutive integers up to 16, where t is exact; above, between grid
    points n' < n, e >= e(n' g)) t is at most R(n) = n / e(n' g) (units of u), and at most its concave envelope
    through the origin, Rc. Lines l_k(n) = a_k + b_k n:
      l_0        a = 0, b = max_n R(n) / n (= 1 / e(g)): a lone unit's price, no intercept (no binary needed);
      l_k, k > 0 while some n has min_k' l_k'(n) > (1 + LINE_TOLERANCE) Rc(n): of the tangents of Rc (b = the slope
                 of one of its segments, a = max_n (Rc(n) - b n) >= 0) the one pricing the longest run from the
                 first such n within the tolerance,
    so every line is >= Rc >= t at every n <= `most` (>= n u / e(`most` g) too: a valid lower price), and
    min_k l_k is within LINE_TOLERANCE of Rc; the MILP may pick whichever line it likes."""
    grid = np.array(_unit_grid(max(1, most)), dtype=float)
    eff = np.array([link_efficiency(link, transport, int(n) * unit_subflows, subflow_cap_byte_s) for n in grid])
    floor = np.minimum(eff, np.append(eff[:1], eff[:-1]))
    # The envelope can fall at its end (a lossy go-back-N link whose goodput grows with its subflows); the running
    # maximum is still an upper price, concave and non-decreasing, so every tangent reaches the point it starts at.
    need = np.maximum.accumulate(
        _concave_envelope(grid, grid / np.where(np.append(True, np.diff(grid) == 1), eff, floor)))
    slopes = np.maximum(0.0, np.diff(need) / np.diff(grid)) if len(grid) > 1 else np.zeros(0)
    slopes = np.append(slopes, slopes[-1:] if len(slopes) else need / grid)
    candidates = [PriceLine(float(b), float(max(0.0, np.max(need - b * grid)))) for b in slopes]
    lines = [PriceLine(float(np.max(need / grid)), 0.0)]
    while True:
        over = np.min([line.intercept + line.slope * grid for line in lines], axis=0) > (1 + LINE_TOLERANCE) * need
        if not over.any():
            return tuple(lines)
        lines.append(max(candidates[int(np.argmax(over)):], key=lambda line: _reach(line, grid, need, over)))
