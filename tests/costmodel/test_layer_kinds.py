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
    moe_memory,
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


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_shapes_with_one_memory_key_hold_the_same_bytes(precision):
    """Screening shares byte counts between shapes of one `memory.memory_key` (PP > 1 and microbatches aside)."""
    model = _model(moe_layer_interval=2)
    training = make_instance().training.model_copy(update={"precision": precision})
    variants = [DPVariant(DPMode.ddp), DPVariant(DPMode.fsdp), DPVariant(DPMode.hsdp, 2), DPVariant(DPMode.zero1)]
    base = Shape(tp=2, cp=2, ep=2, pp=2, dp=8, micro_batch=2, microbatches=4)
    deeper = base.model_copy(update={"pp": 8, "microbatches": 16})
    assert memory.memory_key(base) == memory.memory_key(deeper)
    held = memory.shape_memory(model, base, training, variants)
    assert held == memory.shape_memory(model, deeper, training, variants)
    extra = moe_memory(model, base, training, variants)
    assert extra is not None and extra == moe_memory(model, deeper, training, variants)
    one_stage = base.model_copy(update={"pp": 1})  # the LM head shares the tied embedding: other bytes, other key
    tied = model.model_copy(update={"tied_embeddings": True})
    assert memory.memory_key(one_stage) != memory.memory_key(base)
    assert memory.shape_memory(tied, one_stage, training, variants) != memory.shape_memory(tied, base, training,
                                                                                           variants)
