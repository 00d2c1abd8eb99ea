"""Terms that depend on the schedule choice, as linear expressions of its one-hot binaries u[o] (sum_o u[o] = 1):
a stage's fixed terms follow the chosen option, since a V-shaped stage map runs the last virtual stage (LM head and
loss) on rank 0 (`ShapeContext.head_stage`) and the sends a rank makes depend on the map (`stage_sends`).
    H[j]  = sum_{o: head_stage(o) = j} u[o]    1 when the chosen option runs the LM head on stage j (head_on)
    e(u)  = sum_o e_o u[o]                     = e_o of the chosen option (chosen_value)
Each is a constant when every option agrees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def chosen_value(m: pyo.ConcreteModel, values: Sequence[float]):
    """e(u) = sum_o values[o] u[o] (module docstring)."""
    if len(set(values)) == 1:
        return values[0]
    return sum(value * m.u[o] for o, value in enumerate(values))
