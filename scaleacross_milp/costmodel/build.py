"""Assemble ShapeCosts for one shape from the compute, memory, comm and dp formulas.

Per GPU of a stage cell, one microbatch:
  layer compute  = layer FLOPs/(tp*cp) / (peak * eff(h/tp))  +  elementwise bytes/(tp*cp) / (hbm * HBM_EFF)
                   (elementwise incl. a materialized kernel's attention scores; backward = 2x forward;
                   recompute adds the forward bytes of what it recomputes: all, or the scores when selective;
                   without sequence parallelism the norms and residual adds run on s/cp tokens on every TP
                   rank; a flash attention kernel executes half the attention core, at the generation's flash
                   efficiency (compute.KERNELS); under fp8 GEMMs run at the FP8 peak, attention and the LM head in BF16;
                   the bytes follow training.kernels, fused or eager)
  embedding      memory-bound lookup (read+write b*s*h*beta/(tp*cp)); gradient scatter-add = backward-weight
  LM head + loss head FLOPs (BF16 under fp8) + compute.LOGIT_BYTES per logit (fused 6 each way, eager 14 forward,
                 22 backward)
  TP comm        comm.tp_comm, exposed whole or, under training.tp_comm_overlap, max(0, comm - GEMM) per op
                 with the GEMMs of compute.tp_gemm_flops (`_tp_exposed`)
  EP comm        comm.ep_comm, exposed; under training.overlap_moe_expert_parallel_comm (EP > 1) the layer is the
                 steady state's merged pair's, less comm.ep_hidden (GPUCosts.ep_hidden: what an op outside a pair,
                 a warm-up forward or a cool-down backward, adds back)
  p2p (intra)    b*s*h*beta/(tp*cp) per GPU (scatter-gather), nvlink if two cells fit one NVLink domain
  optimizer      owned params * (2*beta + g + 2*o) bytes / (hbm * HBM_EFF)  (read w, g, m, v; write w, m, v)
  embedding / head DP  the layers' DP sync, all-gather and optimizer formulas at V*h/tp dense parameters
                 (GPUCosts.embedding_dp, head_dp)
Collectives (TP / CP / EP, p2p, intra-building DP) are priced by the instance's calibrated profile
(`collective_profile`, default: the bundled default) when the profile's GPU model is a token of the GPU type's
name ("H100" matches "h100-sxm"), with AlphaBetaModel.from_gpu for what the profile does not measure; any other
GPU type is priced by AlphaBetaModel.from_gpu alone.
The profile is resolved once per instance (`instance_tables`), and what depends only on the cell (micro-batch, TP,
CP, EP) is priced once per GPU type and shared by every shape with that cell (`CellCosts`). The DP terms depend on
the building's fabric too (its pods and their oversubscription: `costmodel.dp`), so a shape is priced once per
pricing class of buildings (`InstanceTables.classes`), each class with its own DP terms.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from scaleacross_milp.calibration.collective import CollectiveModel, Tier
from scaleacross_milp.calibration.defaults import load_profile
from scaleacross_milp.calibration.model import ProfileCollectiveModel
from scaleacross_milp.costmodel import compute, memory
from scaleacross_milp.costmodel.comm import (
    AlphaBetaModel,
    cp_comm,
    ep_comm,
    ep_hidden,
    group_tier,
    tp_comm,
)
from scaleacross_milp.costmodel.costs import DPVariant, FixedParamCosts, GPUCosts, OpTimes, ShapeCosts
from scaleacross_milp.costmodel.dp import IntraDPSync, dp_rings
from scaleacross_milp.costmodel.schedule import overlaps_ep
from scaleacross_milp.spec.hardware import GPUType
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.topology import Building
from scaleacross_milp.spec.training import Recompute, Training


def collective_model(instance: Instance, gpu_name: str, gpu: GPUType) -> CollectiveModel:
    """The profile-backed model when the instance's profile is for this GPU type (module docstring), else
    AlphaBetaModel.from_gpu."""
    datasheet = AlphaBetaModel.from_gpu(gpu)
    profile = load_profile(instance.collective_profile)
    if profile.gpu_model.lower() in re.split(r"[^a-z0-9]+", gpu_name.lower()):
        return ProfileCollectiveModel(profile, fallback=datasheet)
    return datasheet


def _tp_exposed(model: ModelSpec, training: Training, comm: CollectiveModel, tier: Tier, tp: int, tokens: int,
                bytes_per_token_h: float, t_flops: Callable[[float], float], moe_share: float) -> OpTimes:
    """The average layer's exposed TP communication (comm.tp_comm on S = T*h*beta/cp): under
    Training.tp_comm_overlap each collective pairs with its GEMM's time (compute.tp_gemm_flops priced by
    `t_flops`), dense and MoE layers each with their own GEMMs, weighted by their shares."""
    full = training.recompute is Recompute.full

    def one(moe_layer: bool) -> OpTimes:
        gemms = None
        if training.tp_comm_overlap:
            gemms = tuple(t_flops(f) for f in compute.tp_gemm_flops(model, tokens, moe_layer))
        c = tp_comm(comm, tier, tp, tokens * model.hidden * bytes_per_token_h, full, training.sequence_parallel,
                    gemms)
        return OpTimes(c.forward_s, c.backward_input_s, 0.0)

    dense = one(False)
    if not moe_share or not training.tp_comm_overlap:
        return dense
    moe = one(True)
    return OpTimes((1 - moe_share) * dense.forward_s + moe_share * moe.forward_s,
                   (1 - moe_share) * dense.backward_input_s + moe_share * moe.backward_input_s, 0.0)


def _layer_times(
    model: ModelSpec, shape: Shape, training: Training, gpu: GPUType, comm: CollectiveModel
) -> tuple[OpTimes, OpTimes, OpTimes, OpTimes]:
    """(average layer incl. exposed comm, its TP+CP part, its EP part, the EP part merged pairs hide) per GPU, one
    microbatch; under `schedule.overlaps_ep` the layer is the steady state's, less what the pairs hide
    (`comm.ep_hidden`)."""
    s, b, beta = training.seq_len, shape.micro_batch, training.bytes_per_element
    split = shape.tp * shape.cp
    moe_share = len(model.moe_layer_indices()) / model.layers
    flops = compute.average_layer_flops(model, b, s, training.recompute, training.attention)
    core = compute.core_layer_flops(model, b, s, training.recompute, training.attention)

    def t_flops(f: float) -> float:
        return compute.flops_time_s(f / split, gpu, training.precision, model.hidden, shape.tp)

    def t_core(f: float) -> float:
        return compute.core_time_s(f / split, gpu, training.precision, model.hidden, shape.tp, training.attention)

    def t_layer(total: float, attention_core: float) -> float:
        return t_flops(total - attention_core) + t_core(attention_core)

    tokens = b * s
    kernels = training.kernels
    elem = (1 - moe_share) * compute.elementwise_bytes_forward(model, tokens, False, kernels)
    if moe_share:
        elem += moe_share * compute.elementwise_bytes_forward(model, tokens, True, kernels)
    if not training.sequence_parallel:  # replicated over the TP ranks instead of split
        elem += (shape.tp - 1) * compute.sequence_elementwise_bytes_forward(model, tokens, kernels)
    scores = compute.attention_score_bytes_forward(model, tokens, s, training.attention)
    recomputed = {Recompute.none: 0.0, Recompute.selective: scores, Recompute.full: elem + scores}
    elem_f = compute.memory_time_s((elem + scores) / split, gpu)
    elem_bi = 2 * elem_f + compute.memory_time_s(recomputed[training.recompute] / split, gpu)

    tp = _tp_exposed(model, training, comm, group_tier(split, gpu), shape.tp, tokens, beta / shape.cp, t_flops,
                     moe_share)
    core_fwd = t_core(core.forward)
    kv_block = b * (s / shape.cp) * 2 * model.kv_heads * model.attention_head_dim * beta / shape.tp
    cp = cp_comm(comm, group_tier(split, gpu), shape.cp, kv_block, core_fwd, 2 * core_fwd)
    ep_f = ep_bi = 0.0
    if moe_share and shape.ep > 1 and model.moe is not None:
        dispatch = tokens * model.moe.top_k * model.hidden * beta / split
        ep = ep_comm(comm, group_tier(shape.cell_gpus, gpu), shape.ep, dispatch)
        ep_f, ep_bi = moe_share * ep.forward_s, moe_share * ep.backward_input_s
    tp_cp = OpTimes(tp.forward_s + cp.forward_s, tp.backward_input_s + cp.backward_input_s, 0.0)
    ep_times = OpTimes(ep_f, ep_bi, 0.0)
    layer = OpTimes(
        forward_s=t_layer(flops.forward, core.forward) + elem_f + tp_cp.forward_s + ep_f,
        backward_input_s=t_layer(flops.backward_input, core.backward_input) + elem_bi + tp_cp.backward_input_s
        + ep_bi,
        backward_weight_s=t_flops(flops.backward_weight),
    )
    if not overlaps_ep(training, shape):
        return layer, tp_cp, ep_times, OpTimes(0.0, 0.0, 0.0)
    hidden = OpTimes(*ep_hidden(ep_f, ep_bi, layer.total_s - ep_f - ep_bi), 0.0)
    steady = OpTimes(layer.forward_s - hidden.forward_s, layer.backward_input_s - hidden.backward_input_s,
                     layer.backward_weight_s)
    return steady, tp_cp, ep_times, hidden


@dataclass(frozen=True)
class CellCosts:
    """What one stage cell's GPU spends per microbatch whatever the shape's PP and DP degrees: an average layer (with
    its TP + CP and EP parts), the embedding, the LM head and loss, and one intra-building activation send."""

    layer: OpTimes
    tp_cp_comm: OpTimes
    ep_comm: OpTimes
    ep_hidden: OpTimes
    first_stage_extra: OpTimes
    last_stage_extra: OpTimes
    p2p_intra_s: float


@dataclass(frozen=True)
class InstanceTables:
    """What pricing a shape reads that no shape changes, built once per instance (`instance_tables`) and shared by
    its shapes: each GPU type in use with its collective model (the profile resolved once), the buildings' pricing
    classes, and the `CellCosts` priced so far, by (GPU type, micro-batch, TP, CP, EP)."""

    comm: dict[str, CollectiveModel]
    classes: dict[str, Building]
    """Pricing classes: buildings that price every term alike (same GPU type, pod size and oversubscription; a DP ring
    may span `ring_gpus` whatever the building's size), each keyed by and represented by its first building."""
    building_class: dict[str, str]
    """Each building's class key."""
    hbm_bytes: float
    """The largest usable HBM over the GPU types in use (`usable_hbm_bytes`)."""
    ring_gpus: int
    """The largest building's GPUs: what a stage's DP ring may span (`costmodel.dp.dp_rings`)."""
    cells: dict[tuple[str, int, int, int, int], CellCosts] = field(default_factory=dict)


def instance_tables(instance: Instance) -> InstanceTables:
    """The instance's shared pricing tables, in `instance.gpu_types` and building order (module docstring)."""
    used = {bd.gpu_type for bd in instance.topology.buildings}
    comm = {name: collective_model(instance, name, gpu) for name, gpu in instance.gpu_types.items() if name in used}
    first: dict[tuple, Building] = {}
    for bd in instance.topology.buildings:
        first.setdefault((bd.gpu_type, bd.pod_gpus, bd.oversubscription), bd)
    building_class = {bd.name: first[bd.gpu_type, bd.pod_gpus, bd.oversubscription].name
                      for bd in instance.topology.buildings}
    classes = {bd.name: bd for bd in first.values()}
    return InstanceTables(comm, classes, building_class,
                          max(usable_hbm_bytes(instance.gpu_types[name]) for name in comm),
                          max(bd.gpus for bd in instance.topology.buildings))


def usable_hbm_bytes(gpu: GPUType) -> float:
    """HBM a GPU's training state may use: capacity x usable fraction."""
    return gpu.hbm_gib * 2**30 * gpu.usable_hbm_fraction


def cell_costs(instance: Instance, shape: Shape, gpu_name: str, tables: InstanceTables) -> CellCosts:
    """The `CellCosts` of `shape`'s cell on one GPU type (module docstring), priced once per instance."""
    key = (gpu_name, shape.micro_batch, shape.tp, shape.cp, shape.ep)
    if key in tables.cells:
        return tables.cells[key]
    model, training = instance.model_spec, instance.training
    gpu, comm = instance.gpu_types[gpu_name], tables.comm[gpu_name]
    s, b, beta = training.seq_len, shape.micro_batch, training.bytes_per_element
    split = shape.tp * shape.cp
    tp_tier = group_tier(split, gpu)
    layer, tp_cp, ep, hidden = _layer_times(model, shape, training, gpu, comm)

    act = b * s * model.hidden * beta / split
    emb_rs = comm.time_s("reduce_scatter", tp_tier, shape.tp, act * shape.tp)
    first = OpTimes(
        forward_s=compute.memory_time_s(2 * act, gpu) + emb_rs,
        backward_input_s=0.0,
        backward_weight_s=compute.memory_time_s(2 * act, gpu),
    )
    head = compute.lm_head_flops(model, b, s)
    n_logits = b * s * model.vocab / split
    logit_f, logit_b = (compute.memory_time_s(n_logits * n, gpu) for n in compute.LOGIT_BYTES[training.kernels])
    ag = comm.time_s("all_gather", tp_tier, shape.tp, act * shape.tp)

    def t_head(f: float) -> float:
        # Transformer Engine keeps the LM head in BF16 under fp8 training, as it keeps the attention core.
        return compute.flops_time_s(f / split, gpu, compute.core_precision(training.precision), model.hidden, shape.tp)

    last = OpTimes(
        forward_s=t_head(head.forward) + logit_f + ag,
        backward_input_s=t_head(head.backward_input) + logit_b + ag,
        backward_weight_s=t_head(head.backward_weight),
    )
    p2p = comm.time_s("p2p", group_tier(2 * shape.cell_gpus, gpu), 2, b * s * model.hidden * beta / split)
    tables.cells[key] = CellCosts(layer, tp_cp, ep, hidden, first, last, p2p)
    return tables.cells[key]


def _building_costs(
    instance: Instance, shape: Shape, variants: list[DPVariant], building: Building, tables: InstanceTables
) -> GPUCosts:
    """`shape` priced in `building`: its GPU type's `CellCosts` and the DP terms of its fabric."""
    gpu_name = building.gpu_type
    model, training, gpu = instance.model_spec, instance.training, instance.gpu_types[gpu_name]
    cell = cell_costs(instance, shape, gpu_name, tables)
    params = memory.average_layer_params(model)
    d_gpu, e_gpu = params.dense / shape.tp, params.expert / (shape.tp * shape.ep)
    g = training.grad_bytes_per_param
    dp_intra = {v: IntraDPSync(tables.comm[gpu_name], shape, building, v, d_gpu * g, e_gpu * g, gpu.nvlink_domain_gpus,
                               tables.ring_gpus)
                for v in variants}
    layers = _param_dp_costs(shape, training, gpu, dp_intra, d_gpu, e_gpu)
    return GPUCosts(
        layer=cell.layer,
        tp_cp_comm=cell.tp_cp_comm,
        ep_comm=cell.ep_comm,
        ep_hidden=cell.ep_hidden,
        first_stage_extra=cell.first_stage_extra,
        last_stage_extra=cell.last_stage_extra,
        p2p_intra_s=cell.p2p_intra_s,
        hbm_usable_bytes=usable_hbm_bytes(gpu),
        optimizer_s_per_layer=layers.optimizer_s,
        gather_s_per_layer=layers.gather_s,
        dp_intra=dp_intra,
        embedding_dp=_param_dp_costs(shape, training, gpu, dp_intra, memory.embedding_params(model) / shape.tp, 0.0),
        head_dp=_param_dp_costs(shape, training, gpu, dp_intra, memory.head_params(model, shape.pp) / shape.tp, 0.0),
    )


def _param_dp_costs(shape: Shape, training: Training, gpu: GPUType, dp_intra: dict[DPVariant, IntraDPSync],
                    dense_gpu: float, expert_gpu: float) -> FixedParamCosts:
    """Per variant, for `dense_gpu` dense and `expert_gpu` expert parameters on one GPU (module docstring):
    their gradients' intra-building collective t(D g, E g) (reduce-scatter, all-reduce under DDP), one all-gather
    t(D beta, E beta) of the parameters (an all-gather moves what a reduce-scatter does; none under DDP) and the
    optimizer step over the owned share (all under DDP, D / N_d + E / N_e sharded: FSDP, HSDP and zero1 alike)."""
    beta, g, o = training.bytes_per_element, training.grad_bytes_per_param, training.optimizer_bytes_per_param
    sync, gather, optimizer = {}, {}, {}
    for v, intra in dp_intra.items():
        if v.mode is DPMode.ddp:
            owned = dense_gpu + expert_gpu
        else:
            nd, ne = memory.shard_groups(shape, v)
            owned = dense_gpu / nd + expert_gpu / ne
        optimizer[v] = compute.memory_time_s(owned * (2 * beta + g + 2 * o), gpu)
        sync[v] = intra.collective_s(dense_gpu * g, expert_gpu * g)
        gather[v] = 0.0 if v.mode is DPMode.ddp else intra.collective_s(dense_gpu * beta, expert_gpu * beta)
    return FixedParamCosts(sync, gather, optimizer)


def build_shape_costs(instance: Instance, shape: Shape, variants: list[DPVariant],
                      tables: InstanceTables | None = None) -> ShapeCosts:
    """Price `shape` in every pricing class of `instance`'s buildings (`InstanceTables.classes`), under each DP
    variant (`tables`: the instance's shared pricing tables, built here when not given); classes that price it alike
    share one `GPUCosts`."""
    model, training = instance.model_spec, instance.training
    tables = tables or instance_tables(instance)
    per_class, priced = {}, {}
    for key, bd in tables.classes.items():  # classes whose DP rings match price the shape alike: one GPUCosts
        nvlink = instance.gpu_types[bd.gpu_type].nvlink_domain_gpus
        rings = (bd.gpu_type, *(dp_rings(shape, bd, v, nvlink, tables.ring_gpus) for v in variants))
        if rings not in priced:
            priced[rings] = _building_costs(instance, shape, variants, bd, tables)
        per_class[key] = priced[rings]
    memory_use = memory.shape_memory(model, shape, training, variants)
    per_layer, first, last = memory.grad_bytes_per_cell(model, training, shape.pp)
    return ShapeCosts(
        shape=shape,
        per_class=per_class,
        building_class=tables.building_class,
        p2p_bytes=memory.boundary_bytes(model, training, shape.micro_batch),
        activation_bytes_per_layer=memory_use.activation_bytes_per_layer,
        layer_state_bytes=memory_use.layer_state_bytes,
        first_stage_fixed_bytes=memory_use.first_stage_fixed_bytes,
        last_stage_fixed_bytes=memory_use.last_stage_fixed_bytes,
        grad_bytes_per_layer_per_cell=per_layer,
        grad_bytes_fixed_first=first,
        grad_bytes_fixed_last=last,
        model_flops_per_iteration=compute.model_flops_per_iteration(model, training.seq_len, shape.batch_sequences),
        stage_fixed_bytes=memory_use.stage_fixed_bytes,
    )
