"""What the optimiser may choose from, and how long it may look."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, PositiveFloat, PositiveInt

from scaleacross_milp.spec.base import Contract


class Schedule(str, Enum):
    gpipe = "gpipe"
    one_f_one_b = "1f1b"
    interleaved = "interleaved"
    zb_h1 = "zb-h1"
    zb_v = "zb-v"


class Objective(str, Enum):
    """What the search minimises: `time` (the iteration time per requested batch) or `cost` (the $ per requested
    batch at the instance's prices, costmodel.price)."""

    time = "time"
    cost = "cost"


class DPMode(str, Enum):
    """Data-parallel synchronisation: DDP all-reduce, FSDP (reshard after forward or not), HSDP, and Megatron's
    distributed optimizer `zero1` (ZeRO stage 1: gradients reduce-scattered, the optimizer step on the rank's 1/N
    shard of fp32 master weights and Adam moments, the updated 16-bit parameters all-gathered; weights and the
    gradient buffer stay whole on every rank)."""

    ddp = "ddp"
    fsdp = "fsdp"
    fsdp_no_reshard = "fsdp-no-reshard"
    hsdp = "hsdp"
    zero1 = "zero1"


def _all(enum: type[Enum]) -> list:
    return list(enum)


DEFAULT_DP_MODES = [mode for mode in DPMode if mode is not DPMode.zero1]
"""The DP modes searched when an instance leaves `search.dp_modes` out: every mode but zero1, which joins them when
the instance's training sets overlap_param_gather (`spec.instance.Instance`). Without that option zero1 moves what
fsdp-no-reshard moves, gathers it later (after the optimizer step, exposed) and holds the gradients whole, so it
rarely wins, while one more DP variant in every shape's MILP costs the search time (the 131,072-GPU Llama 3 405B
instance returned a plan 18 % slower within its time limit when zero1 was searched by default)."""


class SearchOptions(Contract):
    """The searched space. Degree lists left out mean every power of two that fits."""

    schedules: list[Schedule] = Field(default_factory=lambda: _all(Schedule), min_length=1)
    interleave_chunks: list[PositiveInt] = Field(default_factory=lambda: [2, 4], min_length=1)
    dp_modes: list[DPMode] = Field(default_factory=lambda: list(DEFAULT_DP_MODES), min_length=1, description=(
        "left out: every mode but zero1, and zero1 too when training.overlap_param_gather is on"))
    tp_degrees: list[PositiveInt] | None = None
    cp_degrees: list[PositiveInt] | None = None
    ep_degrees: list[PositiveInt] | None = None
    pp_degrees: list[PositiveInt] | None = None
    micro_batch_sizes: list[PositiveInt] = Field(default_factory=lambda: [1, 2], min_length=1)
    max_pp: PositiveInt = 32
    time_limit_s: PositiveFloat = 60.0
    rel_gap: float = Field(0.01, ge=0.0, lt=1.0)
    threads: PositiveInt | None = None
    objective: Objective = Field(Objective.time, description=(
        "time: the fastest layout; cost: the cheapest, $ per requested batch at the instance's prices "
        "(gpu_hour_usd of every building, egress_usd_per_gb of the links)"))
    max_cost_per_iteration: PositiveFloat | None = Field(None, description=(
        "budget, $/iteration: only layouts whose iteration (held GPUs x iteration time x price, plus egress) costs "
        "at most this; a row of the MILP"))
    min_tokens_per_s: PositiveFloat | None = Field(None, description=(
        "throughput floor, tokens/s: only layouts whose batch run (tokens) per iteration time reaches it; a row of "
        "the MILP"))
