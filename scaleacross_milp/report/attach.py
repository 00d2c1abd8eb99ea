"""What `solve` and `batch` add to the solver's plan before reporting it: its use of the cluster, checked as
`evaluate` checks a layout, and the verifier's independent replay."""

from __future__ import annotations

from pathlib import Path

from scaleacross_milp.report.usage import plan_usage
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Layout, Plan, Verification
from scaleacross_milp.verify import verifier
from scaleacross_milp.verify.layout import check
from scaleacross_milp.verify.replay import ReplayResult


def attach_usage(spec: Instance, plan: Plan) -> Plan:
    """The plan with `usage` (report.usage.plan_usage at its predicted time and its search's bound), after
    verify.layout.check with infeasibility reported, not refused; InputError when the plan does not check."""
    resolved = check(spec, plan, Path(), allow_infeasible=True)
    return plan.model_copy(update={"usage": plan_usage(spec, resolved, plan.prediction.iteration_s, plan.solve)})


def attach_verification(spec: Instance, layout: Layout, base_dir: Path, predicted_s: float | None = None
                        ) -> tuple[Layout, Verification, ReplayResult]:
    """Replay `layout` (verify.verifier.verify, looked up when called, compared with `predicted_s` for a layout that
    is not a Plan): the layout with the verification attached when it is a Plan, the verification (with its cost
    when the instance gives prices) and the replay's records; InputError or replay.DeadlockError when it cannot be
    replayed."""
    verification, run = verifier.verify(spec, layout, base_dir, predicted_s)
    if isinstance(layout, Plan):
        layout = layout.model_copy(update={"verification": verification})
    return layout, verification, run
