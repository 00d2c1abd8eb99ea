"""Per-shape cost tables: the numbers the MILP and the verifier read, built by `costmodel.build`.

All times in seconds, all sizes in bytes; "per GPU" means one GPU of the stage cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode

if TYPE_CHECKING:
    from scaleacross_milp.costmodel.dp import IntraDPSync


@dataclass(frozen=True)
class DPVariant:
    """A DP mode with its replica count: HSDP shards over dp*cp/replicas ranks and replicates `replicas` times
    (a stage's shard groups formed from its cells building by building, so one may straddle two buildings); every
    other mode has replicas == 1."""

    mode: DPMode
    replicas: int = 1

    def label(self) -> str:
        return f"{self.mode.value} x{self.replicas}" if self.mode is DPMode.hsdp else self.mode.value


@dataclass(frozen=True)
class OpTimes:
    """Forward, backward-input and backward-weight time of some work for one microbatch on one GPU."""

    forward_s: float
    backward_input_s: float
    backward_weight_s: float

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_input_s + self.backward_weight_s

    def of(self, kind: str) -> float:
        """Seconds of one op of `kind` (`costmodel.actions`: F, I, W, or B = I + W)."""
        if kind == "B":
            return self.backward_input_s + self.backward_weight_s
        return {"F": self.forward_s, "I": self.backward_input_s, "W": self.backward_weight_s}[kind]


@dataclass(frozen=True)
class FixedParamCosts:
    """Per-step DP costs on one GPU, under each variant, of parameters a stage holds whatever its layers (the
    embedding on virtual stage 0, the LM head on the last virtual stage), priced with the layers' formulas at
    their size (V*h / tp): their gradients reduced inside the building as one collective of their own, one
    all-gather of their parameters (FSDP / HSDP / zero1; 0 for DDP) and their optimizer step."""

    dp_sync_s: dict[DPVariant, float]
    gather_s: dict[DPVariant, float]
    optimizer_s: dict[DPVariant, float]


@dataclass(frozen=True)
class GPUCosts:
    """One shape priced in one building: its GPU type's compute and communication, and its fabric's DP terms."""

    layer: OpTimes
    """One average transformer layer (dense/MoE mix weighted by the model's layer counts), one microbatch, per
    GPU: compute incl. recomputation plus non-overlapped TP/CP/EP communication inside the building (less
    `ep_hidden`: the steady state's merged pairs)."""
    tp_cp_comm: OpTimes
    """The part of `layer` that is TP + CP communication (exposed, per average layer)."""
    ep_comm: OpTimes
    """The EP all-to-alls of the average layer (MoE layers' share), exposed but for `ep_hidden`."""
    ep_hidden: OpTimes
    """What the steady state's merged forward-backward pairs hide of `ep_comm` under
    Training.overlap_moe_expert_parallel_comm (`costmodel.comm.ep_hidden`; zero otherwise): `layer` excludes it, as
    the pairs run, and an op outside a pair (a warm-up forward, a cool-down backward) takes it on top."""
    first_stage_extra: OpTimes
    """Embedding work on pipeline stage 0, one microbatch."""
    last_stage_extra: OpTimes
    """LM head + loss on the last stage, one microbatch."""
    p2p_intra_s: float
    """One stage-boundary activation send of one microbatch inside the building (one direction)."""
    hbm_usable_bytes: float
    optimizer_s_per_layer: dict[DPVariant, float]
    """Optimizer step time per layer held (memory-bound over the states this GPU owns) under each variant."""
    gather_s_per_layer: dict[DPVariant, float]
    """One all-gather of one layer's parameters over the shard group inside the building (FSDP / HSDP / zero1; 0 for
    DDP): what each forward and backward pass waits for under reshard-after-forward, and what zero1 gathers once per
    step."""
    dp_intra: dict[DPVariant, IntraDPSync]
    """Intra-building DP synchronisation per step under each variant that is not hidden behind compute, as a
    function of a stage's layers (`IntraDPSync.stage_s`: one collective over a
    chunk's whole gradient buffer under DDP / fsdp-no-reshard / zero1, per layer under FSDP / HSDP; hierarchical
    algorithms; the building's pods and oversubscription)."""
    embedding_dp: FixedParamCosts
    """DP sync, all-gather and optimizer step of the embedding (virtual stage 0)."""
    head_dp: FixedParamCosts
    """The same for the LM head (the last virtual stage)."""

    @property
    def layer_comm_s(self) -> float:
        """The part of layer.total_s that is TP + CP + EP communication (for the breakdown)."""
        return self.tp_cp_comm.total_s + self.ep_comm.total_s - self.ep_hidden.total_s


@dataclass(frozen=True)
class ShapeCosts:
    shape: Shape
    per_class: dict[str, GPUCosts]
    """The shape priced in each pricing class of buildings (`costmodel.build.InstanceTables.classes`), keyed by the
    class's first building."""
    building_class: dict[str, str]
    """Each building's class key."""
    p2p_bytes: float
    """Activation bytes of one microbatch of one pipeline crossing a stage boundary, one direction
    (b*s*h*beta)."""
    activation_bytes_per_layer: float
    """Activation bytes one GPU keeps per layer per in-flight microbatch (recompute mode applied)."""
    layer_state_bytes: dict[DPVariant, float]
    """Weights + gradients + optimizer states per GPU per layer under each variant (FSDP shards over dp*cp
    ranks; HSDP over dp*cp/replicas; zero1 shards only the optimizer states), plus the transient unsharded buffers
    FSDP needs."""
    first_stage_fixed_bytes: dict[DPVariant, float]
    last_stage_fixed_bytes: dict[DPVariant, float]
    """Embedding / LM-head states (+ logits buffers on the last stage) per GPU under each mode."""
    grad_bytes_per_layer_per_cell: float
    """Bytes of one full copy of one layer's gradients held by a stage cell after reduction inside the cell
    (dense params once + expert params once): what cross-building DP synchronisation moves per layer."""
    grad_bytes_fixed_first: float
    grad_bytes_fixed_last: float
    """The same for the embedding (stage 0) and LM head (last stage)."""
    model_flops_per_iteration: float
    """6 * params-active * tokens + attention, recompute not counted: the MFU numerator."""
    stage_fixed_bytes: dict[DPVariant, float] = field(default_factory=dict)
    """Per-GPU bytes every stage holds whatever its layer count: FSDP/HSDP transient unsharded buffers
    (2 layers of weights + 1 of gradients); 0 for DDP, fsdp-no-reshard and zero1."""

    def building(self, name: str) -> GPUCosts:
        """The shape priced in building `name` (its class's entry)."""
        return self.per_class[self.building_class[name]]
