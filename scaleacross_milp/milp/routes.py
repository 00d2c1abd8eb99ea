"""Routes between buildings: lowest-latency paths through the link graph (networkx)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

import networkx as nx

from scaleacross_milp.costmodel.network import route_queue_pairs
from scaleacross_milp.spec.topology import Link, Topology

Arc = tuple[int, int]
"""A link in one direction: (link index, +1 for a->b or -1 for b->a)."""


@dataclass(frozen=True)
class RouteTable:
    """For every ordered pair of distinct buildings: the directed arcs of its route and its one-way latency."""

    buildings: list[str]
    links: list[Link]
    arcs: dict[tuple[str, str], list[Arc]]
    latency_s: dict[tuple[str, str], float]

    def among(self, buildings: list[str]) -> RouteTable:
        """The table of a plan restricted to `buildings`: their pairs' routes and latencies as in the whole topology
        (a route may still cross links to other buildings), every link kept so arc indices stay valid."""
        inside = set(buildings)
        return RouteTable(list(buildings), self.links,
                          {pair: arcs for pair, arcs in self.arcs.items() if inside.issuperset(pair)},
                          {pair: s for pair, s in self.latency_s.items() if inside.issuperset(pair)})

    def pairs_over(self, arc: Arc) -> list[tuple[str, str]]:
        """Ordered building pairs whose route uses `arc` (in `arcs` order)."""
        return self._pairs_by_arc.get(arc, [])

    @cached_property
    def used_links(self) -> list[int]:
        """Indices of the links some route uses, ascending."""
        return sorted({i for arcs in self.arcs.values() for i, _ in arcs})

    @cached_property
    def queue_pairs(self) -> dict[tuple[str, str], int]:
        """Queue pairs each connection of an ordered pair opens along its route (`costmodel.network.route_queue_pairs`,
        as the replay opens them)."""
        return {pair: route_queue_pairs(self.links[i] for i, _ in arcs) for pair, arcs in self.arcs.items() if arcs}

    def lanes(self, arc: Arc) -> dict[int, list[tuple[str, str]]]:
        """`pairs_over(arc)` grouped by their connections' `queue_pairs`, fewest first: the traffic classes that cross
        the arc with their own subflow counts (one class where the routes over the arc agree; none on an unused arc)."""
        return self._lanes_by_arc.get(arc, {})

    @cached_property
    def _lanes_by_arc(self) -> dict[Arc, dict[int, list[tuple[str, str]]]]:
        """`lanes` of every arc some route uses, one pass over `_pairs_by_arc`."""
        lanes: dict[Arc, dict[int, list[tuple[str, str]]]] = {}
        for arc, pairs in self._pairs_by_arc.items():
            grouped: dict[int, list[tuple[str, str]]] = {}
            for pair in pairs:
                grouped.setdefault(self.queue_pairs[pair], []).append(pair)
            lanes[arc] = dict(sorted(grouped.items()))
        return lanes

    @cached_property
    def link_queue_pairs(self) -> dict[int, tuple[int, ...]]:
        """Per used link, the queue pairs of the classes crossing it either way (`lanes`), fewest first."""
        return {i: tuple(sorted({q for d in (1, -1) for q in self.lanes((i, d))})) for i in self.used_links}

    @cached_property
    def _pairs_by_arc(self) -> dict[Arc, list[tuple[str, str]]]:
        """`pairs_over` of every arc some route uses, one pass over the routes."""
        index: dict[Arc, list[tuple[str, str]]] = {}
        for pair, arcs in self.arcs.items():
            for arc in dict.fromkeys(arcs):
                index.setdefault(arc, []).append(pair)
        return index


def route_table(topology: Topology) -> RouteTable:
    graph = topology.graph()
    index = {(link.a, link.b): i for i, link in enumerate(topology.links)}
    names = [b.name for b in topology.buildings]
    paths = dict(nx.all_pairs_dijkstra_path(graph, weight="latency_s"))
    arcs: dict[tuple[str, str], list[Arc]] = {}
    latency: dict[tuple[str, str], float] = {}
    for src in names:
        for dst in names:
            if src == dst:
                continue
            hops = list(pairwise(paths[src][dst]))
            arcs[src, dst] = [(index[u, v], 1) if (u, v) in index else (index[v, u], -1) for u, v in hops]
            latency[src, dst] = sum(graph.edges[u, v]["latency_s"] for u, v in hops)
    return RouteTable(names, list(topology.links), arcs, latency)
