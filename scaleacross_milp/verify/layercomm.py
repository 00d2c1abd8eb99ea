"""TP+CP and EP communication of one average layer, split by kind and by forward / backward-input.

costmodel's GPUCosts gives only the total (`layer_comm_s`); the replay reports TP/CP and EP separately, so
this prices them with the same costmodel.comm formulas and arguments as costmodel/build.py (a test checks
that the parts add up to layer_comm_s). EP all-to-alls run only in MoE layers: the average layer carries
moe_share x the per-MoE-layer time, as in the costmodel.
"""

from __future__ import annotations

from dataclasses import dataclass

from scaleacross_milp.costmodel import compute
from scaleacross_milp.costmodel.comm import AlphaBetaModel, cp_comm, ep_comm, group_tier, tp_comm
from scaleacross_milp.costmodel.costs import OpTimes
from scaleacross_milp.spec.hardware import GPUType
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.training import Recompute


@dataclass(frozen=True)
class LayerCommSplit:
    tp_cp: OpTimes
    ep: OpTimes


def layer_comm_split(instance: Instance, shape: Shape, gpu: GPUType) -> LayerCommSplit:
    model, training = instance.model_spec, instance.training
    s, b, beta = training.seq_len, shape.micro_batch, training.bytes_per_element
    split, tokens = shape.tp * shape.cp, shape.micro_batch * training.seq_len
    comm = AlphaBetaModel.from_gpu(gpu)
    tier = group_tier(split, gpu)
    tp = tp_comm(comm, tier, shape.tp, tokens * model.hidden * beta / shape.cp, training.recompute is Recompute.full)
    core = compute.flops_time_s(compute.attention_core_flops(model, tokens, s) / split, gpu, training.precision,
                                model.hidden, shape.tp)
    kv_block = b * (s / shape.cp) * 2 * model.kv_heads * model.attention_head_dim * beta / shape.tp
    cp = cp_comm(comm, tier, shape.cp, kv_block, core, 2 * core)
    ep_f = ep_b = 0.0
    moe_share = len(model.moe_layer_indices()) / model.layers
    if moe_share and shape.ep > 1 and model.moe is not None:
        dispatch = tokens * model.moe.top_k * model.hidden * beta / split
        ep = ep_comm(comm, group_tier(shape.cell_gpus, gpu), shape.ep, dispatch)
        ep_f, ep_b = moe_share * ep.forward_s, moe_share * ep.backward_input_s
    return LayerCommSplit(
        tp_cp=OpTimes(tp.forward_s + cp.forward_s, tp.backward_input_s + cp.backward_input_s, 0.0),
        ep=OpTimes(ep_f, ep_b, 0.0),
    )
