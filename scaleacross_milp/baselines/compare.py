"""The optimiser's plan beside every baseline (`solve --compare`): each baseline priced by the verifier, and the
optimiser's speedup over it, S = tokens/s of the plan / tokens/s of the baseline - 1 (= T_baseline / T_plan - 1 at
the same batch, the paper's convention; per sequence when batch rounding lets the two run different batches).

A baseline that cannot be built (no PP degree fits memory, no DP the buildings hold, an exhaustive space above
its limit) gets a row with the reason instead of a time: the comparison never fails the solve."""

from __future__ import annotations

from scaleacross_milp.baselines import Kind, baseline
from scaleacross_milp.baselines.exhaustive import LIMIT, count_layouts
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import BaselineComparison


def compare(instance: Instance, plan_tokens_per_s: float, time_limit_s: float | None = None
            ) -> list[BaselineComparison]:
    """One row per baseline kind, in `Kind` order; exhaustive only when its space holds at most LIMIT layouts."""
    rows = []
    for kind in Kind:
        if kind is Kind.exhaustive:
            count, exact = count_layouts(instance, LIMIT)
            if count > LIMIT:
                rows.append(BaselineComparison(kind=kind.value, note=(
                    f"not run: {'at least ' if not exact else ''}{count:,} layouts, above the limit of {LIMIT:,}")))
                continue
        try:
            result = baseline(instance, kind, time_limit_s)
        except InputError as exc:
            rows.append(BaselineComparison(kind=kind.value, note=f"not built: {exc}"))
            continue
        rows.append(BaselineComparison(
            kind=kind.value, layout=result.layout, iteration_s=result.iteration_s, tokens_per_s=result.tokens_per_s,
            speedup=plan_tokens_per_s / result.tokens_per_s - 1, cost=result.verification.cost,
            note="; ".join(result.notes)))
    return rows
