import pytest

from scaleacross_milp.costmodel import compute
from scaleacross_milp.costmodel.build import build_shape_costs
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.training import AttentionKernel, Kernels
from tests.costs import sole

VARIANTS = [DPVariant(DPMode.ddp), DPVariant(DPMode.fsdp), DPVariant(DPMode.hsdp, 2)]


@pytest.fixture
def costs(instance_factory):
    def build(tp=1, recompute="selective"):
        shape = Shape(tp=tp, pp=2, dp=8, micro_batch=1, microbatches=8)
        return build_shape_costs(instance_factory(recompute), shape, VARIANTS)

    return build


def test_higher_tp_lowers_layer_time(costs):
    t1, t4 = sole(costs(1)), sole(costs(4))
    assert t4.layer.total_s < t1.layer.total_s
    assert t4.layer_comm_s > 0 == t1.layer_comm_s
    assert t4.layer.total_s > t1.layer.total_s / 4  # TP is not free


def test_full_recompute_costs_more_and_saves_memory(costs):
    none, full = costs(2, "none"), costs(2, "full")
    assert sole(full).layer.backward_input_s > sole(none).layer.backward_input_s
    assert sole(full).layer.forward_s == pytest.approx(
        sole(none).layer.forward_s
    )
    assert full.activation_bytes_per_layer < none.activation_bytes_per_layer / 10


def test_tables_are_consistent(costs):
    c = costs(2)
    g = sole(c)
    ddp, fsdp = DPVariant(DPMode.ddp), DPVariant(DPMode.fsdp)
    assert c.layer_state_bytes[fsdp] < c.layer_state_bytes[ddp]
    assert g.optimizer_s_per_layer[fsdp] < g.optimizer_s_per_layer[ddp]
    assert g.dp_intra[ddp].stage_s(1) > g.dp_intra[fsdp].stage_s(1) > 0  # all-reduce vs reduce-scatter
    assert c.p2p_bytes == 8192 * 4096 * 2
    assert c.stage_fixed_bytes[fsdp] > 0 == c.stage_fixed_bytes[ddp]
    assert g.last_stage_extra.total_s > g.first_stage_extra.total_s > 0
    assert g.hbm_usable_bytes == pytest.approx(80 * 2**30 * 0.92)
    # 8B params, the batch the shape runs (DP 8 x 8 microbatches = 64 sequences) x 8192 tokens: 6 N D + attention
    assert 6 * 7.5e9 * 64 * 8192 < c.model_flops_per_iteration < 6 * 8.0e9 * 64 * 8192 * 1.4


def test_moe_shape_prices_ep(instance_factory):
    moe_model = dict(
        name="mx",
        layers=8,
        hidden=4096,
        ffn_hidden=14336,
        heads=32,
        kv_heads=8,
        vocab=32000,
        moe=dict(experts=8, top_k=2, expert_ffn_hidden=14336),
    )
    inst = instance_factory(model=moe_model)
    ep1 = build_shape_costs(inst, Shape(tp=2, pp=1, dp=8, micro_batch=1, microbatches=4), VARIANTS)
    ep4 = build_shape_costs(inst, Shape(tp=2, ep=4, pp=1, dp=8, micro_batch=1, microbatches=4), VARIANTS)
    assert sole(ep4).layer_comm_s > sole(ep1).layer_comm_s
    # the EP share is the all-to-all alone: none without EP, and TP/CP traffic does not depend on EP
    assert sole(ep1).ep_comm.total_s == 0 < sole(ep4).ep_comm.total_s
    assert sole(ep4).tp_cp_comm == sole(ep1).tp_cp_comm
    assert ep4.layer_state_bytes[VARIANTS[0]] < ep1.layer_state_bytes[VARIANTS[0]]


@pytest.mark.parametrize("change", [{"sequence_parallel": False}, {"attention": AttentionKernel.materialized}])
def test_replicated_norms_and_materialized_scores_cost_time(instance_factory, change):
    """Defaults: sequence parallel, flash attention; each departure adds HBM traffic to the forward."""
    base = instance_factory("selective")
    changed = base.model_copy(update={"training": base.training.model_copy(update=change)})
    shape = Shape(tp=4, pp=2, dp=8, micro_batch=1, microbatches=8)
    before, after = (sole(build_shape_costs(i, shape, VARIANTS)).layer for i in (base, changed))
    assert after.forward_s > before.forward_s
    assert after.backward_weight_s == pytest.approx(before.backward_weight_s)  # weights' matmuls unchanged


