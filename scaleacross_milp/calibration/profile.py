"""The collective-profile contract (JSON): calibrated curves per (collective, tier, ranks).

A curve holds the measured table (bytes -> seconds; the faster of nccl-tests' out-of-place and in-place times)
and its latency-bandwidth fit t = alpha_s + factor(collective, ranks) * bytes / bus_bandwidth_bytes_s with the
fit's relative error at every measured size. `gpu_model` (e.g. "H100") says which GPUs it describes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, ValidationError, model_validator

from scaleacross_milp.calibration.collective import Collective
from scaleacross_milp.spec.base import Contract
from scaleacross_milp.spec.jsonfile import InputError, read_json

MeasuredTier = Literal["nvlink", "fabric"]
"""Tiers a log can measure; cross_building is derived (see calibration.model)."""


class Point(Contract):
    bytes: PositiveInt
    time_s: PositiveFloat
    fit_rel_error: float = Field(description="(fit - measured) / measured at this size")


class Curve(Contract):
    collective: Collective
    tier: MeasuredTier
    ranks: int = Field(ge=2)
    nodes: PositiveInt | None = None
    alpha_s: NonNegativeFloat
    bus_bandwidth_bytes_s: PositiveFloat
    points: list[Point] = Field(min_length=1)
    sources: list[str] = Field(min_length=1, description="file:line of each table measured")

    @model_validator(mode="after")
    def _sizes_increase(self) -> Curve:
        sizes = [p.bytes for p in self.points]
        if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
            raise ValueError("points must have strictly increasing bytes")
        return self

    @property
    def key(self) -> tuple[str, str, int]:
        return self.collective, self.tier, self.ranks

    @property
    def max_abs_fit_rel_error(self) -> float:
        return max(abs(p.fit_rel_error) for p in self.points)


class Profile(Contract):
    name: str
    description: str = ""
    gpu_model: str = Field(min_length=1, description="GPU model token, e.g. H100; matched against gpu_types names")
    curves: list[Curve] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_keys(self) -> Profile:
        keys = [c.key for c in self.curves]
        if len(keys) != len(set(keys)):
            raise ValueError("two curves share the same (collective, tier, ranks)")
        return self

    def to_json(self) -> str:
        return self.model_dump_json(indent=1, exclude_none=True) + "\n"


def read_profile(path: Path) -> Profile:
    """Load and validate a profile file; InputError names the file and the field."""
    try:
        return Profile.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InputError(f"{path}: {where}: {first['msg']} ({exc.error_count()} problem(s))") from None
