"""Per-operation costs the replay reads: a model mixing dense and MoE layers prices each stage's real layers."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.spec.model import MoE
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.verifier import verify
from scaleacross_milp.verify.workload import build_workload


def test_dense_and_moe_stages_are_priced_apart(tiny):
    base = tiny()
    moe = MoE(experts=8, top_k=2, expert_ffn_hidden=4096, first_dense_layers=16)
    instance = base.model_copy(update={"model": base.model_spec.model_copy(update={"moe": moe})})
    layout = Layout(shape={"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "microbatches": 8},
                    schedule=Schedule.one_f_one_b, dp_mode=DPMode.fsdp_no_reshard)
    resolved = resolve(instance, layout)
    real, average = build_workload(instance, resolved), build_workload(instance, resolved, average_layers=True)
    dense, experts = (real.rank("A", r).stages[r] for r in (0, 1))  # layers 0-15 dense, 16-31 MoE
    assert dense.dp_s < experts.dp_s and dense.all_gather_s < experts.all_gather_s
    assert dense.optimizer_s < experts.optimizer_s
    flat = [average.rank("A", r).stages[r] for r in (0, 1)]
    assert flat[0].dp_s == flat[1].dp_s
    assert dense.dp_s < flat[0].dp_s < experts.dp_s


def test_dp_sync_is_the_cost_models_curve_at_each_chunks_real_layers(tiny):
    # DDP reduces each model chunk's gradient buffer as one all-reduce: interleaved v=2 with 30 + 2 layers gives
    # rank 0 two chunks of 15 layers and rank 1 two of 1, each priced at its own layer count.
    instance = tiny(buildings=[{"name": "A", "gpus": 16, "gpu_type": "h100"}], global_batch_sequences=8)
    stages = [{"stage": 0, "layers": 30, "cells_per_building": {"A": 2}},
              {"stage": 1, "layers": 2, "cells_per_building": {"A": 2}}]
    layout = Layout(shape={"tp": 4, "pp": 2, "dp": 2, "micro_batch": 1, "microbatches": 4},
                    schedule=Schedule.interleaved, interleave=2, dp_mode=DPMode.ddp, stages=stages)
    work = build_workload(instance, resolve(instance, layout))
    sync = work.costs.per_gpu_type["h100"].dp_intra[DPVariant(DPMode.ddp)]
    for rank, layers in ((0, 30), (1, 2)):
        chunks = work.rank("A", rank).stages.values()
        assert [c.layers for c in chunks] == [layers // 2] * 2
        assert all(c.dp_s == pytest.approx(sync.stage_s(layers // 2)) for c in chunks)
        assert sum(c.dp_s for c in chunks) == pytest.approx(sync.stage_s(layers, chunks=2))
    assert sync.stage_s(15) != pytest.approx(15 * sync.stage_s(1), rel=1e-3)  # a curve, not a per-layer rate


def test_eager_kernels_lengthen_the_replayed_compute_by_the_priced_difference(tiny):
    """One stage, 4 microbatches: the compute replay is 4 x (32 layers + embedding + head and loss), so eager
    kernels add 4 x (32 x the layer's extra + the loss's extra), as costmodel.build prices them."""
    layout = Layout(shape={"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "microbatches": 4},
                    schedule=Schedule.one_f_one_b, dp_mode=DPMode.fsdp)
    one_building = [{"name": "A", "gpus": 8, "gpu_type": "h100"}]
    fused, eager = (tiny(buildings=one_building, kernels=k) for k in ("fused", "eager"))
    costs = [build_workload(i, resolve(i, layout)).costs.per_gpu_type["h100"] for i in (fused, eager)]
    extra = 4 * (32 * (costs[1].layer.total_s - costs[0].layer.total_s)
                 + costs[1].last_stage_extra.total_s - costs[0].last_stage_extra.total_s)
    replayed = [verify(i, layout)[0] for i in (fused, eager)]
    assert extra > 0
    assert replayed[1].breakdown.compute_s - replayed[0].breakdown.compute_s == pytest.approx(extra)
    assert replayed[1].iteration_s > replayed[0].iteration_s + 0.9 * extra
