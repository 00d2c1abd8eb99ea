"""The cost objective, the budget and the throughput floor decided inside the MILP, on a cheap near hall and an
expensive far one (tests/pricing.py), with the costs checked by hand."""

from __future__ import annotations

import math

import pytest

from scaleacross_milp.milp.bounds import held_rate_floor_usd_s
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.screen import screen
from scaleacross_milp.milp.solve import InfeasibleInstance, ShapeSearch, solve_instance
from scaleacross_milp.milp.work import WorkClock
from scaleacross_milp.spec.plan import Plan, Shape
from scaleacross_milp.spec.search import Objective
from tests.pricing import EGRESS_USD, FAR_USD, NEAR_USD, priced_halls

GPUS = 16
"""GPUs per hall."""


def held(plan: Plan) -> set[str]:
    return {k for stage in plan.stages for k in stage.cells_per_building}


def usd(plan: Plan) -> float:
    return plan.prediction.cost.usd_per_iteration


@pytest.fixture
def solve(small_instance):
    return lambda **search: solve_instance(priced_halls(small_instance, **search))


def test_cost_objective_leaves_the_expensive_far_hall_unused_where_time_uses_it(solve):
    fastest, cheapest = solve(), solve(objective="cost")
    assert held(fastest) == {"near", "far"} and held(cheapest) == {"near"}
    # near alone: its 16 GPUs held for the iteration at $2/GPU-hour, nothing crosses the link
    t = cheapest.prediction.iteration_s
    assert usd(cheapest) == pytest.approx(GPUS * NEAR_USD / 3600 * t, rel=1e-9)
    assert cheapest.prediction.cost.egress_usd == 0 and cheapest.prediction.cost.held_gpus == GPUS
    # both halls held; 2 pipelines cross between them (the halls run alike, so either may hold stage 0), each
    # microbatch's activations b s h x 2 bytes forward and its gradients back: 2 directions x 8 microbatches x 2
    # pipelines x 8192 x 4096 x 2 bytes
    t = fastest.prediction.iteration_s
    crossing_gb = 2 * fastest.shape.microbatches * 2 * 8192 * 4096 * 2 / 1e9
    assert [(sorted(route.buildings), route.pipelines) for route in fastest.pipelines] == [(["far", "near"], 2)]
    assert fastest.prediction.cost.egress_gbyte == pytest.approx(crossing_gb, rel=1e-9)
    assert usd(fastest) == pytest.approx(GPUS * (NEAR_USD + FAR_USD) / 3600 * t + crossing_gb * EGRESS_USD, rel=1e-9)
    assert usd(fastest) > usd(cheapest) and fastest.prediction.iteration_s < cheapest.prediction.iteration_s
    tokens = cheapest.shape.batch_sequences * 8192
    assert cheapest.prediction.cost.usd_per_million_tokens == pytest.approx(usd(cheapest) / tokens * 1e6, rel=1e-12)
    # the search proved the cost: bound <= objective, the gap on dollars, the time left unbounded
    stats = cheapest.solve
    assert stats.objective is Objective.cost and stats.status == "optimal" and stats.bound_s is None
    assert stats.incumbent_usd == pytest.approx(usd(cheapest), rel=1e-6)
    assert stats.bound_usd <= stats.incumbent_usd + 1e-12
    assert stats.rel_gap == pytest.approx((stats.incumbent_usd - stats.bound_usd) / stats.incumbent_usd, abs=1e-9)
    assert fastest.solve.objective is Objective.time and fastest.solve.incumbent_usd is None


def test_time_under_a_binding_budget_is_within_it_and_slower(solve):
    fastest, cheapest = solve(), solve(objective="cost")
    budget = (usd(fastest) + usd(cheapest)) / 2
    plan = solve(max_cost_per_iteration=budget)
    assert usd(plan) <= budget * (1 + 1e-9)
    assert plan.prediction.iteration_s > fastest.prediction.iteration_s * (1 + 1e-3)
    assert plan.prediction.iteration_s <= cheapest.prediction.iteration_s * (1 + 1e-6)  # the cheapest plan fits
    assert plan.solve.bound_s <= plan.solve.incumbent_s + 1e-12 and plan.solve.status == "optimal"


