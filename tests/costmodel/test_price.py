"""costmodel.price: whose price a building pays and the cost of an iteration, by hand."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.price import egress_usd_per_gb, gpu_hour_usd, iteration_cost, priced
from tests.pricing import FAR_USD, NEAR_USD, priced_halls


def test_a_building_pays_its_own_price_else_its_gpu_types(small_instance):
    instance = priced_halls(small_instance)
    assert gpu_hour_usd(instance, "near") == NEAR_USD and gpu_hour_usd(instance, "far") == FAR_USD
    assert priced(instance) and not priced(small_instance(gpus=8, batch=16, search_defaults={}))
    assert egress_usd_per_gb(instance, "far", "near") == egress_usd_per_gb(instance, "near", "far") == 0.02


def test_iteration_cost_holds_every_gpu_of_the_used_buildings_and_pays_egress(small_instance):
    instance = priced_halls(small_instance)
    # the far hall alone for 3 s (16 GPUs x $6/h = $0.08 over 3 s), 10 GB out and 5 GB back at $0.02/GB = $0.30,
    # 16 sequences of 8192 tokens
    cost = iteration_cost(instance, ["far", "far"], 3.0, [("far", "near", 10.0), ("near", "far", 5.0)], 16 * 8192)
    assert cost.held_gpus == 16
    assert cost.gpu_usd == pytest.approx(16 * 6.0 * 3.0 / 3600)
    assert cost.egress_gbyte == 15.0 and cost.egress_usd == pytest.approx(0.30)
    assert cost.usd_per_iteration == pytest.approx(0.08 + 0.30)
    assert cost.usd_per_million_tokens == pytest.approx(0.38 / (16 * 8192) * 1e6)
