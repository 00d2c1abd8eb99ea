"""Which layers a stage holds, how many are MoE, and each kind's cost table (costmodel.layer_kinds)."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel import memory
from scaleacross_milp.costmodel.build import build_shape_costs
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.layer_kinds import (
    MoEPattern,
    chunk_layers,
    kind_costs,
    moe_layers_per_rank,
    moe_pattern,
    stage_bytes_held,
)
from scaleacross_milp.costmodel.schedule import loop_map, v_map
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from tests.costmodel.conftest import LLAMA3_8B, make_instance

MOE = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 7168}


def _model(**moe) -> ModelSpec:
    return ModelSpec.model_validate({**LLAMA3_8B, "layers": 8, "moe": {**MOE, **moe}})


def test_a_rank_s_chunks_take_the_next_layers_in_virtual_stage_order():
    assert chunk_layers([2, 3, 1], loop_map(3, 1)) == [range(0, 2), range(2, 5), range(5, 6)]
    # ZB-V on two ranks: rank 0 holds virtual stages 0 and 3, rank 1 stages 1 and 2, each rank's layers halved
    assert chunk_layers([4, 2], v_map(2)) == [range(0, 2), range(2, 3), range(3, 4), range(4, 6)]


def test_moe_layers_follow_the_stage_s_position():
    alternating = _model(moe_layer_interval=2)  # MoE layers 1, 3, 5, 7
    assert moe_layers_per_rank(alternating, [3, 5], loop_map(2, 1)) == [1, 3]
    assert moe_layers_per_rank(alternating, [5, 3], loop_map(2, 1)) == [2, 2]
    assert moe_layers_per_rank(alternating, [4, 4], v_map(2)) == [2, 2]


def test_the_pattern_bounds_the_moe_layers_of_any_window():
    assert moe_pattern(_model(moe_layer_interval=2)) == MoEPattern(2, 0.5, first=1)
    assert moe_pattern(_model(first_dense_layers=3)) == MoEPattern(1, 5 / 8, first=3)
    assert moe_pattern(_model(moe_layers=[0, 3, 5])) == MoEPattern(2, 3 / 8)  # irregular: the first n unknown
    assert moe_pattern(_model()) is None  # every layer MoE: one kind
    assert moe_pattern(ModelSpec.model_validate(LLAMA3_8B)) is None


def test_the_average_table_is_the_two_kinds_weighted_by_their_shares():
    instance = make_instance(model={**LLAMA3_8B, "layers": 8, "moe": {**MOE, "moe_layer_interval": 2}})
    shape = Shape(tp=2, cp=1, ep=2, pp=2, dp=4, micro_batch=1, microbatches=8)
    variant = DPVariant(DPMode.fsdp)
    average = build_shape_costs(instance, shape, [variant])
    dense, moe = kind_costs(instance, shape, [variant])
    assert dense.layer_state_bytes[variant] < moe.layer_state_bytes[variant]
    for read in (lambda costs: costs.layer_state_bytes[variant], lambda costs: costs.grad_bytes_per_layer_per_cell):
        assert read(average) == pytest.approx((read(dense) + read(moe)) / 2, rel=1e-9)


def test_a_stage_s_memory_follows_its_own_moe_layers_and_the_total_is_the_average_s():
    instance = make_instance(model={**LLAMA3_8B, "layers": 8, "moe": {**MOE, "moe_layer_interval": 2}})
    shape = Shape(tp=2, cp=1, ep=2, pp=2, dp=4, micro_batch=1, microbatches=8)
    variant = DPVariant(DPMode.fsdp)
    costs = build_shape_costs(instance, shape, [variant])
    inflight = [8.0, 8.0]  # GPipe: every stage holds every microbatch, so only the layers differ
    held = stage_bytes_held(instance, costs, variant, [3, 5], loop_map(2, 1), inflight)
    average = [memory.stage_bytes(costs, variant, j, n, inflight[j], 1) for j, n in enumerate([3, 5])]
    assert held[0] < average[0] and held[1] > average[1]  # 1 of 3 layers MoE, then 3 of 5: the average says 1.5, 2.5
    assert sum(held) == pytest.approx(sum(average), rel=1e-9)
