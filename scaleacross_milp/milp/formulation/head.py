"""Where the LM head runs, as an expression of the schedule choice: the option-dependent part of a stage's fixed
terms (compute, gradients, memory, DP costs), since a V-shaped stage map runs the last virtual stage on rank 0
(`ShapeContext.head_stage`):
    H[j] = sum_{o: head_stage(o) = j} u[o]    in [0, 1]; the constant 0 or 1 when every option agrees
"""

from __future__ import annotations

from collections.abc import Callable

import pyomo.environ as pyo

from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.milp.context import ShapeContext


def head_on(m: pyo.ConcreteModel, ctx: ShapeContext, j: int,
            where: Callable[[ScheduleOption], bool] | None = None):
    """H[j] (module docstring), over the options that also satisfy `where` when given."""
    chosen = [o for o in ctx.head_options(j) if where is None or where(ctx.options[o])]
    if len(chosen) == len(ctx.options):
        return 1
    return sum(m.u[o] for o in chosen)
