"""Pricing of baseline layouts by the verifier, and the choices every baseline shares (ECMP transports, the
production shape rule)."""

from __future__ import annotations

from scaleacross_milp.baselines.result import BaselineResult, Kind, Step
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.topology import Transport
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.replay import FULL, replay
from scaleacross_milp.verify.verifier import verify
from scaleacross_milp.verify.workload import build_workload

ECMP = (Transport.ecmp_go_back_n, Transport.ecmp_selective_repeat)


def ecmp_transports(instance: Instance, notes: list[str]) -> dict[str, Transport]:
    """Each link's first ECMP transport; a link without one sprays (noted)."""
    chosen = {}
    for link in instance.topology.links:
        key = f"{link.a}-{link.b}"
        ecmp = [t for t in link.transports if t in ECMP]
        chosen[key] = ecmp[0] if ecmp else link.transports[0]
        if not ecmp:
            notes.append(f"link {key} has no ECMP transport: {chosen[key].value} used")
    return chosen


def feasible(instance: Instance, layout: Layout) -> bool:
    """Whether the hardware can run `layout` (verify.layout.resolve lists nothing infeasible)."""
    return not resolve(instance, layout).infeasible


def replay_s(instance: Instance, layout: Layout) -> float | None:
    """The verifier's iteration time of `layout` (its full replay, level D, without the breakdown replays), or
    None when the hardware cannot run it."""
    resolved = resolve(instance, layout)
    if resolved.infeasible:
        return None
    return replay(build_workload(instance, resolved), instance.topology, FULL).makespan_s


def priced(kind: Kind, instance: Instance, layout: Layout, notes: list[str], steps: list[Step] | None = None,
           evaluated: int | None = None) -> BaselineResult:
    """`layout` replayed by the verifier (verify.verifier.verify) as a BaselineResult."""
    verification, _ = verify(instance, layout)
    return BaselineResult(kind=kind, layout=layout, verification=verification, iteration_s=verification.iteration_s,
                          tokens_per_s=verification.tokens_per_s, notes=notes, steps=steps or [],
                          evaluated=evaluated)
