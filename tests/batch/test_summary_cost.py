"""The batch summary's cost columns read the figures the plan carries."""

from __future__ import annotations

from pathlib import Path

from scaleacross_milp.batch.result import ScenarioResult, Status
from scaleacross_milp.batch.summary import summary_columns
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.report.attach import attach_verification
from tests.pricing import priced_halls


def test_cost_columns_are_the_plans_predicted_and_verified_costs(small_instance):
    priced = priced_halls(small_instance, objective="cost")
    plan, _, _ = attach_verification(priced, solve_instance(priced), Path())
    unpriced = small_instance(search_defaults={"tp_degrees": [8], "pp_degrees": [1], "dp_modes": ["ddp"],
                                               "micro_batch_sizes": [1]}, gpus=8, batch=16)
    results = [ScenarioResult(id=name, axes={"case": name}, status=Status.solved, attempts=1, time_limit_s=30,
                              wall_s=1.0, plan=case) for name, case in (("priced", plan),
                                                                       ("unpriced", solve_instance(unpriced)))]
    columns = summary_columns(results)
    assert columns["predicted_usd_per_iteration"] == [plan.prediction.cost.usd_per_iteration, None]
    assert columns["verified_usd_per_iteration"] == [plan.verification.cost.usd_per_iteration, None]
    assert columns["usd_per_m_tokens"] == [plan.verification.cost.usd_per_million_tokens, None]
    assert columns["held_gpus"] == [16, None]
    assert columns["objective"] == ["cost", "time"]
    assert columns["best_bound_usd"][0] == plan.solve.bound_usd and columns["best_bound_usd"][1] is None
    assert columns["best_bound_s"][0] is None and columns["best_bound_s"][1] is not None


def test_the_summary_says_which_solves_the_wall_clock_ended(small_instance):
    # A sweep's rows come from workers running side by side: solve_wall_bound marks the rows whose plan depends on
    # their load (the wall clock ended the search before its work budget), solve_work_s the work each took.
    instance = small_instance(search_defaults={"tp_degrees": [8], "pp_degrees": [1], "dp_modes": ["ddp"],
                                               "micro_batch_sizes": [1]}, gpus=8, batch=16)
    plan = solve_instance(instance)
    ended = plan.model_copy(update={"solve": plan.solve.model_copy(update={"wall_bound": True})})
    results = [ScenarioResult(id=name, axes={"case": name}, status=Status.solved, attempts=1, time_limit_s=30,
                              wall_s=1.0, plan=case) for name, case in (("work", plan), ("wall", ended))]
    columns = summary_columns(results)
    assert columns["solve_wall_bound"] == [False, True]
    assert columns["solve_work_s"] == [plan.solve.work_s] * 2 and plan.solve.work_s > 0
