"""Buildings and the inter-building link graph."""

from __future__ import annotations

from enum import Enum

import networkx as nx
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from scaleacross_milp.spec.base import Contract

MAX_BUILDING_GPUS = 10_000_000
"""More GPUs than any data-center building holds (the largest sites hold a few hundred thousand)."""
FIBER_US_PER_KM = 4.9
"""One-way propagation delay in optical fiber, microseconds per km."""


class Transport(str, Enum):
    """How a link's traffic is spread over its parallel paths and recovered under loss."""

    ecmp_go_back_n = "ecmp_go_back_n"
    ecmp_selective_repeat = "ecmp_selective_repeat"
    spray_selective_repeat = "spray_selective_repeat"


class Building(Contract):
    """A data-center building: GPUs of one type in pods joined by an oversubscribed core."""

    name: str = Field(min_length=1)
    gpus: PositiveInt = Field(le=MAX_BUILDING_GPUS)
    gpu_type: str
    pod_gpus: PositiveInt | None = None
    oversubscription: float = Field(1.0, ge=1.0)
    region: str = "default"
    gpu_hour_usd: NonNegativeFloat | None = Field(
        None, description="price of one of this building's GPUs for one hour, $/GPU-hour (overrides its gpu_type's "
        "gpu_hour_usd); a plan that uses the building holds, and pays for, every GPU in it")

    @model_validator(mode="after")
    def _pod_within_building(self) -> Building:
        if self.pod_gpus is not None and self.pod_gpus > self.gpus:
            raise ValueError(f"pod_gpus ({self.pod_gpus}) exceeds the building's gpus ({self.gpus})")
        return self


class Link(Contract):
    """A bidirectional inter-building link; `capacity_gbit_s` is per direction.

    Give `distance_km` (propagation 4.9 us/km plus `extra_latency_ms`) or `latency_ms` (one way, total).
    """

    a: str
    b: str
    capacity_gbit_s: PositiveFloat
    distance_km: NonNegativeFloat | None = None
    latency_ms: NonNegativeFloat | None = None
    extra_latency_ms: NonNegativeFloat = 0.01
    loss_rate: float = Field(0.0, ge=0.0, lt=1.0)
    paths: PositiveInt = Field(16, description="equal-cost parallel paths (ECMP next hops) between the ends")
    queue_pairs_per_connection: PositiveInt = Field(
        1, description=("RDMA queue pairs each GPU-to-GPU connection spreads its messages over; a connection whose "
                        "route crosses several links opens the most any of them asks")
    )
    transports: list[Transport] = Field(
        default_factory=lambda: [Transport.ecmp_go_back_n],
        min_length=1,
        description="transports the endpoints support on this link",
    )
    egress_usd_per_gb: NonNegativeFloat | None = Field(
        None, description="price of the traffic a plan sends over the link, $/GB in either direction (none: free)")

    @model_validator(mode="after")
    def _latency_given_once(self) -> Link:
        if self.a == self.b:
            raise ValueError(f"link joins building '{self.a}' to itself")
        if (self.distance_km is None) == (self.latency_ms is None):
            raise ValueError(f"link {self.a}-{self.b}: give exactly one of distance_km or latency_ms")
        return self

    @property
    def one_way_latency_s(self) -> float:
        if self.latency_ms is not None:
            return self.latency_ms / 1e3
        return self.distance_km * FIBER_US_PER_KM / 1e6 + self.extra_latency_ms / 1e3

    @property
    def capacity_byte_s(self) -> float:
        return self.capacity_gbit_s * 1e9 / 8


class Topology(Contract):
    buildings: list[Building] = Field(min_length=1)
    links: list[Link] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references_known_buildings(self) -> Topology:
        names = [b.name for b in self.buildings]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"building names must be unique; repeated: {dupes}")
        first_link: dict[frozenset[str], int] = {}
        for i, link in enumerate(self.links):
            for end in (link.a, link.b):
                if end not in names:
                    raise ValueError(f"links[{i}] names unknown building '{end}' (known: {names})")
            first = first_link.setdefault(frozenset((link.a, link.b)), i)
            if first != i:
                raise ValueError(f"links[{i}] joins {link.a} and {link.b} again (links[{first}] already does); "
                                 f"give one link with their combined capacity")
        graph = self.graph()
        if not nx.is_connected(graph):
            parts = sorted(sorted(c) for c in nx.connected_components(graph))
            raise ValueError(f"buildings are not all connected by links; separate groups: {parts}")
        return self

    def graph(self) -> nx.Graph:
        """Undirected link graph; edge attribute `link` holds the Link, `latency_s` its one-way delay."""
        graph = nx.Graph()
        graph.add_nodes_from(b.name for b in self.buildings)
        for link in self.links:
            graph.add_edge(link.a, link.b, link=link, latency_s=link.one_way_latency_s)
        return graph

    def building(self, name: str) -> Building:
        """The building called `name` (a name index kept beside the model, rebuilt when `buildings` is another list,
        as after a model_copy that replaces it)."""
        kept = self.__dict__.get("_by_name")
        if kept is None or kept[0] is not self.buildings:
            kept = (self.buildings, {b.name: b for b in self.buildings})
            self.__dict__["_by_name"] = kept
        return kept[1][name]

