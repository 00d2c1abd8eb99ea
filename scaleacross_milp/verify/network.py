"""Fluid model of the inter-building links: concurrent flows share capacity max-min fairly.

Resources: each direction of a link under its transport, priced by costmodel.network, the definition the MILP
reads too. A resource of raw capacity C carrying k subflows (all flows' subflows on it at that moment, with the
largest NIC cap among them) delivers C x goodput(k, cap):
  ECMP, P > 1 paths   C = c, goodput = link_efficiency: (k / P) / E[k_max] (every subflow hashed to one path, the
                      transfer paced by the busiest path's expected load) x the busiest path's loss goodput;
  one path, spraying  C = c / P or c spray_efficiency(P), goodput = resource_goodput (loss recovered per
                      connection: under go-back-N each subflow resends its own window min(C / k, cap) x RTT).
So the replay charges ECMP the expected collisions of the subflows it actually carries at each moment, the same
expectation the MILP prices, rather than one draw of hashes: its result does not depend on a seed or on the order
in which flows start, and a flow is one class per route rather than one per combination of hashed paths.
A flow is a set of subflows (GPU-to-GPU connections x queue pairs) with equal bytes. Rates are max-min fair per
subflow (progressive filling), each subflow also capped by its NIC share.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial

import networkx as nx

from scaleacross_milp.costmodel.network import link_efficiency, resource_capacity, resource_goodput
from scaleacross_milp.spec.topology import Link, Topology, Transport

Goodput = Callable[[float, float], float]
"""(subflows on a resource, their largest cap) -> fraction of the resource's raw capacity delivering data."""

EPS_BYTES = 1e-3
FINISH_SLACK_S = 1e-6
"""Heap entries finishing up to this long after the present are checked for completion (see advance)."""
SATURATED = 1e-9
"""A resource whose load is within this share of its capacity is saturated (fills leave it at capacity up to
rounding)."""


@dataclass(eq=False)
class _Bundle:
    """The live subflows that cross the same `resources` under the same `cap`. Max-min fairness gives them one
    rate, so they are served alike: `served` is the bytes per subflow the bundle delivered up to `since`, and each
    group of subflows that joined it (heap `groups` of (target, serial, flow, subflows)) finishes when `served`
    reaches its target (the bundle's service when it joined plus its bytes). `finish` is when the first group
    finishes at `rate` (inf while it does not move, nan once the bundle is empty)."""

    serial: int
    resources: tuple[int, ...]
    cap: float
    since: float
    weight: int = 0
    served: float = 0.0
    rate: float = 0.0
    finish: float = math.inf
    groups: list[tuple[float, int, int, int]] = field(default_factory=list)

    def catch_up(self, now: float) -> None:
        self.served += self.rate * (now - self.since)
        self.since = now


@dataclass
class LinkModel:
    """The resource of one link direction and what it carried."""

    link: Link
    transport: Transport
    resource: int
    pp_bytes: float = 0.0
    dp_bytes: float = 0.0


