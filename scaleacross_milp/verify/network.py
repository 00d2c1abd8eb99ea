"""Fluid model of the inter-building links: concurrent flows share capacity max-min fairly.

Resources: each direction of a link under its transport (costmodel.network, the definition the MILP reads too).
ECMP splits it into `paths` resources of raw capacity c / P and hashes every connection (subflow) of a flow to
one path per link, so collisions of few large flows leave paths idle as they do in a real fabric. As a switch
hashes a connection's header, the path is a function of (seed, src, dst, the flow's key, subflow index, link)
only (splitmix64), never of the order in which flows start, so replays do not depend on event-time noise.
Packet spraying pools the paths into one resource of raw capacity c spray_efficiency(P). A resource carrying
k subflows (all flows' subflows on it at that moment) delivers C x resource_goodput(k, cap): loss is recovered
per connection, so under go-back-N each subflow resends its own window min(C / k, cap) x RTT.
A flow is a set of subflows (GPU-to-GPU connections x queue pairs) with equal bytes; subflows on the same
resources form a class. Rates are max-min fair per subflow (progressive filling), each subflow also capped by
its NIC share. A flow finishes when its last class does.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import networkx as nx
import numpy as np

from scaleacross_milp.costmodel.network import link_efficiency, resource_capacity, resource_goodput
from scaleacross_milp.spec.topology import Link, Topology, Transport

Goodput = Callable[[float, float], float]
"""(subflows on a resource, their largest cap) -> fraction of the resource's raw capacity delivering data."""

EPS_BYTES = 1e-3
SEED = 0


@dataclass
class _Class:
    flow: int
    resources: tuple[int, ...]
    weight: int
    remaining: float
    cap: float
    rate: float = 0.0


@dataclass
class LinkModel:
    """Resources of one link direction and what it carried."""

    link: Link
    transport: Transport
    resources: list[int]
    pp_bytes: float = 0.0
    dp_bytes: float = 0.0
    transfers: int = 0
    subflows: int = 0

    @property
    def effective_byte_s(self) -> float:
        """Capacity x link_efficiency at the mean subflows per transfer it carried (one if none)."""
        mean = round(self.subflows / self.transfers) if self.transfers else 1
        return self.link.capacity_byte_s * link_efficiency(self.link, self.transport, max(1, mean))


@dataclass
class FluidNetwork:
    """Max-min fair sharing of link resources between flows; times in seconds, sizes in bytes."""

    capacity: list[float] = field(default_factory=list)
    goodput: dict[int, Goodput] = field(default_factory=dict)
    now: float = 0.0
    classes: list[_Class] = field(default_factory=list)
    pending: dict[int, int] = field(default_factory=dict)

    def add_resource(self, capacity: float, goodput: Goodput | None = None) -> int:
        """A resource of raw `capacity`; `goodput` (if any) scales it by the subflows it carries at the time."""
        self.capacity.append(capacity)
        if goodput is not None:
            self.goodput[len(self.capacity) - 1] = goodput
        return len(self.capacity) - 1

    def add_flow(self, flow: int, classes: list[tuple[tuple[int, ...], int]], bytes_per_subflow: float,
                 cap: float) -> None:
        """Start `flow` now: (resources, subflows) per class, each subflow moving `bytes_per_subflow`."""
        live = [(res, w) for res, w in classes if w > 0]
        self.pending[flow] = len(live)
        self.classes += [_Class(flow, res, w, bytes_per_subflow, cap) for res, w in live]
        self._fill()

    def next_completion(self) -> float:
        times = [c.remaining / c.rate for c in self.classes if c.rate > 0]
        return self.now + min(times) if times else math.inf

    def advance(self, t: float) -> list[int]:
        """Move time to t; return flows whose last class finished."""
        dt = t - self.now
        self.now = t
        done: list[int] = []
        keep = []
        for c in self.classes:
            c.remaining -= c.rate * dt
            if c.remaining <= EPS_BYTES or (c.rate > 0 and c.remaining / c.rate <= 1e-12):
                self.pending[c.flow] -= 1
                if self.pending[c.flow] == 0:
                    del self.pending[c.flow]
                    done.append(c.flow)
            else:
                keep.append(c)
        if len(keep) != len(self.classes):
            self.classes = keep
            self._fill()
        return done

    def _capacities(self) -> list[float]:
        """Each resource's capacity now: raw x goodput(subflows on it, their largest cap) where loss applies."""
        capacity = list(self.capacity)
        if not self.goodput:
            return capacity
        load: dict[int, list[float]] = {}
        for c in self.classes:
            for r in c.resources:
                if r in self.goodput:
                    entry = load.setdefault(r, [0.0, 0.0])
                    entry[0] += c.weight
                    entry[1] = max(entry[1], c.cap)
        for r, (subflows, cap) in load.items():
            capacity[r] *= self.goodput[r](subflows, cap)
        return capacity

    def _fill(self) -> None:
        """Progressive filling: raise all unfrozen subflow rates together; freeze those whose resource
        saturates or whose cap is reached."""
        residual = self._capacities()
        unfrozen = list(self.classes)
        while unfrozen:
            weight: dict[int, float] = {}
            for c in unfrozen:
                for r in c.resources:
                    weight[r] = weight.get(r, 0.0) + c.weight
            level = min(c.cap for c in unfrozen)
            tight = set()
            for r, w in weight.items():
                share = max(residual[r], 0.0) / w
                if share < level - 1e-12 * level:
                    level, tight = share, {r}
                elif share <= level + 1e-12 * level:
                    tight.add(r)
            frozen = [c for c in unfrozen if c.cap <= level * (1 + 1e-12) or tight.intersection(c.resources)]
            for c in frozen:
                c.rate = level
                for r in c.resources:
                    residual[r] -= c.weight * level
            frozen_ids = {id(c) for c in frozen}
            unfrozen = [c for c in unfrozen if id(c) not in frozen_ids]


