"""The cost a plan reports at the predicted and the replayed time, and how the terminal report prints it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.report.attach import attach_usage, attach_verification
from scaleacross_milp.report.summary import render_plan, usd
from scaleacross_milp.report.verification import render_verification
from scaleacross_milp.spec.plan import IdleCause
from tests.pricing import EGRESS_USD, FAR_USD, NEAR_USD, priced_halls


def test_the_replay_is_priced_at_its_own_time_and_link_loads(small_instance):
    instance = priced_halls(small_instance)
    plan, verification, _ = attach_verification(instance, solve_instance(instance), Path())
    cost = verification.cost
    # both halls held (16 GPUs each) for the replayed iteration; egress: every GB the replay sent, both directions
    sent = sum(load.pp_gbyte + load.dp_gbyte for load in verification.links)
    assert {(load.a, load.b) for load in verification.links} == {("near", "far"), ("far", "near")}
    assert cost.held_gpus == 32 and cost.iteration_s == verification.iteration_s
    assert cost.gpu_usd == pytest.approx(16 * (NEAR_USD + FAR_USD) / 3600 * verification.iteration_s, rel=1e-12)
    assert cost.egress_gbyte == pytest.approx(sent, rel=1e-12) and sent > 0
    assert cost.usd_per_iteration == pytest.approx(cost.gpu_usd + sent * EGRESS_USD, rel=1e-12)
    assert plan.verification.cost == cost and plan.prediction.cost.iteration_s == plan.prediction.iteration_s

    out = io.StringIO()
    console = Console(file=out, width=200, highlight=False, soft_wrap=True)
    render_plan(plan, console)
    render_verification(verification, console)
    text = out.getvalue()
    for label, figure in (("predicted", plan.prediction.cost), ("verified", cost)):
        assert (f"Cost ({label}): {usd(figure.usd_per_iteration)}/iteration, "
                f"{usd(figure.usd_per_million_tokens)}/M tokens (32 GPUs held for ") in text
    assert "Objective: time" in text


def test_dollars_print_with_cents_or_four_significant_digits():
    assert usd(1234.567) == "$1,234.57" and usd(0.0115976) == "$0.01160" and usd(0.231) == "$0.2310"
    assert usd(0.0) == "$0" and usd(None) == "n/a"


@pytest.mark.parametrize("search", [{"objective": "cost"}, {"max_cost_per_iteration": 0.03}])
def test_a_hall_left_out_at_its_price_is_idle_for_price(small_instance, search):
    # the cheapest plan (and the fastest within $0.03, which both halls break: 32 GPUs at $2 and $6 an hour for
    # the near hall's 1.3 s alone cost $0.029 before egress) holds the near hall only
    instance = priced_halls(small_instance, **search)
    plan = attach_usage(instance, solve_instance(instance))
    t = plan.prediction.iteration_s
    [idle] = plan.usage.idle
    assert idle.cause is IdleCause.price and idle.buildings == ["far"] and idle.gpus == 16
    extra = 16 * FAR_USD / 3600 * t
    if "objective" in search:
        assert f"16 GPUs at $6/GPU-hour adds {usd(extra)} per iteration" in idle.detail
    else:
        both = 16 * (NEAR_USD + FAR_USD) / 3600 * t
        assert both > 0.03
        assert f"would cost {usd(both)} before egress, over search.max_cost_per_iteration" in idle.detail
