"""A training layout (the plan), what the optimiser reports about it, and what the verifier measured.

`Layout` holds the decisions only (what `evaluate` prices); `Plan` extends it with the optimiser's report.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator

from scaleacross_milp.spec.base import Contract
from scaleacross_milp.spec.search import DPMode, Objective, Schedule
from scaleacross_milp.spec.topology import Transport
from scaleacross_milp.spec.training import BatchRounding


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
    def batch_sequences(self) -> int:
        """The global batch the shape runs: dp x micro_batch x microbatches sequences (training.batch_rounding
        lets it differ from the requested batch)."""
        return self.dp * self.micro_batch * self.microbatches

    def batch_factor(self, requested: int) -> float:
        """B_requested / B_run. An iteration time T times this factor is the time per `requested` sequences at
        this shape's speed (T / B_run per sequence): what ranks shapes that run different batches, as tokens/s
        would. 1 when the shape runs the requested batch."""
        return requested / self.batch_sequences

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


class Cost(Contract):
    """One iteration at the instance's prices (costmodel.price.iteration_cost): every GPU of each building the plan
    uses, idle ones included, held for the iteration time, plus the GB it sends over priced links."""

    iteration_s: NonNegativeFloat = Field(description="the iteration time priced, s")
    held_gpus: NonNegativeInt = Field(description="every GPU of the buildings the plan uses (a building it leaves "
                                                  "entirely unused is not held)")
    gpu_usd: NonNegativeFloat = Field(description="sum over used buildings of GPUs x $/GPU-hour / 3600 x "
                                                  "iteration_s, $/iteration")
    egress_gbyte: NonNegativeFloat = Field(description="GB sent over priced links per iteration, both directions")
    egress_usd: NonNegativeFloat = Field(description="sum over links of GB sent x $/GB, $/iteration")
    usd_per_iteration: NonNegativeFloat = Field(description="gpu_usd + egress_usd, $/iteration")
    usd_per_million_tokens: NonNegativeFloat = Field(description="usd_per_iteration / tokens of the batch run x 1e6, "
                                                                 "$/M tokens")


class Prediction(Contract):
    iteration_s: NonNegativeFloat
    breakdown: Breakdown
    tokens_per_s: NonNegativeFloat
    mfu: NonNegativeFloat = Field(description="model FLOPs utilisation vs dense peak, recompute not counted")
    cost: Cost | None = Field(None, description="at the predicted time, when the instance gives prices")


class SolveStats(Contract):
    status: str
    incumbent_s: float | None = Field(description="the plan's iteration time, for the batch it runs")
    bound_s: float | None = Field(description=(
        "lower bound on the iteration time at the plan's batch: no layout the search allows runs a sequence faster "
        "than bound_s / the plan's batch (shapes running other batches compared per sequence)"))
    rel_gap: float | None
    wall_s: NonNegativeFloat
    work_s: NonNegativeFloat = Field(0.0, description=(
        "the search's work in seconds of the reference machine (milp/work.py): what its budget, the time limit, "
        "counts, so that its steps do not depend on the machine's load"))
    wall_bound: bool = Field(False, description=(
        "the wall clock ran out before the work budget and ended a step: the steps taken, and the plan, then "
        "depend on the machine's speed and load"))
    build_s: NonNegativeFloat = Field(0.0, description="screening shapes and building their Pyomo models")
    solver_s: NonNegativeFloat = Field(0.0, description="time inside HiGHS over all shapes")
    shapes_total: NonNegativeInt
    shapes_solved: NonNegativeInt = Field(description=(
        "screened shapes whose MILP closed (optimal, infeasible or cut off)"))
    shapes_pruned: NonNegativeInt = Field(description=(
        "screened shapes left unsolved because their bound cannot beat the plan by more than the gap"))
    shapes_open: NonNegativeInt = Field(0, description=(
        "screened shapes whose bound could still beat the plan when the search stopped (the time limit)"))
    stopped_early: str | None = Field(None, description=(
        "why the search stopped before the time limit with the gap still open: the next shape's model was "
        "predicted to take longer to build than the time left (a build cannot be interrupted)"))
    variables: NonNegativeInt
    binaries: NonNegativeInt
    integers: NonNegativeInt
    constraints: NonNegativeInt
    objective: Objective = Field(Objective.time, description="what the search minimised (search.objective); "
                                                             "rel_gap is on it")
    incumbent_usd: float | None = Field(None, description="objective cost: the plan's $/iteration")
    bound_usd: float | None = Field(None, description=(
        "objective cost: lower bound on $/iteration at the plan's batch (no layout the search allows costs less per "
        "sequence than bound_usd / the plan's batch); bound_s is then None"))


class VerifiedBreakdown(Contract):
    """The verifier's iteration time decomposed (seconds); the parts add up to its `iteration_s`.

    Attribution by successive replays: compute-only (compute + TP/CP/EP of the busiest rank, the rest of its
    makespan is bubble), + pipeline sends (exposed PP), + DP synchronisation and optimizer step."""

    compute_s: NonNegativeFloat
    exposed_tp_cp_s: NonNegativeFloat = Field(description="TP and CP collectives of the busiest rank")
    exposed_ep_s: NonNegativeFloat = Field(description="EP all-to-alls of the busiest rank (MoE layers)")
    bubble_s: NonNegativeFloat
    exposed_pp_s: NonNegativeFloat
    exposed_dp_s: NonNegativeFloat
    optimizer_s: NonNegativeFloat


class LinkLoad(Contract):
    """One direction of an inter-building link as replayed."""

    a: str
    b: str
    transport: Transport
    pp_gbyte: NonNegativeFloat
    dp_gbyte: NonNegativeFloat
    busy_s: NonNegativeFloat = Field(description="time the replay had traffic on this link direction")
    utilisation: NonNegativeFloat = Field(description="busy_s / iteration time")


class Effect(Contract):
    """Part of the verifier-minus-optimiser difference measured by replaying without one effect that the MILP
    does not linearise."""

    name: str
    seconds: float
    detail: str


class Verification(Contract):
    """An independent replay of one iteration (scaleacross_milp.verify) next to the optimiser's prediction."""

    iteration_s: NonNegativeFloat
    breakdown: VerifiedBreakdown
    predicted_s: NonNegativeFloat | None = Field(None, description="the optimiser's iteration time, if any")
    difference_s: float | None = Field(None, description="iteration_s - predicted_s")
    relative_difference: float | None = Field(None, description="difference_s / predicted_s")
    tokens_per_s: NonNegativeFloat
    patterns: PositiveInt = Field(description="distinct pipeline patterns simulated")
    pipelines: PositiveInt
    links: list[LinkLoad] = Field(default_factory=list)
    effects: list[Effect] = Field(default_factory=list, description="measured causes of the difference")
    residual_s: float | None = Field(None, description="difference_s minus the effects: what both model alike")
    tolerance: float | None = Field(None, description="agreement tolerance on |residual_s| / predicted_s")
    notes: list[str] = Field(default_factory=list, description="how the replay was set up")
    replay_wall_s: NonNegativeFloat
    cost: Cost | None = Field(None, description="at the replayed time and link loads, when the instance gives prices")


