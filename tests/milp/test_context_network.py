"""How the MILP prices each link: the lines of ShapeContext.price_lines and the efficiencies around them."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.network import LINE_TOLERANCE, link_efficiency
from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Shape

TWO = [{"name": "A", "gpus": 32, "gpu_type": "h100"}, {"name": "B", "gpus": 32, "gpu_type": "h100"}]
SHAPE = Shape(tp=4, pp=2, dp=8, micro_batch=1, microbatches=4)  # cells of 4 GPUs, 8 per stage: p D = 16 units


def context(small_instance, gbit_s: float, paths: int = 8):
    links = [{"a": "A", "b": "B", "capacity_gbit_s": gbit_s, "distance_km": 10, "paths": paths,
              "transports": ["ecmp_selective_repeat", "spray_selective_repeat"]}]
    instance = small_instance(TWO, links, None, gpus=64, batch=32, search_defaults={})
    return shape_context(instance, SHAPE, route_table(instance.topology))


def test_the_least_line_prices_every_unit_count_within_tolerance_and_never_below(small_instance):
    # n cells crossing open 4 n connections over 8 paths: n units of u take n u / e(4 n), e = link_efficiency
    # (one cell: 4 hashes on 8 paths, e(4) = (4 / 8) / E[max load] < 1). Unit counts 1..16 are all on the grid and
    # t(n) is concave there, so min_k (a_k + b_k n) lies in [t(n), (1 + tol) t(n)] for each n.
    ctx = context(small_instance, 10)
    link = ctx.routes.links[0]
    ecmp = link.transports[0]
    lines = ctx.price_lines[0, ecmp, 1]
    assert len(lines) > 1
    assert lines[0].intercept == 0.0
    assert lines[0].slope == pytest.approx(1 / link_efficiency(link, ecmp, 4))  # a lone cell, no intercept
    for n in range(1, 17):
        exact = n / link_efficiency(link, ecmp, 4 * n)
        least = min(line.intercept + line.slope * n for line in lines)
        assert exact * (1 - 1e-9) <= least <= exact * (1 + LINE_TOLERANCE) + 1e-9


def test_efficiency_is_the_many_connection_one_and_seconds_per_gb_the_lone_unit_s(small_instance):
    ctx = context(small_instance, 10)
    link = ctx.routes.links[0]
    ecmp, spray = link.transports
    assert ctx.efficiency[0, ecmp] == pytest.approx(link_efficiency(link, ecmp, 64))
    assert ctx.seconds_per_gb[0, ecmp] == pytest.approx(1e9 / (link.capacity_byte_s * link_efficiency(link, ecmp, 4)))
    assert ctx.efficiency[0, spray] == pytest.approx(0.98)  # spraying does not depend on the count
    assert len(ctx.price_lines[0, spray, 1]) == 1


def test_one_path_has_no_collisions_to_price(small_instance):
    ctx = context(small_instance, 10, paths=1)
    ecmp = ctx.routes.links[0].transports[0]
    assert ctx.efficiency[0, ecmp] == 1.0
    assert [(line.slope, line.intercept) for line in ctx.price_lines[0, ecmp, 1]] == [(1.0, 0.0)]
