"""Per-operation costs of a resolved layout, from costmodel's per-shape tables (shared with the MILP).

Per rank r (stage r of the plan, n_r layers, v chunks of n_r / v layers; chunk = virtual stage s, holding the
model's layers in order: virtual stage s runs the layers after those of virtual stages 0..s-1):
  F, I, W of stage s = sum over its layers of that layer's {forward, backward_input, backward_weight}
                       + embedding on virtual stage 0, LM head + loss on the last virtual stage; B = I + W
                       (the V map of ZB-V runs the last virtual stage on rank 0); those two virtual stages
                       also sync, gather and step their embedding / head parameters (GPUCosts.embedding_dp,
                       head_dp: DP sync as a collective of their own, added to the chunk's)
                       (a model mixing dense and MoE layers prices each kind from its own cost table, built by
                       costmodel for the model with every layer of that kind; the MILP prices the average layer)
  send       p2p_intra_s: the sender's local cost of one activation / gradient send (what the MILP charges)
  DP sync    the chunk's intra-building DP seconds at its real layers (costmodel.dp.chunk_sync_s, the MILP's
             IntraDPSync at full resolution: one collective over the chunk's gradient buffer under DDP and
             fsdp-no-reshard, one per layer under FSDP / HSDP), spread over its layers as their weight
             gradients become ready behind the chunk's last backward, or after the rank's last backward when the
             reduction does not overlap (costmodel.dp.grad_reduce_overlaps)
  all-gather FSDP / HSDP: before every F and I/B (reshard after forward); fsdp-no-reshard: before the first F
             of each chunk only; priced as the shard-group collective of the chunk's bf16 parameters; zero1: once
             per step, after the rank's optimizer step (exposed), or under overlap_param_gather before each chunk's
             first F, which waits only for the part `costmodel.dp.bucketed_gather_wait_s` of its layers' gathers
             says (plus the embedding's and head's, whole) while the rest runs on behind it
  optimizer  the optimizer step over the rank's layers
The TP / CP / EP share of each op comes from the costmodel (GPUCosts.tp_cp_comm and ep_comm); under
Training.overlap_moe_expert_parallel_comm an op no merged pair holds (`costmodel.actions.unpaired_ops`) takes what a
pair hides of its EP all-to-alls (GPUCosts.ep_hidden) on top.
"""

from __future__ import annotations

from dataclasses import dataclass

from scaleacross_milp.costmodel.build import build_shape_costs
from scaleacross_milp.costmodel.comm import AlphaBetaModel
from scaleacross_milp.costmodel.costs import DPVariant, GPUCosts, OpTimes, ShapeCosts
from scaleacross_milp.costmodel.dp import (
    bucketed_gather_wait_s,
    chunk_sync_s,
    grad_reduce_overlaps,
    params_gathered_at_end,
    params_gathered_bucketwise,
)
from scaleacross_milp.costmodel.layer_kinds import chunk_layers, kind_costs, mixes_layer_kinds
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.verify.layout import ResolvedLayout


@dataclass(frozen=True)
class StageWork:
    """One virtual stage on one building's GPU type, one microbatch (seconds); DP and optimizer per step."""

    layers: int
    ops: OpTimes
    tp_cp: OpTimes
    ep: OpTimes
    ep_hidden: OpTimes
    """What a merged forward-backward pair hides of `ep` (GPUCosts.ep_hidden): `ops` exclude it."""
    all_gather_s: float
    gather_wait_s: float
    """The part of `all_gather_s` the chunk's first forward waits for (all of it unless zero1 gathers bucket by
    bucket, `costmodel.dp.params_gathered_bucketwise`)."""
    grad_bytes_per_cell: float
    dp_s: float
    """Intra-building DP synchronisation of the chunk's layers, per step."""
    optimizer_s: float

    def op_s(self, kind: str, paired: bool = True) -> float:
        """Seconds of op `kind`: as a merged pair runs it, or outside one (`paired` False: a warm-up forward or a
        cool-down backward, `costmodel.actions.unpaired_ops`) with what a pair hides of its EP all-to-alls."""
        return self.ops.of(kind) + (0.0 if paired else self.ep_hidden.of(kind))

    def comm_s(self, kind: str, paired: bool = True) -> tuple[float, float]:
        """(TP+CP, EP) seconds exposed inside op `kind` (`op_s`)."""
        return self.tp_cp.of(kind), self.ep.of(kind) - (self.ep_hidden.of(kind) if paired else 0.0)


@dataclass(frozen=True)
class RankWork:
    building: str
    stages: dict[int, StageWork]
    send_s: float
    nic_byte_s: float

    @property
    def optimizer_s(self) -> float:
        return sum(stage.optimizer_s for stage in self.stages.values())