class BuildingUse(Contract):
    name: str
    gpu_type: str
    gpus: NonNegativeInt
    used_gpus: NonNegativeInt


class StageMemoryUse(Contract):
    """Per-GPU HBM of one stage in one building: activations in flight under the schedule plus states under the
    DP mode (costmodel.memory.stage_bytes, what the MILP's memory rows read), against HBM x usable fraction."""

    stage: NonNegativeInt
    building: str
    gpu_type: str
    used_gib: NonNegativeFloat
    usable_gib: NonNegativeFloat

    @property
    def free_gib(self) -> float:
        return self.usable_gib - self.used_gib


class IdleCause(str, Enum):
    batch = "batch"
    """No larger DP degree within the cluster runs a batch that training.batch_rounding accepts (under `exact`,
    DP x micro-batch must divide the global batch)."""
    cell = "cell"
    """Fewer GPUs left in the building than one stage cell (TP x CP x EP)."""
    memory = "memory"
    """The plan's stages do not fit the building's GPUs."""
    compute = "compute"
    """The building's GPUs are too slow: with the microbatches per pipeline a larger DP leaves, its replicas would
    compute longer than the plan's pipelines do."""
    link = "link"
    """Reaching the building costs link time the optimiser found not worth it (figures in the detail)."""
    price = "price"
    """Holding the building's GPUs costs more than the search allowed: it minimised cost, or their price at the
    plan's time alone would break search.max_cost_per_iteration."""
    slower = "slower"
    """A larger DP degree fits these GPUs but was not faster."""


class IdleGPUs(Contract):
    cause: IdleCause
    buildings: list[str]
    gpus: NonNegativeInt
    detail: str


