"""Data-parallel synchronisation: a stage's exposed intra-building time, and what crosses buildings.

Intra-building (hierarchical inside one building): a collective over the building's DP members runs
reduce-scatter / all-gather inside each pod at NIC bandwidth B and the cross-pod part (an all-reduce of the
1/n_pod shard over the pods) at B / oversubscription, when the group spans pods.

Exposure (overlap assumptions), for a stage of n layers in c model chunks (c = 1, or the schedule's chunks
per rank), per-GPU gradient bytes per layer d (dense) and e (experts), and t(D, E) = one collective over D
dense and E expert bytes in the stage's building (`dp_intra_collective_s`):
  DDP            Megatron-core reduces each chunk's whole contiguous gradient buffer: c t(n d / c, n e / c), as
                 ONE all-reduce after the last backward with overlap_grad_reduce off (its default); with it on the
                 same time is spread over the chunk's layers as the last backward finalises them (its buckets,
                 40M+ parameters each, are priced as the one collective)
  fsdp-no-reshard the same with the final gradient reduce-scatter
  zero1          (Megatron's distributed optimizer) the same reduce-scatter of each chunk's whole buffer as
                 fsdp-no-reshard, timed like DDP; then the optimizer step on the 1/N shard and one all-gather of the
                 updated 16-bit parameters (GPUCosts.gather_s_per_layer per layer, FixedParamCosts.gather_s for the
                 embedding and head): after the step, exposed, or under Training.overlap_param_gather behind the
                 next forward (`params_gathered_at_end`, `start_gather_terms`)
  FSDP (reshard) per-layer units (PyTorch FSDP wraps each layer): n t(d, e); parameter re-gathers
                 (GPUCosts.gather_s_per_layer, two per microbatch) are prefetched behind compute, which the
                 MILP bounds by the comm stream
  HSDP           per-layer units, the reduce-scatter over the shard group (inside the building): n t(d, e);
                 the cross-replica all-reduce crosses buildings and is priced by the MILP with CrossPhases
When the reduction runs (`grad_reduce_overlaps`): the FSDP modes (fsdp, fsdp-no-reshard, HSDP: PyTorch FSDP)
reduce-scatter each unit in its post-backward hook, behind the rest of the backward, always; DDP and zero1
(Megatron-core's) reduce bucket by bucket behind the chunk's last backward only under Training.overlap_grad_reduce,
else after the rank's last backward (Megatron-core's default; PyTorch DDP always overlaps: set the option for it).
When zero1's parameter all-gather runs (`params_gathered_at_end`): after the rank's optimizer step, every chunk's in
turn, exposed (Megatron-core's default); under Training.overlap_param_gather bucket by bucket behind the next
iteration's forward, priced in the iteration as gathers before each chunk's first forward, as fsdp-no-reshard's
are, whose first forward waits only for the first bucket and for what the gather stream falls behind
(`bucketed_gather_wait_s`).
The embedding and LM head are reduced in a collective of their own, t(V h g / tp, 0), on top of the stage's
(GPUCosts.embedding_dp / head_dp, built with `IntraDPSync.collective_s`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from scaleacross_milp.calibration.collective import Collective, CollectiveModel, Tier
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.topology import Building
from scaleacross_milp.spec.training import Training


@dataclass(frozen=True)
class CrossPhases:
    """Cross-building DP traffic per step, in units of one gradient copy (grad_bytes_per_layer_per_cell).

    bytes crossing per step = (gather_phases * gather_bytes_per_grad_byte + reduce_phases) x gradient bytes
    (each phase being a ring reduce-scatter or all-gather over the buildings' replicas).
      DDP / HSDP       1 all-gather of gradients (ratio 1) + 1 reduce-scatter   (= one all-reduce)
      fsdp-no-reshard  1 all-gather of beta-byte params (ratio beta/grad_bytes) + 1 reduce-scatter of grads
      fsdp             2*m all-gathers of params (forward and backward of every microbatch) + 1 reduce-scatter
      zero1            1 all-gather of beta-byte params + 1 reduce-scatter of grads (fsdp-no-reshard's volume)
    When they happen: the reduce-scatter and DDP / HSDP's gradient all-gather at the end of the step, after the
    backward; zero1's parameter all-gather at the end too (after the optimizer step), or under
    overlap_param_gather before the first forward, as fsdp-no-reshard's; FSDP's parameter all-gathers before the
    op that needs them (`params_before_ops`), prefetched behind compute: `gathers_per_microbatch` of them per
    microbatch (2 under reshard-after-forward, 0 without reshard, whose one gather per stage precedes its first
    forward).
    """

    gather_phases: int
    gather_bytes_per_grad_byte: float
    reduce_phases: int
    params_before_ops: bool = False
    gathers_per_microbatch: int = 0

    @property
    def end_gather_phases(self) -> int:
        """Gather phases left at the end of the step (the all-reduce's all-gather; none for FSDP's parameters)."""
        return 0 if self.params_before_ops else self.gather_phases

    @property
    def end_volume(self) -> float:
        """Gradient copies crossing at the end of the step: the gathers left then and the reduce phases."""
        return self.end_gather_phases * self.gather_bytes_per_grad_byte + self.reduce_phases

    @property
    def grad_copies(self) -> float:
        """Total bytes moved per phase-unit, as multiples of the gradient bytes."""
        return self.gather_phases * self.gather_bytes_per_grad_byte + self.reduce_phases


def exchange_connections(cells_from: int, cells_to: int) -> int:
    """GPU-to-GPU connections per DP group (one group per GPU position of a cell) that a DP exchange between two
    buildings opens: the part of the state one building sends is split into equal slices over its `cells_from`
    members and received in equal slices by the other's `cells_to` members, and every pair whose slices overlap
    connects: cells_from + cells_to - gcd(cells_from, cells_to) >= max(cells_from, cells_to). The replay opens
    these connections; the MILP prices a load as made of units of one cell's connections
    (`milp.volumes.pipeline_unit_gb`), never more than these."""
    return cells_from + cells_to - math.gcd(cells_from, cells_to)


def dp_cross_phases(
    variant: DPVariant, microbatches: int, grad_bytes_per_param: float = 4.0, bytes_per_element: float = 2.0,
    overlap_param_gather: bool = False,
) -> CrossPhases:
    """Phases of DP synchronisation that cross buildings per step (see CrossPhases; `overlap_param_gather`:
    Training.overlap_param_gather, which moves zero1's parameter gather before the first forward)."""
    param_ratio = bytes_per_element / grad_bytes_per_param
    if variant.mode in (DPMode.ddp, DPMode.hsdp):
        return CrossPhases(1, 1.0, 1)
    if variant.mode is DPMode.zero1:
        return CrossPhases(1, param_ratio, 1, params_before_ops=overlap_param_gather)
    if variant.mode is DPMode.fsdp_no_reshard:
        return CrossPhases(1, param_ratio, 1, params_before_ops=True)
    return CrossPhases(2 * microbatches, param_ratio, 1, params_before_ops=True, gathers_per_microbatch=2)


def straddle_phases(microbatches: int, grad_bytes_per_param: float = 4.0, bytes_per_element: float = 2.0
                    ) -> CrossPhases:
    """Phases an HSDP shard group that straddles two buildings adds across them per step (the replay forms a stage's
    shard groups from its cells building by building, so a building whose cells are not a multiple of the group
    shares one): its parameter all-gathers before every forward and backward, as FSDP's (`dp_cross_phases`); its
    gradients cross in HSDP's all-reduce over the buildings, which covers every cell already (no reduce phase)."""
    return replace(dp_cross_phases(DPVariant(DPMode.fsdp), microbatches, grad_bytes_per_param, bytes_per_element),
                   reduce_phases=0)


def grad_reduce_overlaps(training: Training, variant: DPVariant) -> bool:
    """True when a chunk's gradient reduction runs behind its last backward (module docstring): the FSDP modes
    always, DDP and zero1 under Training.overlap_grad_reduce."""
    return variant.mode not in (DPMode.ddp, DPMode.zero1) or training.overlap_grad_reduce


def params_gathered_at_end(training: Training, variant: DPVariant) -> bool:
    """True when the parameter all-gather runs after the optimizer step, exposed: zero1 without
    Training.overlap_param_gather (module docstring)."""
    return variant.mode is DPMode.zero1 and not training.overlap_param_gather


def bucketed_gather_wait_s(gathers: Sequence[float], forwards: Sequence[float]) -> float:
    """How long a chunk's forward is delayed by its parameter all-gather when the gather stream fetches its layers'
    buckets one after another (a_i seconds each, from the forward's own start) and layer i's forward (f_i seconds)
    waits for its bucket: max_k (a_1 + ... + a_k - f_1 - ... - f_{k-1}). Only the first bucket waits when each
    gather is shorter than the forward before it; uniform layers give a + (n - 1) max(0, a - f)
    (`start_gather_terms`)."""
    wait = gathered = computed = 0.0
    for a, f in zip(gathers, forwards, strict=True):
        gathered += a
        wait = max(wait, gathered - computed)
        computed += f
    return wait


def params_gathered_bucketwise(training: Training, variant: DPVariant) -> bool:
    """True when a chunk's first forward waits only for its first bucket and for what the gather stream falls behind
    (`bucketed_gather_wait_s`): zero1 under Training.overlap_param_gather; the FSDP modes' gathers precede the op
    that needs them whole."""
    return variant.mode is DPMode.zero1 and training.overlap_param_gather


def start_gather_share(training: Training, variant: DPVariant, chunks: int) -> float:
    """The share of a rank's layers whose parameter gather the start waits for: its first model chunk's, 1 / chunks
    (the later chunks' gathers queue behind it on the rank's comm stream while the first microbatch's forwards run),
    the whole stage when zero1 gathers every chunk after the optimizer step (`params_gathered_at_end`)."""
    return 1.0 if params_gathered_at_end(training, variant) else 1.0 / chunks


def start_gather_terms(training: Training, variant: DPVariant, gather_s: float, forward_s: float
                       ) -> tuple[float, float]:
    """(per layer, per stage) seconds of a stage's parameter gather that the MILP's gather0 charges, for n layers of
    a = `gather_s` and f = `forward_s` each: n a when the whole gather waits (FSDP modes before the first forward,
    zero1 after the optimizer step), n max(0, a - f) + min(a, f) bucket by bucket (`params_gathered_bucketwise`:
    `bucketed_gather_wait_s` of n equal layers, a + (n - 1) max(0, a - f))."""
    if not params_gathered_bucketwise(training, variant):
        return gather_s, 0.0
    return max(0.0, gather_s - forward_s), min(gather_s, forward_s)


def hierarchical_time_s(
    comm: CollectiveModel,
    collective: Collective,
    ranks: int,
    nbytes: float,
    ranks_per_pod: int,
    oversubscription: float,
    tier: Tier = "fabric",
    ranks_per_node: int | None = None,
) -> float:
    """`collective` over `ranks` fabric ranks, hierarchical when they span pods: in-pod collective over
    min(ranks, ranks_per_pod) ranks at B (`ranks_per_node` of them per node), plus an all-reduce (reduce-scatter
    or all-gather for those collectives) of the nbytes/n_pod shard over the pods at B/oversubscription (one
    rank per node: each in-pod rank runs its own cross-pod collective)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    in_pod = max(1, min(ranks, ranks_per_pod))
    t = comm.time_s(collective, tier, in_pod, nbytes, ranks_per_node)
    pods = math.ceil(ranks / in_pod)
    if pods > 1:
        shard = nbytes / in_pod
        t += comm.time_s(collective, "fabric", pods, shard, 1) * oversubscription
    return t


@dataclass(frozen=True)
class DPRing:
    """The ranks one intra-building DP collective runs over, and what of the building's fabric it meets: its tier,
    ranks per node and per pod, and the oversubscription above the pods (1 when the ranks fit one pod)."""

    ranks: int
    tier: Tier
    ranks_per_node: int
    ranks_per_pod: int
    oversubscription: float


def dp_rings(shape: Shape, building: Building, variant: DPVariant, nvlink_domain_gpus: int = 8,
             ring_gpus: int | None = None) -> tuple[DPRing, DPRing]:
    """The (dense, expert) DP groups of one stage in `building` (`dp_intra_collective_s`): dp*cp dense and dp*cp/ep
    expert ranks (the HSDP shard group divides by replicas), capped at the DP members `ring_gpus` GPUs hold spread
    over the stages (ring_gpus // (tp*pp); default the building's GPUs; the cost tables pass the instance's largest
    building, so buildings that differ only in size price a stage's ring alike: the ranks a stage really has in a
    building follow its placement, which a per-building cap would mistake for the building's size); over NVLink
    when the group's GPUs (n*tp*pp, DP peers placed next to each other) fit one NVLink domain; over the fabric
    max(1, domain // (tp*pp)) DP peers share a node; across the building's pods (pod_gpus // (tp*pp) ranks each) at
    its oversubscription when it has pods. Two buildings whose rings are equal price every DP collective alike."""
    r = variant.replicas if variant.mode is DPMode.hsdp else 1
    slot = shape.tp * shape.pp  # GPUs of one DP x CP rank of a stage slot
    spread = ring_gpus or building.gpus
    members = max(1, spread // slot)
    ranks_per_pod = max(1, (building.pod_gpus or spread) // slot)
    rings = []
    for group in (shape.dp * shape.cp, shape.dp * shape.cp // shape.ep):
        n = min(max(1, group // r) if variant.mode is DPMode.hsdp else group, members)
        tier: Tier = "nvlink" if n * slot <= nvlink_domain_gpus else "fabric"
        per_node = max(1, min(n, nvlink_domain_gpus // slot))
        in_pod = min(n, ranks_per_pod)
        rings.append(DPRing(n, tier, per_node, in_pod, building.oversubscription if n > in_pod else 1.0))
    return rings[0], rings[1]


def dp_intra_collective_s(
    comm: CollectiveModel,
    shape: Shape,
    building: Building,
    variant: DPVariant,
    dense_grad_bytes: float,
    expert_grad_bytes: float,
    nvlink_domain_gpus: int = 8,
) -> float:
    """One intra-building DP collective (all-reduce for DDP, else reduce-scatter: zero1's too) of one GPU's
    `*_grad_bytes` (dense split over tp, experts over tp*ep) over the stage's `dp_rings` in `building`, each
    hierarchical (`hierarchical_time_s`)."""
    return rings_time_s(comm, variant, dp_rings(shape, building, variant, nvlink_domain_gpus), dense_grad_bytes,
                        expert_grad_bytes)


def rings_time_s(comm: CollectiveModel, variant: DPVariant, rings: tuple[DPRing, DPRing], dense_grad_bytes: float,
                 expert_grad_bytes: float) -> float:
    """`dp_intra_collective_s` over given (dense, expert) `rings`."""
    collective: Collective = "all_reduce" if variant.mode is DPMode.ddp else "reduce_scatter"
    return sum(hierarchical_time_s(comm, collective, ring.ranks, nbytes, ring.ranks_per_pod, ring.oversubscription,
                                   ring.tier, ring.ranks_per_node)
               for nbytes, ring in zip((dense_grad_bytes, expert_grad_bytes), rings, strict=True))


@dataclass(frozen=True, eq=False)
class IntraDPSync:
    """The exposed intra-building DP synchronisation of a stage in one building under one variant, per step, as a
    function of the stage's layers (module docstring): the one definition the MILP (through breakpoints), its
    bounds and the verifier price."""

    comm: CollectiveModel
    shape: Shape
    building: Building
    variant: DPVariant
    dense_grad_bytes_per_layer: float
    expert_grad_bytes_per_layer: float
    nvlink_domain_gpus: int
    ring_gpus: int | None = None
    """The GPUs a ring may span (`dp_rings`); None: the building's."""

    @property
    def per_layer_units(self) -> bool:
        """FSDP / HSDP reduce each layer's gradients on their own; DDP, fsdp-no-reshard and zero1 a chunk's
        buffer."""
        return self.variant.mode in (DPMode.fsdp, DPMode.hsdp)

    def collective_s(self, dense_grad_bytes: float, expert_grad_bytes: float) -> float:
        """t(D, E): one collective over D dense and E expert bytes per GPU."""
        return rings_time_s(self.comm, self.variant, self.rings, dense_grad_bytes, expert_grad_bytes)

    @cached_property
    def rings(self) -> tuple[DPRing, DPRing]:
        """The stage's `dp_rings` in its building."""
        return dp_rings(self.shape, self.building, self.variant, self.nvlink_domain_gpus, self.ring_gpus)

    @cached_property
    def layer_s(self) -> float:
        """t(d, e): the collective of one layer's gradients."""
        return self.collective_s(self.dense_grad_bytes_per_layer, self.expert_grad_bytes_per_layer)

    def stage_s(self, layers: float, chunks: int = 1) -> float:
        """n t(d, e) in per-layer units, else c t(n d / c, n e / c) (n = `layers`, c = `chunks`)."""
        if self.per_layer_units:
            return layers * self.layer_s
        share = layers / chunks
        return chunks * self.collective_s(share * self.dense_grad_bytes_per_layer,
                                          share * self.expert_grad_bytes_per_layer)


def chunk_sync_s(layers: Sequence[IntraDPSync]) -> float:
    """One model chunk holding one layer priced by each entry (same building and variant; layers of different
    kinds, e.g. dense and MoE): their sum in per-layer units, else one collective over their summed bytes."""
    first = layers[0]
    if first.per_layer_units:
        return sum(layer.layer_s for layer in layers)
    return first.collective_s(sum(layer.dense_grad_bytes_per_layer for layer in layers),
                              sum(layer.expert_grad_bytes_per_layer for layer in layers))
