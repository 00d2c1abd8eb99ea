"""The volumes a shape moves across buildings, from its context: gradient GB per stage cell, the gather and reduce
volumes of each DP variant (in gradient-sized units, and when they move), the most one crossing unit carries.
Read by the formulation (`formulation.traffic`, `formulation.build`) and by the analytical bounds (`bounds`) alike."""

from __future__ import annotations

from scaleacross_milp.costmodel.dp import CrossPhases, dp_cross_phases, straddle_phases
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.spec.search import DPMode, Schedule

GB = 1e9


def gather_passes(mode: DPMode) -> int:
    """All-gathers of a stage's parameters per microbatch: forward and backward under reshard-after-forward."""
    return 2 if mode in (DPMode.fsdp, DPMode.hsdp) else 0



def layer_grad_gb(ctx: ShapeContext) -> float:
    """g: gradient GB one cell holds per layer."""
    return ctx.costs.grad_bytes_per_layer_per_cell / GB


def fixed_grad_gb(ctx: ShapeContext, j: int, option: ScheduleOption | None = None) -> float:
    """e_j: gradient GB one cell of stage j holds whatever its layers under `option` (embedding on stage 0, LM
    head on `ShapeContext.head_stage`); without an option, the largest over the shape's options."""
    if option is None:
        return max(fixed_grad_gb(ctx, j, o) for o in ctx.options)
    costs = ctx.costs
    return ((costs.grad_bytes_fixed_first if j == 0 else 0.0)
            + (costs.grad_bytes_fixed_last if j == ctx.head_stage(option) else 0.0)) / GB


def stage_grad_gb(ctx: ShapeContext, j: int, layers: float | None = None,
                  option: ScheduleOption | None = None) -> float:
    """S_j = g n + e_j: gradient GB one cell holds for stage j with n = `layers` (default the average L / p, whose
    sum over the stages is exact since sum_j n[j] = L), e_j under `option` (`fixed_grad_gb`)."""
    n = ctx.instance.model_spec.layers / ctx.shape.pp if layers is None else layers
    return n * layer_grad_gb(ctx) + fixed_grad_gb(ctx, j, option)


def cross_phases(ctx: ShapeContext, v: int) -> CrossPhases:
    """The cross-building phases of DP variant v (`costmodel.dp.CrossPhases`)."""
    training = ctx.instance.training
    return dp_cross_phases(ctx.variants[v], ctx.shape.microbatches, training.grad_bytes_per_param,
                           training.bytes_per_element, training.overlap_param_gather)


def cross_volumes(ctx: ShapeContext, v: int) -> tuple[float, float]:
    """(gather, reduce) volumes of DP variant v across buildings per step, in gradient-sized units."""
    phases = cross_phases(ctx, v)
    return phases.gather_phases * phases.gather_bytes_per_grad_byte, float(phases.reduce_phases)


def timed_volumes(ctx: ShapeContext, v: int) -> tuple[float, float, float]:
    """(G_end, G_mb, G_1) of DP variant v in gradient-sized units: the gathers left at the end of the step (DDP /
    HSDP's gradient all-gather), FSDP's parameter gathers per microbatch (on the links in steady state), and the
    one gather before the first forward (FSDP modes: nothing to prefetch it behind on stage 0)."""
    phases = cross_phases(ctx, v)
    ratio = phases.gather_bytes_per_grad_byte
    return (phases.end_gather_phases * ratio, phases.gathers_per_microbatch * ratio,
            ratio if phases.params_before_ops else 0.0)


def straddle_volumes(ctx: ShapeContext) -> tuple[float, float, float]:
    """(per step, per microbatch, first) gathers of an HSDP shard group straddling two buildings, in units of one
    gradient-sized copy of the group's parameters (`costmodel.dp.straddle_phases`): building s holding a of the
    group's g cells sends a / g of that copy to the other building at each gather."""
    training = ctx.instance.training
    phases = straddle_phases(ctx.shape.microbatches, training.grad_bytes_per_param, training.bytes_per_element)
    ratio = phases.gather_bytes_per_grad_byte
    return phases.grad_copies, phases.gathers_per_microbatch * ratio, ratio


def gathers_every_pass(ctx: ShapeContext, v: int) -> bool:
    """True when variant v gathers parameters across buildings before every pass: FSDP's gathers, or a straddling
    HSDP group's."""
    return bool(timed_volumes(ctx, v)[1]) or v in shard_group_cells(ctx)


def gathers_every_cycle(ctx: ShapeContext) -> bool:
    """True when parameters can cross buildings every microbatch under some variant (`gathers_every_pass`)."""
    return any(gathers_every_pass(ctx, v) for v in range(len(ctx.variants)))


def shard_group_cells(ctx: ShapeContext) -> dict[int, int]:
    """Variant index -> cells per HSDP shard group (D / r), for the HSDP variants whose groups hold more than one
    cell (a one-cell group never straddles buildings)."""
    cells = ctx.shape.cells_per_stage
    return {v: cells // var.replicas for v, var in enumerate(ctx.variants)
            if var.mode is DPMode.hsdp and cells // var.replicas > 1}


def drain_share(option: ScheduleOption) -> float:
    """kappa_o: the share of stage 0's backward for one microbatch that runs after rank 1's last backward op ends.
    Under GPipe and 1F1B rank 0's last backward B(m - 1) waits on rank 1's B(m - 1) (its gradient), under
    interleaving with v chunks rank 0's last chunk-op B(virtual stage 0) waits on rank 1's B(virtual stage 1), a
    chunk of 1 / v of the stage: kappa = 1 and 1 / v. The zero-bubble schedules end on deferred W ops of either
    rank: kappa = 0."""
    if option.schedule in (Schedule.gpipe, Schedule.one_f_one_b):
        return 1.0
    return 1.0 / option.chunks if option.schedule is Schedule.interleaved else 0.0


def drain_layer_s(ctx: ShapeContext) -> float:
    """b: one layer's backward (input + weight) for one microbatch on the shape's fastest GPU type."""
    return min(ctx.gpu(k).layer.backward_input_s + ctx.gpu(k).layer.backward_weight_s for k in ctx.buildings)


def pipeline_unit_gb(ctx: ShapeContext) -> float:
    """Pipeline GB per microbatch one crossing unit moves at most, over the shape's options. A unit is a cell
    crossing a stage boundary: it opens g = cell_gpus x queue pairs connections (its pipelines x TP x CP) and sends
    A chi_max GB per microbatch (A: one cell's activations, chi_max: the most crossings per boundary, `traffic`).
    A stage j split x_s / x_t between two buildings exchanges DP state over
    `costmodel.dp.exchange_connections`(x_s, x_t) g >= max(x_s, x_t) g connections and moves
    S_j (G_v x_s + Q_v x_t) / D <= max(x_s, x_t) S_j (G_v + Q_v) / D GB: at most S_j (G_v + Q_v) / D per g
    connections, S_j with the stage's own layers."""
    chi = max(max(o.boundary_crossings, o.wrap_crossings) for o in ctx.options)
    return ctx.costs.p2p_bytes * ctx.shape.ep / GB * chi