@dataclass(frozen=True)
class Workload:
    resolved: ResolvedLayout
    costs: ShapeCosts
    """The shape's cost table at the average layer (what the MILP prices)."""
    ranks: dict[tuple[str, int], RankWork]
    """(building, rank) -> work; every pattern's rank r in building k shares it."""
    p2p_bytes: float
    """Activation bytes of one pipeline crossing one boundary (b s h beta)."""
    gather_ratio: float
    """Bytes of parameters gathered per byte of gradient (beta / gradient bytes), FSDP and HSDP alike: an HSDP
    all-gather moves parameters, not the gradients its cross-replica all-reduce moves."""
    overlap_grad_reduce: bool = False
    """A chunk's DP reduction runs behind its last backward (costmodel.dp.grad_reduce_overlaps), else after the
    rank's last backward."""
    params_at_end: bool = False
    """The parameters are all-gathered after the optimizer step (costmodel.dp.params_gathered_at_end: zero1 without
    overlap_param_gather), not before the ops that need them."""

    def rank(self, building: str, rank: int) -> RankWork:
        return self.ranks[building, rank]


@dataclass(frozen=True)
class _LayerKind:
    """The costs of one kind of layer (dense, MoE or the average) on one GPU type."""

    gpu: GPUCosts
    grad_bytes_per_cell: float


def _plus(a: OpTimes, b: OpTimes) -> OpTimes:
    return OpTimes(a.forward_s + b.forward_s, a.backward_input_s + b.backward_input_s,
                   a.backward_weight_s + b.backward_weight_s)


def _kind_costs(instance: Instance, shape: Shape, variant: DPVariant, average: ShapeCosts) -> dict[bool, ShapeCosts]:
    """is-MoE -> the cost table of that kind of layer (the average table for a model with one kind)."""
    if not mixes_layer_kinds(instance.model_spec):
        return {False: average, True: average}
    dense, moe = kind_costs(instance, shape, [variant])
    return {False: dense, True: moe}


def _stage_work(resolved: ResolvedLayout, costs: ShapeCosts, building: str, kinds: list[_LayerKind],
                stage: int, bucketwise: bool) -> StageWork:
    """Virtual stage `stage` in `building`, holding one layer of each entry of `kinds` (`bucketwise`: its first
    forward waits for the layers' gathers bucket by bucket, `StageWork.gather_wait_s`)."""
    variant, gpu = resolved.variant, costs.building(building)
    zero = OpTimes(0.0, 0.0, 0.0)
    ops, tp_cp, ep, hidden = zero, zero, zero, zero
    gather = grad = optimizer = 0.0
    for kind in kinds:
        ops, tp_cp, ep = _plus(ops, kind.gpu.layer), _plus(tp_cp, kind.gpu.tp_cp_comm), _plus(ep, kind.gpu.ep_comm)
        hidden = _plus(hidden, kind.gpu.ep_hidden)
        gather += kind.gpu.gather_s_per_layer[variant]
        grad += kind.grad_bytes_per_cell
        optimizer += kind.gpu.optimizer_s_per_layer[variant]
    dp = chunk_sync_s([kind.gpu.dp_intra[variant] for kind in kinds])
    wait = bucketed_gather_wait_s([kind.gpu.gather_s_per_layer[variant] for kind in kinds],
                                  [kind.gpu.layer.forward_s for kind in kinds]) if bucketwise else gather
    for held, extra, grad_bytes, fixed in ((stage == 0, gpu.first_stage_extra, costs.grad_bytes_fixed_first,
                                             gpu.embedding_dp),
                                            (stage == resolved.actions.stages - 1, gpu.last_stage_extra,
                                             costs.grad_bytes_fixed_last, gpu.head_dp)):
        if held:
            ops, grad = _plus(ops, extra), grad + grad_bytes
            gather += fixed.gather_s[variant]
            wait += fixed.gather_s[variant]
            dp += fixed.dp_sync_s[variant]
            optimizer += fixed.optimizer_s[variant]
    return StageWork(len(kinds), ops, tp_cp, ep, hidden, gather, wait, grad, dp, optimizer)


def build_workload(instance: Instance, resolved: ResolvedLayout) -> Workload:
    """Price every rank's chunks, each layer from its own kind's cost table."""
    shape, variant, actions = resolved.layout.shape, resolved.variant, resolved.actions
    costs = build_shape_costs(instance, shape, [variant])
    by_kind = _kind_costs(instance, shape, variant, costs)
    moe = set(instance.model_spec.moe_layer_indices())
    held = chunk_layers([stage.layers for stage in resolved.stages], actions.rank_of)
    training = instance.training
    ranks: dict[tuple[str, int], RankWork] = {}
    for r, placement in enumerate(resolved.stages):
        for name in placement.cells_per_building:
            building = instance.topology.building(name)
            gpu_type = instance.gpu_types[building.gpu_type]
            stages = {}
            for s in actions.stages_of(r):
                kinds = [_LayerKind(by_kind[i in moe].building(name),
                                    by_kind[i in moe].grad_bytes_per_layer_per_cell) for i in held[s]]
                stages[s] = _stage_work(resolved, costs, name, kinds, s,
                                        params_gathered_bucketwise(training, variant))
            ranks[name, r] = RankWork(
                building=name, stages=stages,
                send_s=costs.building(name).p2p_intra_s if shape.pp > 1 else 0.0,
                nic_byte_s=AlphaBetaModel.from_gpu(gpu_type).bandwidth["fabric"],
            )
    return Workload(resolved, costs, ranks, costs.p2p_bytes, training.bytes_per_element / training.grad_bytes_per_param,
                    grad_reduce_overlaps(training, variant), params_gathered_at_end(training, variant))
