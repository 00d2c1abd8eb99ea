"""Per-operation costs the replay reads: a model mixing dense and MoE layers prices each stage's real layers."""

from __future__ import annotations

from scaleacross_milp.spec.model import MoE
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.verify.layout import resolve
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
