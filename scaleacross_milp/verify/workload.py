"""Per-operation costs of a resolved layout, from costmodel's per-shape tables (shared with the MILP).

Per rank r (stage r of the plan, n_r layers, v chunks of n_r / v layers; chunk = virtual stage s):
  F, I, W of stage s = (n_r / v) x layer.{forward, backward_input, backward_weight}
                       + embedding on virtual stage 0, LM head + loss on the last virtual stage; B = I + W
  send       p2p_intra_s: the sender's local cost of one activation / gradient send (what the MILP charges)
  DP sync    dp_intra_s_per_layer x layers of the chunk, per layer as its weight gradients become ready
  all-gather FSDP / HSDP: before every F and I/B (reshard after forward); fsdp-no-reshard: before the first F
             of each chunk only; priced as the shard-group collective of the chunk's bf16 parameters
  optimizer  optimizer_s_per_layer x n_r
The TP / CP / EP share of each op comes from the costmodel (GPUCosts.tp_cp_comm and ep_comm).
"""

from __future__ import annotations

from dataclasses import dataclass

from scaleacross_milp.costmodel.comm import AlphaBetaModel
from scaleacross_milp.costmodel.costs import GPUCosts, OpTimes, ShapeCosts, build_shape_costs
from scaleacross_milp.costmodel.dp import dp_cross_phases
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.verify.layout import ResolvedLayout

KINDS = ("F", "I", "W")


@dataclass(frozen=True)
class StageWork:
    """One virtual stage on one building's GPU type, one microbatch (seconds)."""

    layers: int
    ops: OpTimes
    tp_cp: OpTimes
    ep: OpTimes
    all_gather_s: float
    grad_bytes_per_cell: float

    def op_s(self, kind: str) -> float:
        return self._pick(self.ops, kind)

    def comm_s(self, kind: str) -> tuple[float, float]:
        """(TP+CP, EP) seconds inside op `kind`."""
        return self._pick(self.tp_cp, kind), self._pick(self.ep, kind)

    @staticmethod
    def _pick(times: OpTimes, kind: str) -> float:
        if kind == "B":
            return times.backward_input_s + times.backward_weight_s
        return {"F": times.forward_s, "I": times.backward_input_s, "W": times.backward_weight_s}[kind]


@dataclass(frozen=True)
class RankWork:
    building: str
    stages: dict[int, StageWork]
    send_s: float
    dp_layer_s: float
    optimizer_s: float
    nic_byte_s: float


@dataclass(frozen=True)
class Workload:
    resolved: ResolvedLayout
    costs: ShapeCosts
    ranks: dict[tuple[str, int], RankWork]
    """(building, rank) -> work; every pattern's rank r in building k shares it."""
    p2p_bytes: float
    """Activation bytes of one pipeline crossing one boundary (b s h beta)."""
    gather_ratio: float
    """Bytes of parameters gathered per byte of gradient (beta / gradient bytes)."""

    def rank(self, building: str, rank: int) -> RankWork:
        return self.ranks[building, rank]


def _scaled(times: OpTimes, factor: float) -> OpTimes:
    return OpTimes(times.forward_s * factor, times.backward_input_s * factor, times.backward_weight_s * factor)


def _plus(a: OpTimes, b: OpTimes) -> OpTimes:
    return OpTimes(a.forward_s + b.forward_s, a.backward_input_s + b.backward_input_s,
                   a.backward_weight_s + b.backward_weight_s)


def _stage_work(instance: Instance, resolved: ResolvedLayout, costs: ShapeCosts, gpu: GPUCosts,
                stage: int, layers: int, ag_layer_s: float) -> StageWork:
    last = resolved.actions.stages - 1
    ops = _scaled(gpu.layer, layers)
    grad = layers * costs.grad_bytes_per_layer_per_cell
    if stage == 0:
        ops = _plus(ops, gpu.first_stage_extra)
        grad += costs.grad_bytes_fixed_first
    if stage == last:
        ops = _plus(ops, gpu.last_stage_extra)
        grad += costs.grad_bytes_fixed_last
    return StageWork(layers, ops, _scaled(gpu.tp_cp_comm, layers), _scaled(gpu.ep_comm, layers), layers * ag_layer_s,
                     grad)


def build_workload(instance: Instance, resolved: ResolvedLayout) -> Workload:
    shape, variant, actions = resolved.layout.shape, resolved.variant, resolved.actions
    costs = build_shape_costs(instance, shape, [variant])
    training = instance.training
    beta = training.bytes_per_element
    ranks: dict[tuple[str, int], RankWork] = {}
    for r, placement in enumerate(resolved.stages):
        chunk_layers = placement.layers // actions.chunks
        for name in placement.cells_per_building:
            building = instance.topology.building(name)
            gpu_type = instance.gpu_types[building.gpu_type]
            gpu = costs.per_gpu_type[building.gpu_type]
            stages = {s: _stage_work(instance, resolved, costs, gpu, s, chunk_layers,
                                     gpu.gather_s_per_layer[variant])
                      for s in actions.stages_of(r)}
            ranks[name, r] = RankWork(
                building=name, stages=stages, send_s=gpu.p2p_intra_s if shape.pp > 1 else 0.0,
                dp_layer_s=gpu.dp_intra_s_per_layer[variant],
                optimizer_s=placement.layers * gpu.optimizer_s_per_layer[variant],
                nic_byte_s=AlphaBetaModel.from_gpu(gpu_type).bandwidth["fabric"],
            )
    phases = dp_cross_phases(variant, shape.microbatches, training.grad_bytes_per_param, beta)
    return Workload(resolved, costs, ranks, costs.p2p_bytes, phases.gather_bytes_per_grad_byte)