@dataclass
class FluidNetwork:
    """Max-min fair sharing of link resources between flows; times in seconds, sizes in bytes.

    Incremental: subflows on the same resources under the same cap are one bundle (one rate, one finish-heap entry
    for its first group to end), a bundle's service is brought up to date only when its rate changes, and a flow
    start or group completion refills only the connected component (resources linked by the bundles crossing
    them) of the resources it touches: max-min fairness decomposes over components, so the others keep their
    rates. An event therefore costs the component's bundles (distinct routes and caps), not its transfers."""

    capacity: list[float] = field(default_factory=list)
    goodput: dict[int, Goodput] = field(default_factory=dict)
    now: float = 0.0
    pending: dict[int, int] = field(default_factory=dict)
    bundles: dict[tuple[tuple[int, ...], float], _Bundle] = field(default_factory=dict)
    on: list[dict[int, _Bundle]] = field(default_factory=list)
    """Per resource: serial -> live bundle crossing it (creation order, so refills are deterministic)."""
    load: list[dict[float, int]] = field(default_factory=list)
    """Per resource: subflows on it by their cap (what its goodput depends on)."""
    finishes: list[tuple[float, int, _Bundle]] = field(default_factory=list)
    """Heap of (finish, serial, bundle); an entry is stale once the bundle's finish differs from it."""
    serials: int = 0
    busy_s: list[float] = field(default_factory=list)
    """Per resource: the time it carried any bundle (measured, so never above the replay's makespan)."""

    def add_resource(self, capacity: float, goodput: Goodput | None = None) -> int:
        """A resource of raw `capacity`; `goodput` (if any) scales it by the subflows it carries at the time."""
        self.capacity.append(capacity)
        self.busy_s.append(0.0)
        self.on.append({})
        self.load.append({})
        if goodput is not None:
            self.goodput[len(self.capacity) - 1] = goodput
        return len(self.capacity) - 1

    def add_flow(self, flow: int, classes: list[tuple[tuple[int, ...], int]], bytes_per_subflow: float,
                 cap: float) -> None:
        """Start `flow` now: (resources, subflows) per class, each subflow moving `bytes_per_subflow`."""
        live = [(res, w) for res, w in classes if w > 0]
        self.pending[flow] = len(live)
        touched = list(dict.fromkeys(r for res, _ in live for r in res))
        slack = all(self._slack(r) for r in touched)
        joined = []
        for res, w in live:
            self.serials += 1
            bundle = self.bundles.get((res, cap))
            if bundle is None:
                bundle = self.bundles[res, cap] = _Bundle(self.serials, res, cap, self.now, rate=cap)
                for r in res:
                    self.on[r][bundle.serial] = bundle
            bundle.catch_up(self.now)
            heapq.heappush(bundle.groups, (bundle.served + bytes_per_subflow, self.serials, flow, w))
            bundle.weight += w
            for r in res:
                self.load[r][cap] = self.load[r].get(cap, 0) + w
            joined.append(bundle)
        if slack and all(self._slack(r) for r in touched):
            for bundle in joined:  # every resource it crosses has slack: it runs at its cap
                self._set_rate(bundle, cap)
        else:
            self._fill(touched)

    def next_completion(self) -> float:
        """The earliest finish time of a group of a live bundle (inf if none moves)."""
        heap = self.finishes
        while heap and heap[0][0] != heap[0][2].finish:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def advance(self, t: float) -> list[int]:
        """Move time to t; return flows whose last group finished. A group finishes when at most EPS_BYTES or
        1e-12 s of its bytes are left: finish - t <= max(1e-12, EPS_BYTES / rate), which is below FINISH_SLACK_S
        at any rate above 1 kB/s, so only heap entries up to t + FINISH_SLACK_S are examined."""
        for r, live in enumerate(self.on):
            if live:
                self.busy_s[r] += t - self.now
        self.now = t
        heap = self.finishes
        if not heap or heap[0][0] > t + FINISH_SLACK_S:
            return []
        done, moved = [], []
        freed: dict[int, bool] = {}  # resource -> whether it had slack before its first group here finished
        while heap and heap[0][0] <= t + FINISH_SLACK_S:
            finish, _, bundle = heapq.heappop(heap)
            if finish != bundle.finish:
                continue
            bundle.catch_up(t)
            bundle.finish = math.inf
            moved.append(bundle)
            while bundle.groups:
                left = bundle.groups[0][0] - bundle.served
                if left > EPS_BYTES and left / bundle.rate > 1e-12:
                    break
                _, _, flow, w = heapq.heappop(bundle.groups)
                for r in bundle.resources:
                    if r not in freed:
                        freed[r] = self._slack(r)
                    self.load[r][bundle.cap] -= w
                    if not self.load[r][bundle.cap]:
                        del self.load[r][bundle.cap]
                bundle.weight -= w
                self.pending[flow] -= 1
                if self.pending[flow] == 0:
                    del self.pending[flow]
                    done.append(flow)
        for bundle in moved:
            if bundle.groups:
                self._set_rate(bundle, bundle.rate)
            else:
                bundle.finish = math.nan
                del self.bundles[bundle.resources, bundle.cap]
                for r in bundle.resources:
                    del self.on[r][bundle.serial]
        if not all(freed.values()) or not all(self._slack(r) for r in freed):
            self._fill(list(freed))
        return done

    def _capacity(self, r: int) -> float:
        """Resource r's capacity now: raw x goodput(subflows on it, their largest cap) where loss applies."""
        load = self.load[r]
        if r not in self.goodput or not load:
            return self.capacity[r]
        return self.capacity[r] * self.goodput[r](sum(load.values()), max(load))

    def _slack(self, r: int) -> bool:
        """Whether resource r carries less than its capacity (sum of weight x rate < capacity (1 - SATURATED)).
        A change that leaves every resource it touches with slack before and after it leaves every other bundle's
        rate max-min fair: their bottlenecks (saturated resources, caps) are untouched, and a new one runs at its
        cap."""
        return sum(b.weight * b.rate for b in self.on[r].values()) < self._capacity(r) * (1 - SATURATED)

    def _component(self, seeds: list[int]) -> tuple[list[int], dict[int, _Bundle]]:
        """Resources and live bundles connected to `seeds` through bundles crossing several resources."""
        resources, seen, bundles = list(seeds), set(seeds), {}
        for r in resources:  # grows while it is walked
            for serial, b in self.on[r].items():
                if serial not in bundles:
                    bundles[serial] = b
                    for other in b.resources:
                        if other not in seen:
                            seen.add(other)
                            resources.append(other)
        return resources, bundles

    def _fill(self, seeds: list[int]) -> None:
        """Max-min rates of the component of `seeds` by progressive filling: the level of all unfrozen subflows
        rises until a resource saturates (the least residual / unfrozen subflows on it) or a subflow's cap is
        reached (the least cap); those subflows freeze at the level. Each resource capacity is raw x
        goodput(subflows on it, their largest cap) where loss applies."""
        resources, bundles = self._component(seeds)
        weight = dict.fromkeys(resources, 0)
        for b in bundles.values():
            b.catch_up(self.now)
            for r in b.resources:
                weight[r] += b.weight
        residual = {r: self._capacity(r) for r in resources}
        unfrozen = {b.serial: b for b in sorted(bundles.values(), key=_by_cap)}
        while unfrozen:
            least = next(iter(unfrozen.values()))
            level, tight = least.cap, None
            for r, w in weight.items():
                if w and residual[r] < level * w:
                    level, tight = max(residual[r], 0.0) / w, r
            if tight is None:
                batch = [b for b in unfrozen.values() if b.cap <= level]
            else:
                batch = [b for serial, b in self.on[tight].items() if serial in unfrozen]
            for b in batch:
                del unfrozen[b.serial]
                for r in b.resources:
                    residual[r] -= b.weight * level
                    weight[r] -= b.weight
                self._set_rate(b, level)

    def _set_rate(self, b: _Bundle, rate: float) -> None:
        """Bundle b moves at `rate` from now on (its service is up to date); the finish time of its first group
        (now + bytes left / rate) enters the finish heap."""
        b.rate = rate
        finish = self.now + (b.groups[0][0] - b.served) / rate if rate > 0 else math.inf
        if finish != b.finish:
            b.finish = finish
            if rate > 0:
                heapq.heappush(self.finishes, (finish, b.serial, b))


