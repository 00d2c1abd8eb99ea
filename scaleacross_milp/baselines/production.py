"""The production baseline: the layout a large operator runs without a scale-across optimiser, as Llama 3 was trained.

  DP outermost   every building holds whole pipelines (ranks filled into buildings in instance order), so only
                 data-parallel synchronisation crosses buildings
  DP mode        FSDP without reshard after forward (fsdp-no-reshard), as Llama 3 ran; Megatron's distributed
                 optimizer (zero1) when the instance's training sets overlap_param_gather, the Megatron-core option
                 only that mode uses (`production_dp_mode`). Without the option zero1 moves the same bytes over the
                 same links as fsdp-no-reshard but gathers after the optimizer step, exposed, and reduces behind the
                 backward only under overlap_grad_reduce, with the gradients held whole: never faster, never smaller
  schedule       interleaved 1F1B with 2 chunks per rank; 1F1B when the MILP's rule (costmodel.schedule
                 .schedule_options: microbatches a multiple of pp) or the layers (a multiple of 2 per rank) forbid it
  transports     each link's first ECMP transport (spraying only on a link without one)
  shape          TP = the largest divisor of the heads <= min(8, smallest NVLink domain); CP 1; micro-batch 1;
                 EP = the largest divisor of the experts <= 8 for MoE models (an assumption: Llama 3 is dense; 8
                 is one expert group per HGX node, as DeepSeek-V3-class runs shard experts); PP the smallest of
                 milp.shapes.pipeline_degrees whose layout fits memory (verify.layout.resolve's infeasible list);
                 DP the largest the batch allows (dp x 1 x microbatches = batch, dp a multiple of EP) that the
                 buildings hold as whole pipelines
"""

from __future__ import annotations

from collections.abc import Callable

from scaleacross_milp.baselines.pricing import ecmp_transports, feasible, priced
from scaleacross_milp.baselines.result import BaselineResult, Kind
from scaleacross_milp.costmodel.schedule import schedule_options
from scaleacross_milp.milp.shapes import pipeline_degrees
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout, PipelineRoute, Shape, StagePlacement
from scaleacross_milp.spec.search import DPMode, Schedule

MAX_TP = 8
"""TP inside one HGX node."""
MAX_EP = 8
"""Expert parallelism of the production and framework baselines (assumption, module docstring)."""
INTERLEAVE = 2


def largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def tp_degree(instance: Instance) -> int:
    """The largest divisor of the heads <= min(8, the smallest NVLink domain of the buildings)."""
    domain = min(instance.gpu_type_of(b.name).nvlink_domain_gpus for b in instance.topology.buildings)
    return largest_divisor(instance.model_spec.heads, min(MAX_TP, domain))


def ep_degree(instance: Instance) -> int:
    moe = instance.model_spec.moe
    return largest_divisor(moe.experts, MAX_EP) if moe else 1


def largest_dp(batch: int, ep: int, cells: int) -> int | None:
    """The largest d dividing `batch` (micro-batch 1), a multiple of ep, with d / ep <= `cells` cells per stage."""
    fits = [d for d in range(ep, min(batch, cells * ep) + 1, ep) if batch % d == 0]
    return max(fits) if fits else None


