"""The plan read off a solved model (milp.extract): its breakdown accounts for the whole objective."""

from __future__ import annotations

import pytest

from scaleacross_milp.generate import Size, generate_instance
from scaleacross_milp.milp.extract import breakdown, link_uses
from scaleacross_milp.milp.highs import HighsModel
from scaleacross_milp.milp.path_cuts import solve_with_cuts
from scaleacross_milp.milp.price import PRICE_LIMIT_S, fixed_layout_model
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Layout

# Generated medium seed 162: Llama 4 Maverick FSDP over two buildings whose DP traffic crosses a 73 %-efficient link
# busy 27.4 s, longer than the pipeline and the exposed reduction; each microbatch's FSDP gathers (6.6 s in all)
# stretch the cycle. The parts summed to 21.78 s against T = 28.42 s: the link-bound remainder was taken net of the
# gathers twice (they are in the cycle and in the DP part).
LINK_BOUND_FSDP = {
    "shape": {"tp": 4, "cp": 1, "ep": 8, "pp": 1, "dp": 32, "micro_batch": 1, "microbatches": 9},
    "schedule": "1f1b", "dp_mode": "fsdp",
    "stages": [{"stage": 0, "layers": 48, "cells_per_building": {"s0-b4": 2, "s0-b8": 2}}],
    "pipelines": [{"buildings": ["s0-b4"], "pipelines": 16}, {"buildings": ["s0-b8"], "pipelines": 16}],
}


def test_a_link_bound_plan_s_breakdown_sums_to_its_iteration_time():
    instance = generate_instance(162, Size.medium)
    ctx, m = fixed_layout_model(instance, Layout.model_validate(LINK_BOUND_FSDP), route_table(instance.topology))
    outcome = solve_with_cuts(HighsModel(m), ctx, time_limit_s=PRICE_LIMIT_S, rel_gap=0.0, threads=1)
    links = link_uses(m, ctx)
    assert max(use.busy_s for use in links) > 0.9 * outcome.incumbent  # the case: a link sets the time
    parts = breakdown(m, ctx, 0, links)
    total = (parts.compute_s + parts.exposed_tp_ep_s + parts.bubble_s + parts.exposed_pp_s + parts.exposed_dp_s
             + parts.optimizer_s)
    assert total == pytest.approx(outcome.incumbent, rel=1e-6)