def test_eager_kernels_add_their_extra_bytes_to_layer_and_loss(instance_factory):
    """Selective recompute with flash attention recomputes no bytes: forward pays the extra eager bytes once,
    backward-input twice; the loss pays LOGIT_BYTES; the weights' matmuls are unchanged."""
    fused = instance_factory("selective")
    eager = fused.model_copy(update={"training": fused.training.model_copy(update={"kernels": Kernels.eager})})
    shape = Shape(tp=2, pp=2, dp=8, micro_batch=1, microbatches=8)
    before, after = (sole(build_shape_costs(i, shape, VARIANTS)) for i in (fused, eager))
    model, gpu, tokens = fused.model_spec, fused.gpu_types["h100"], 8192
    extra = compute.memory_time_s((compute.elementwise_bytes_forward(model, tokens, kernels=Kernels.eager)
                                   - compute.elementwise_bytes_forward(model, tokens)) / 2, gpu)
    assert extra > 0
    assert after.layer.forward_s - before.layer.forward_s == pytest.approx(extra)
    assert after.layer.backward_input_s - before.layer.backward_input_s == pytest.approx(2 * extra)
    assert after.layer.backward_weight_s == before.layer.backward_weight_s
    logits = tokens * model.vocab / 2
    assert after.last_stage_extra.forward_s - before.last_stage_extra.forward_s == pytest.approx(
        compute.memory_time_s(logits * (14 - 6), gpu))
    assert after.last_stage_extra.backward_input_s - before.last_stage_extra.backward_input_s == pytest.approx(
        compute.memory_time_s(logits * (22 - 6), gpu))


def test_embedding_and_head_dp_costs_are_the_layers_formulas_at_their_size(costs):
    # Llama 3 8B, TP1 PP2 DP8 on H100 (3.35 TB/s at 80 %): the embedding holds V h = 128,256 x 4,096 = 525,336,576
    # parameters per GPU, the untied head V h + h = 525,340,672 (~2.4 layers of 218 M each). The optimizer reads
    # w, g, m, v and writes w, m, v: 2 x 2 + 4 + 2 x 12 = 32 bytes per owned parameter, all of them under DDP, 1/8
    # under FSDP (8 shard members), 1/4 under HSDP with 2 replicas. Their gradients (4 bytes each) are reduced
    # in one collective of their own, their bf16 parameters gathered in one (none under DDP).
    table = costs(tp=1)
    gpu = sole(table)
    ddp, fsdp, hsdp = VARIANTS
    hbm = 3.35e12 * 0.8
    for fixed, params in ((gpu.embedding_dp, 525_336_576), (gpu.head_dp, 525_340_672)):
        assert fixed.optimizer_s[ddp] == pytest.approx(params * 32 / hbm, rel=1e-12)
        assert fixed.optimizer_s[fsdp] == pytest.approx(params / 8 * 32 / hbm, rel=1e-12)
        assert fixed.optimizer_s[hsdp] == pytest.approx(params / 4 * 32 / hbm, rel=1e-12)
        for v in VARIANTS:
            assert fixed.dp_sync_s[v] == pytest.approx(gpu.dp_intra[v].collective_s(params * 4, 0.0), rel=1e-12)
            assert fixed.dp_sync_s[v] > 2 * gpu.dp_intra[v].layer_s
        assert fixed.gather_s[ddp] == 0.0
        assert fixed.gather_s[fsdp] == pytest.approx(gpu.dp_intra[fsdp].collective_s(params * 2, 0.0), rel=1e-12)
        assert fixed.gather_s[fsdp] > 2 * gpu.gather_s_per_layer[fsdp]
    assert gpu.embedding_dp.optimizer_s[ddp] == pytest.approx(6.2727e-3, rel=1e-4)
