"""Entry point: solve an instance to a plan (being written)."""

from __future__ import annotations

from scaleacross_milp.spec.instance import Instance, InputError
from scaleacross_milp.spec.plan import Plan


class InfeasibleInstance(InputError):
    """No layout satisfies the instance; the message names the binding constraint."""


def solve_instance(
    instance: Instance,
    *,
    time_limit_s: float | None = None,
    rel_gap: float | None = None,
    threads: int | None = None,
) -> Plan:
    """Search shapes and solve the placement MILP; options override instance.search when given."""
    raise InfeasibleInstance("solver not written yet")