class Fabric:
    """The instance's links as network resources, routes between buildings and the ECMP hashing."""

    def __init__(self, topology: Topology, transports: dict[str, Transport], network: FluidNetwork,
                 seed: int = SEED) -> None:
        self.network = network
        self.seed = seed
        self.links: dict[tuple[int, int], LinkModel] = {}
        index = {}
        for i, link in enumerate(topology.links):
            index[link.a, link.b], index[link.b, link.a] = (i, 1), (i, -1)
            transport = transports.get(f"{link.a}-{link.b}", link.transports[0])
            goodput = partial(resource_goodput, link, transport) if link.loss_rate > 0 else None
            count = 1 if transport is Transport.spray_selective_repeat else link.paths
            for d in (1, -1):
                resources = [network.add_resource(resource_capacity(link, transport), goodput) for _ in range(count)]
                self.links[i, d] = LinkModel(link, transport, resources)
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

    def classes(self, src: str, dst: str, subflows: int, key: str) -> list[tuple[tuple[int, ...], int]]:
        """Hash `subflows` connections src->dst of the flow named `key` onto paths of every link on the route
        (ECMP), or pool them (spraying); returns (resources, subflows) per class. Counts the transfer and its
        subflows on each link."""
        arcs = self.arcs[src, dst]
        for arc in arcs:
            self.links[arc].transfers += 1
            self.links[arc].subflows += subflows
        flow = _stable_hash(f"{self.seed}|{src}|{dst}|{key}")
        code = np.zeros(subflows, dtype=np.int64)
        resources = [self.links[arc].resources for arc in arcs]
        for (link, direction), options in zip(arcs, resources, strict=True):
            if len(options) > 1:
                base = np.uint64(flow ^ _stable_hash(f"{link}|{direction}"))
                picks = _splitmix64(np.arange(subflows, dtype=np.uint64) ^ base) % len(options)
                code = code * len(options) + picks.astype(np.int64)
        codes, counts = np.unique(code, return_counts=True)
        classes = []
        for code_, n in zip(codes.tolist(), counts.tolist(), strict=True):
            chosen = []
            for options in reversed(resources):
                if len(options) > 1:
                    code_, pick = divmod(code_, len(options))
                    chosen.append(options[pick])
                else:
                    chosen.append(options[0])
            classes.append((tuple(reversed(chosen)), n))
        return classes

    def record(self, src: str, dst: str, nbytes: float, kind: str) -> None:
        """Account `nbytes` of `kind` ("pp" or "dp") on every link direction of the route."""
        for arc in self.arcs[src, dst]:
            model = self.links[arc]
            if kind == "pp":
                model.pp_bytes += nbytes
            else:
                model.dp_bytes += nbytes


def _stable_hash(text: str) -> int:
    """A 64-bit hash of `text`, the same in every process (Python's str hash is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (Steele et al. 2014) on uint64: each input bit flips about half the output bits,
    so consecutive subflow indices give independent, uniform path picks."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