def even_split(layers: int, pp: int, chunks: int) -> list[int] | None:
    """Layers per stage as even as possible, each a positive multiple of `chunks` (earlier stages take the extra
    units); None when the layers do not split."""
    if layers % chunks or layers // chunks < pp:
        return None
    units = layers // chunks
    return [(units // pp + (r < units % pp)) * chunks for r in range(pp)]


def interleaved_split(instance: Instance, shape: Shape, notes: list[str]) -> tuple[Schedule, int, list[int]]:
    """Interleaved 1F1B (v = 2) when it applies to the shape and the layers split into 2 chunks per rank, else
    1F1B (noted)."""
    layers = instance.model_spec.layers
    if shape.pp == 1:
        return Schedule.one_f_one_b, 1, [layers]
    options = schedule_options([Schedule.interleaved], [INTERLEAVE], shape.pp, shape.microbatches)
    split = even_split(layers, shape.pp, INTERLEAVE)
    if options and split is not None:
        return Schedule.interleaved, INTERLEAVE, split
    why = (f"microbatches ({shape.microbatches}) are not a multiple of pp ({shape.pp})" if not options else
           f"{layers} layers do not split into {INTERLEAVE} chunks on each of {shape.pp} ranks")
    notes.append(f"interleaved 1F1B does not apply ({why}): 1F1B")
    return Schedule.one_f_one_b, 1, even_split(layers, shape.pp, 1)


Build = Callable[[Instance, Shape, list[str]], Layout]
Room = Callable[[Instance, int, int], int]
"""(instance, cell GPUs, pp) -> stage cells per stage the buildings hold under a baseline's placement rule."""


def smallest_fitting(instance: Instance, room: Room, build: Build, notes: list[str]) -> Layout:
    """The layout `build` makes for the smallest PP degree (milp.shapes.pipeline_degrees) whose shape (TP, EP as
    above, CP 1, micro-batch 1, DP the largest the batch and `room` allow) the hardware can run."""
    tp, ep, batch = tp_degree(instance), ep_degree(instance), instance.training.batch_sequences
    skipped = []
    for pp in pipeline_degrees(instance):
        dp = largest_dp(batch, ep, room(instance, tp * ep, pp))
        if dp is None:
            skipped.append(f"PP {pp}: no DP fits the buildings")
            continue
        shape = Shape(tp=tp, ep=ep, pp=pp, dp=dp, micro_batch=1, microbatches=batch // dp)
        tried: list[str] = []
        layout = build(instance, shape, tried)
        if feasible(instance, layout):
            notes += tried + ([f"smaller PP degrees do not fit: {'; '.join(skipped)}"] if skipped else [])
            return layout.model_copy(update={"transports": ecmp_transports(instance, notes)})
        skipped.append(f"PP {pp} (DP {dp}): does not fit memory")
    raise InputError(f"no PP degree of {pipeline_degrees(instance)} fits: {'; '.join(skipped)}")


def whole_pipelines_room(instance: Instance, cell_gpus: int, pp: int) -> int:
    """Whole pipelines (pp cells of `cell_gpus` GPUs) the buildings hold: sum_k floor(G_k / (cell_gpus pp))."""
    return sum(b.gpus // (cell_gpus * pp) for b in instance.topology.buildings)


def production_dp_mode(instance: Instance) -> DPMode:
    """zero1 when training.overlap_param_gather is on (a Megatron job with its distributed optimizer), else
    fsdp-no-reshard (module docstring)."""
    return DPMode.zero1 if instance.training.overlap_param_gather else DPMode.fsdp_no_reshard


def production_layout(instance: Instance, shape: Shape, notes: list[str]) -> Layout:
    """DP outermost: building k (instance order) holds min(its whole pipelines, those left) cells of every stage."""
    schedule, chunks, split = interleaved_split(instance, shape, notes)
    left, cells = shape.cells_per_stage, {}
    for building in instance.topology.buildings:
        take = min(left, building.gpus // (shape.cell_gpus * shape.pp))
        if take:
            cells[building.name] = take
            left -= take
    stages = [StagePlacement(stage=j, layers=n, cells_per_building=cells) for j, n in enumerate(split)]
    routes = [PipelineRoute(buildings=[k] * shape.pp, pipelines=n * shape.ep) for k, n in cells.items()]
    return Layout(instance=instance.name, shape=shape, schedule=schedule, interleave=chunks,
                  dp_mode=production_dp_mode(instance), stages=stages, pipelines=routes)


def production(instance: Instance) -> BaselineResult:
    notes: list[str] = []
    layout = smallest_fitting(instance, whole_pipelines_room, production_layout, notes)
    return priced(Kind.production, instance, layout, notes)
