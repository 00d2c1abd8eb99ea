"""Routes between buildings: lowest-latency paths through the link graph (networkx)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

import networkx as nx

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