class BatchUse(Contract):
    """The global batch the plan runs (dp x micro_batch x microbatches) against the requested one."""

    requested_sequences: PositiveInt
    run_sequences: PositiveInt = Field(description="sequences one iteration of the plan runs")
    rounding: BatchRounding = Field(description="training.batch_rounding of the instance")
    change: float = Field(description="run_sequences / requested_sequences - 1")
    tokens_per_s: NonNegativeFloat | None = Field(
        None, description="tokens of the batch run (run_sequences x seq_len) per second of the report's iteration")


class Usage(Contract):
    """What the plan uses of the cluster, what it leaves idle and why, HBM per stage and building, and the
    cheapest change that would use the idle GPUs."""

    gpus: NonNegativeInt
    used_gpus: NonNegativeInt
    batch: BatchUse | None = Field(None, description="the batch run against the one requested")
    buildings: list[BuildingUse]
    memory: list[StageMemoryUse]
    idle: list[IdleGPUs] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)
    infeasible: list[str] = Field(default_factory=list, description=(
        "what the hardware cannot run (memory, NVLink domain, building capacity); non-empty only for a layout "
        "priced with --allow-infeasible"))


class Layout(Contract):
    """The decisions of a training layout, without any optimiser output: what `evaluate` prices.

    `stages` and `pipelines` may be left out: the job then runs in one building (the first that holds it)
    with layers split as evenly as the schedule allows. `pipelines` may be left out alone: stages are then
    chained building by building. `transports` maps "A-B" to the transport of that link (default: the
    first the link supports). `schedule_csv` (a torchtitan / torch.distributed.pipelining compute-only CSV,
    one row per rank, path relative to the layout file) replaces `schedule` with a custom action list."""

    instance: str | None = None
    shape: Shape
    schedule: Schedule | None = None
    schedule_csv: str | None = None
    interleave: PositiveInt = 1
    dp_mode: DPMode
    hsdp_replicas: PositiveInt | None = Field(None, description="HSDP replica groups (shard group = dp/this)")
    stages: list[StagePlacement] | None = None
    pipelines: list[PipelineRoute] | None = None
    transports: dict[str, Transport] | None = None

    @model_validator(mode="after")
    def _one_schedule(self) -> Layout:
        if (self.schedule is None) == (self.schedule_csv is None):
            raise ValueError("give exactly one of schedule or schedule_csv")
        if self.pipelines is not None and self.stages is None:
            raise ValueError("pipelines given without stages")
        return self

    def link_transports(self) -> dict[str, Transport]:
        """Transport per link, keyed "A-B" as in the instance's link list."""
        return dict(self.transports or {})


class BaselineComparison(Contract):
    """A baseline (scaleacross_milp.baselines) priced by the verifier beside the optimiser's plan. `speedup` is the
    optimiser's tokens/s over the baseline's minus 1, i.e. baseline time / optimiser time - 1 (the paper's
    convention) when both run the same batch; None with `note` saying why when the baseline was not priced."""

    kind: str
    layout: Layout | None = None
    iteration_s: NonNegativeFloat | None = Field(None, description="the verifier's iteration time")
    tokens_per_s: NonNegativeFloat | None = None
    speedup: float | None = Field(None, description="optimiser tokens/s / baseline tokens/s - 1")
    cost: Cost | None = Field(None, description="the baseline's iteration at the instance's prices, when it gives them")
    note: str = ""


class Plan(Layout):
    instance: str
    schedule: Schedule
    stages: list[StagePlacement]
    pipelines: list[PipelineRoute]
    links: list[LinkUse]
    prediction: Prediction
    solve: SolveStats
    explanation: list[str]
    verification: Verification | None = None
    usage: Usage | None = None
    comparison: list[BaselineComparison] | None = None

    def link_transports(self) -> dict[str, Transport]:
        return {f"{use.a}-{use.b}": use.transport for use in self.links} | super().link_transports()


def schedule_label(layout: Layout) -> str:
    """The schedule as the report prints it: `zb-v (v=2)`, `1f1b`, `custom (order.csv)`."""
    if layout.schedule is None:
        return f"custom ({layout.schedule_csv})"
    if layout.schedule is Schedule.interleaved or layout.interleave > 1:
        return f"{layout.schedule.value} (v={layout.interleave})"
    return layout.schedule.value


def dp_mode_label(layout: Layout) -> str:
    """The DP mode as the report prints it, HSDP with its replica groups and shard group."""
    if layout.dp_mode is DPMode.hsdp and layout.hsdp_replicas:
        shard = layout.shape.dp // layout.hsdp_replicas
        return f"hsdp ({layout.hsdp_replicas} replicas x shard group {shard})"
    return layout.dp_mode.value