def test_cost_under_a_throughput_floor_meets_it(solve):
    fastest, cheapest = solve(), solve(objective="cost")
    floor = (fastest.prediction.tokens_per_s + cheapest.prediction.tokens_per_s) / 2
    plan = solve(objective="cost", min_tokens_per_s=floor)
    assert plan.prediction.tokens_per_s >= floor * (1 - 1e-9)
    assert usd(cheapest) < usd(plan) <= usd(fastest) * (1 + 1e-9)  # the floor binds; the fastest plan meets it
    assert plan.solve.bound_usd <= plan.solve.incumbent_usd + 1e-12 and plan.solve.status == "optimal"


@pytest.mark.parametrize(("search", "named"), [
    ({"max_cost_per_iteration": 0.001}, r"search.max_cost_per_iteration \(\$0.001/iteration\)"),
    ({"objective": "cost", "min_tokens_per_s": 1e9}, r"search.min_tokens_per_s \(1,000,000,000 tokens/s\)")])
def test_a_limit_no_layout_meets_is_infeasible_naming_the_field(solve, search, named):
    # the cheapest plan costs about $0.0116 per iteration; the fastest runs about 170,000 tokens/s
    with pytest.raises(InfeasibleInstance, match=named):
        solve(**search)


def test_held_rate_floor_is_the_cheapest_cover_of_the_shape_cells(small_instance):
    # 8-GPU cells, 2 per hall: near costs 16 x $2 / 3600 per second, far 16 x $6 / 3600
    instance = priced_halls(small_instance)
    near, far = GPUS * NEAR_USD / 3600, GPUS * FAR_USD / 3600
    two_cells = Shape(tp=8, pp=1, dp=2, micro_batch=1, microbatches=8)
    four_cells = Shape(tp=8, pp=2, dp=2, micro_batch=1, microbatches=8)
    eight_cells = Shape(tp=8, pp=2, dp=4, micro_batch=1, microbatches=4)
    assert held_rate_floor_usd_s(instance, two_cells, ["near", "far"]) == pytest.approx(near)
    assert held_rate_floor_usd_s(instance, four_cells, ["near", "far"]) == pytest.approx(near + far)
    assert held_rate_floor_usd_s(instance, two_cells, ["far"]) == pytest.approx(far)
    assert held_rate_floor_usd_s(instance, eight_cells, ["near", "far"]) == float("inf")


def test_the_search_bounds_a_shapes_cost_by_its_time_bound_at_the_cheapest_held_rate(small_instance):
    # Each shape's first bound is its compute floor t (per requested batch); under the cost objective it becomes
    # t x R (R: held_rate_floor_usd_s), and a budget prunes the shapes whose own iteration, at least t long, costs
    # more than it at rate R.
    def search(**options) -> ShapeSearch:
        instance = priced_halls(small_instance, **options)
        return ShapeSearch(screen(instance, route_table(instance.topology)), WorkClock(60.0, 60.0), 60.0, 0.0, 1)

    timed, costed = search(), search(objective="cost")
    budget = 0.02
    budgeted = search(max_cost_per_iteration=budget)
    instance = budgeted.screening.instance
    assert [c.shape for c in costed.candidates] == [c.shape for c in timed.candidates]
    for i, candidate in enumerate(costed.candidates):
        rate = held_rate_floor_usd_s(instance, candidate.shape, ["near", "far"])
        own = candidate.floor_s / candidate.shape.batch_factor(16)
        assert timed.bounds[i] == candidate.floor_s
        assert costed.bounds[i] == pytest.approx(candidate.floor_s * rate, rel=1e-12)
        assert math.isinf(budgeted.bounds[i]) == (rate * own > budget)
    assert any(math.isinf(b) for b in budgeted.bounds) and not all(math.isinf(b) for b in budgeted.bounds)
