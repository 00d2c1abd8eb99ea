"""Cost as planners count it: an iteration holds every GPU of each building the plan uses (idle ones included; a
building left entirely unused is not held) for the iteration time, and pays for the GB it sends over priced links:
    cost = sum_{b used} G_b p_b / 3600 T + sum_l e_l V_l            ($/iteration)
    cost per M tokens = cost / (B_run seq_len) 1e6
(G_b GPUs of building b, p_b its $/GPU-hour (its own or its GPU type's), T the iteration time, e_l the link's $/GB,
V_l the GB sent over it per iteration, both directions). The MILP (`milp.formulation.cost`) prices its plans with
the same rates; the plan, its replay, the report and the batch summary carry the `Cost` this module computes."""

from __future__ import annotations

from collections.abc import Iterable

from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Cost

HOUR_S = 3600.0


def gpu_hour_usd(instance: Instance, building: str) -> float | None:
    """$/GPU-hour of `building`: its own price, else its GPU type's, else None."""
    own = instance.topology.building(building)
    return own.gpu_hour_usd if own.gpu_hour_usd is not None else instance.gpu_types[own.gpu_type].gpu_hour_usd


def priced(instance: Instance) -> bool:
    """Whether the instance prices its GPUs (the contract then has a price for every building)."""
    return all(gpu_hour_usd(instance, b.name) is not None for b in instance.topology.buildings)


def held_usd_per_s(instance: Instance, building: str) -> float:
    """G_b p_b / 3600: $ per second of holding every GPU of `building` (0 when unpriced)."""
    return instance.topology.building(building).gpus * (gpu_hour_usd(instance, building) or 0.0) / HOUR_S


def egress_usd_per_gb(instance: Instance, a: str, b: str) -> float:
    """e_l of the link joining `a` and `b` (either direction; 0 when it has no price)."""
    link = next(link for link in instance.topology.links if {link.a, link.b} == {a, b})
    return link.egress_usd_per_gb or 0.0


def iteration_cost(instance: Instance, buildings: Iterable[str], iteration_s: float,
                   sent: Iterable[tuple[str, str, float]], tokens: int) -> Cost:
    """The `Cost` of one iteration of `iteration_s` that uses `buildings`, sends `sent` (from, to, GB) over links and
    trains `tokens` tokens (module docstring)."""
    held = set(buildings)
    gpu_usd = sum(held_usd_per_s(instance, b) for b in held) * iteration_s
    priced_gb = [(gb, egress_usd_per_gb(instance, a, b)) for a, b, gb in sent]
    egress_usd = sum(gb * price for gb, price in priced_gb)
    total = gpu_usd + egress_usd
    return Cost(iteration_s=iteration_s, held_gpus=sum(instance.topology.building(b).gpus for b in held),
                gpu_usd=gpu_usd, egress_gbyte=sum(gb for gb, price in priced_gb if price > 0), egress_usd=egress_usd,
                usd_per_iteration=total, usd_per_million_tokens=total / tokens * 1e6)
