"""A training layout (the plan) and what the optimiser reports about it."""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from scaleacross_milp.spec.base import Contract
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.topology import Transport


class Shape(Contract):
    """Parallelism degrees. GPUs used = tp * cp * pp * dp; EP groups are formed from `ep` DP replicas.

    A *stage cell* is the tp*cp*ep GPUs holding one pipeline stage for `ep` replicas; it never spans buildings.
    """

    tp: PositiveInt
    cp: PositiveInt = 1
    ep: PositiveInt = 1
    pp: PositiveInt
    dp: PositiveInt
    micro_batch: PositiveInt
    microbatches: PositiveInt

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def cell_gpus(self) -> int:
        return self.tp * self.cp * self.ep

    @property
    def cells_per_stage(self) -> int:
        return self.dp // self.ep

    def label(self) -> str:
        return (
            f"TP{self.tp} CP{self.cp} EP{self.ep} PP{self.pp} DP{self.dp} "
            f"mb{self.micro_batch}x{self.microbatches}"
        )


class StagePlacement(Contract):
    stage: NonNegativeInt
    layers: PositiveInt
    cells_per_building: dict[str, PositiveInt] = Field(
        description="stage cells (tp*cp*ep GPUs each) of this stage in each building"
    )


class PipelineRoute(Contract):
    """`pipelines` pipelines whose stage i sits in `buildings[i]`."""

    buildings: list[str]
    pipelines: PositiveInt


class LinkUse(Contract):
    a: str
    b: str
    transport: Transport
    efficiency: float = Field(description="effective fraction of capacity: load balance x loss goodput")
    pp_gbyte: NonNegativeFloat = Field(description="pipeline activations+gradients per iteration, one direction")
    dp_gbyte: NonNegativeFloat = Field(description="data-parallel synchronisation per iteration, one direction")
    busy_s: NonNegativeFloat = Field(description="time the link needs to carry its traffic per iteration")


class Breakdown(Contract):
    """Iteration time decomposed (seconds); the parts add up to `iteration_s`."""

    compute_s: NonNegativeFloat
    exposed_tp_ep_s: NonNegativeFloat = Field(description="TP / CP / EP collectives inside the building")
    bubble_s: NonNegativeFloat
    exposed_pp_s: NonNegativeFloat
    exposed_dp_s: NonNegativeFloat
    optimizer_s: NonNegativeFloat


class Prediction(Contract):
    iteration_s: NonNegativeFloat
    breakdown: Breakdown
    tokens_per_s: NonNegativeFloat
    mfu: NonNegativeFloat = Field(description="model FLOPs utilisation vs dense peak, recompute not counted")


class SolveStats(Contract):
    status: str
    incumbent_s: float | None
    bound_s: float | None
    rel_gap: float | None
    wall_s: NonNegativeFloat
    build_s: NonNegativeFloat = Field(0.0, description="screening shapes and building their Pyomo models")
    solver_s: NonNegativeFloat = Field(0.0, description="time inside HiGHS over all shapes")
    shapes_total: NonNegativeInt
    shapes_solved: NonNegativeInt
    shapes_pruned: NonNegativeInt
    variables: NonNegativeInt
    binaries: NonNegativeInt
    integers: NonNegativeInt
    constraints: NonNegativeInt


class Plan(Contract):
    instance: str
    shape: Shape
    schedule: Schedule
    interleave: PositiveInt = 1
    dp_mode: DPMode
    hsdp_replicas: PositiveInt | None = Field(None, description="HSDP replica groups (shard group = dp/this)")
    stages: list[StagePlacement]
    pipelines: list[PipelineRoute]
    links: list[LinkUse]
    prediction: Prediction
    solve: SolveStats
    explanation: list[str]
