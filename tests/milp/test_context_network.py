"""The connection count the MILP prices each link at (ShapeContext.flows_per_crossing / efficiency)."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.network import link_efficiency
from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Shape

TWO = [{"name": "A", "gpus": 32, "gpu_type": "h100"}, {"name": "B", "gpus": 32, "gpu_type": "h100"}]
SHAPE = Shape(tp=4, pp=2, dp=8, micro_batch=1, microbatches=4)  # cells of 4 GPUs, 8 per stage


def context(small_instance, gbit_s: float, paths: int = 8):
    links = [{"a": "A", "b": "B", "capacity_gbit_s": gbit_s, "distance_km": 10, "paths": paths,
              "transports": ["ecmp_selective_repeat", "spray_selective_repeat"]}]
    instance = small_instance(TWO, links, None, gpus=64, batch=32, search_defaults={})
    return shape_context(instance, SHAPE, route_table(instance.topology))


def test_a_thin_link_is_priced_at_one_crossing_cell(small_instance):
    # 10 Gb/s: one cell's stage gradients alone take far longer than 3 % of the iteration, so any count above one
    # cell (4 connections) would under-price a lone crossing cell by more than that
    ctx = context(small_instance, 10)
    link = ctx.routes.links[0]
    assert ctx.flows_per_crossing[0, link.transports[0]] == 4
    assert ctx.efficiency[0, link.transports[0]] == pytest.approx(link_efficiency(link, link.transports[0], 4))


def test_a_thick_link_is_priced_at_its_many_connection_efficiency(small_instance):
    # 10 Pb/s: a unit's bytes take microseconds, so every load up to p D = 16 cells (64 connections) prices alike
    ctx = context(small_instance, 1e7)
    link = ctx.routes.links[0]
    assert ctx.flows_per_crossing[0, link.transports[0]] == 64
    assert ctx.efficiency[0, link.transports[0]] == pytest.approx(link_efficiency(link, link.transports[0], 64))
    assert ctx.efficiency[0, link.transports[1]] == pytest.approx(0.98)  # spraying does not depend on the count


def test_one_path_has_no_collisions_to_price(small_instance):
    ctx = context(small_instance, 10, paths=1)
    assert ctx.efficiency[0, ctx.routes.links[0].transports[0]] == 1.0
