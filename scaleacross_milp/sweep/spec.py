"""The sweep file contract: a base instance and the axes varied over it (`grid`, `cases`), and its loader."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Discriminator, Field, JsonValue, Tag

from scaleacross_milp.spec.base import Contract
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import read_json, validate_json

INSTANCE_FILE_TAG, INLINE_INSTANCE_TAG = "<instance file>", "<inline instance>"
"""Tags of the `base` union, in angle brackets so error_lines leaves them out of field paths."""

AXIS_DESCRIPTION = (
    "an axis is a dotted path into the instance with integer list indexes ('topology.links.0.capacity_gbit_s', "
    "'training.global_batch_sequences', 'model' with {'file': ...} values; file paths relative to the sweep file) "
    "or a named axis acting on the whole topology: link_capacity_scale (x every link's capacity), "
    "link_distance_km (every link's distance, replacing latency_ms), loss_rate (every link), building_gpus_scale "
    "(x every building's GPUs, rounded; pods larger than the building shrink to it), buildings (the first n "
    "buildings and the links between them), gpu_type (every building)")


def _base_kind(value: Any) -> str:
    return INSTANCE_FILE_TAG if isinstance(value, str) else INLINE_INSTANCE_TAG


BaseField = Annotated[
    Annotated[str, Tag(INSTANCE_FILE_TAG)] | Annotated[Instance, Tag(INLINE_INSTANCE_TAG)],
    Discriminator(_base_kind),
]


class Sweep(Contract):
    """Scenarios over one base instance: every case (an explicit set of overrides; none: the base alone) combined
    with every point of the grid (the cartesian product of its axes; none: one point). Overrides apply in order:
    the case's, then the grid's axes as listed. Scenarios that resolve to the same instance are solved once."""

    name: str = ""
    description: str = ""
    base: BaseField = Field(description="instance file (path relative to the sweep file) or an inline instance")
    grid: dict[str, Annotated[list[JsonValue], Field(min_length=1)]] = Field(
        default_factory=dict, description="axis -> values; every combination is a scenario; " + AXIS_DESCRIPTION)
    cases: list[dict[str, JsonValue]] = Field(
        default_factory=list, description="explicit scenarios, each axis -> one value (same axes as grid)")


def load_sweep(path: Path) -> Sweep:
    """Read and validate a sweep file strictly (spec.jsonfile); FileProblems names every bad field."""
    return validate_json(Sweep, read_json(path), path)
