"""What a baseline returns: its layout, the verifier's replay of it, and how it was reached."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, NonNegativeFloat, NonNegativeInt

from scaleacross_milp.spec.base import Contract
from scaleacross_milp.spec.plan import Layout, Verification


class Kind(str, Enum):
    production = "production"
    framework = "framework"
    single_dimension = "single-dimension"
    exhaustive = "exhaustive"


class Step(Contract):
    """One step of a search: the dimension optimised, what changed, and the verified time after it."""

    dimension: str
    change: str
    iteration_s: NonNegativeFloat


class BaselineResult(Contract):
    """A baseline layout priced by the verifier (never by the MILP)."""

    kind: Kind
    layout: Layout
    verification: Verification
    iteration_s: NonNegativeFloat = Field(description="the verifier's iteration time")
    tokens_per_s: NonNegativeFloat
    notes: list[str] = Field(default_factory=list, description="assumptions and fallbacks taken")
    steps: list[Step] = Field(default_factory=list, description="single-dimension: each step of the descent")
    evaluated: NonNegativeInt | None = Field(None, description="exhaustive: layouts replayed")