class Fabric:
    """The instance's links as network resources and the routes between buildings."""

    def __init__(self, topology: Topology, transports: dict[str, Transport], network: FluidNetwork) -> None:
        self.network = network
        self.links: dict[tuple[int, int], LinkModel] = {}
        index = {}
        for i, link in enumerate(topology.links):
            index[link.a, link.b], index[link.b, link.a] = (i, 1), (i, -1)
            transport = transports.get(f"{link.a}-{link.b}", link.transports[0])
            capacity, goodput = _resource(link, transport)
            for d in (1, -1):
                self.links[i, d] = LinkModel(link, transport, network.add_resource(capacity, goodput))
        graph = topology.graph()
        paths = dict(nx.all_pairs_dijkstra_path(graph, weight="latency_s"))
        self.arcs: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self.latency_s: dict[tuple[str, str], float] = {}
        for src, row in paths.items():
            for dst, hops in row.items():
                if src != dst:
                    self.arcs[src, dst] = [index[u, w] for u, w in zip(hops, hops[1:], strict=False)]
                    self.latency_s[src, dst] = sum(graph.edges[u, w]["latency_s"]
                                                   for u, w in zip(hops, hops[1:], strict=False))

    def classes(self, src: str, dst: str, subflows: int) -> list[tuple[tuple[int, ...], int]]:
        """The (resources, subflows) class of `subflows` connections src->dst: the route's link directions."""
        arcs = self.arcs[src, dst]
        return [(tuple(self.links[arc].resource for arc in arcs), subflows)]

    def record(self, src: str, dst: str, nbytes: float, kind: str) -> None:
        """Account `nbytes` of `kind` ("pp" or "dp") on every link direction of the route."""
        for arc in self.arcs[src, dst]:
            model = self.links[arc]
            if kind == "pp":
                model.pp_bytes += nbytes
            else:
                model.dp_bytes += nbytes


def _by_cap(b: _Bundle) -> tuple[float, int]:
    """Sort key: least cap first, then the order bundles opened."""
    return b.cap, b.serial


def _resource(link: Link, transport: Transport) -> tuple[float, Goodput | None]:
    """(raw capacity, goodput) of one direction of `link` (see the module docstring); goodput is memoised, as a
    replay asks for the same (subflows, cap) pairs many times."""
    if transport is not Transport.spray_selective_repeat and link.paths > 1:
        return link.capacity_byte_s, cache(partial(link_efficiency, link, transport))
    goodput = cache(partial(resource_goodput, link, transport)) if link.loss_rate > 0 else None
    return resource_capacity(link, transport), goodput
