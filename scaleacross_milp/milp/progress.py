"""What a running solve reports as it goes: phase, shapes done and left, incumbent, bound and gap."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    routes = "routes"
    seed = "strongest building"
    screening = "screening"
    patterns = "patterns"
    shapes = "shape MILPs"
    rescue = "rescue"
    polish = "polish"


@dataclass(frozen=True)
class SearchProgress:
    """One snapshot of the search. Times in seconds; `bound_s` holds over the whole searched space, per requested
    batch (as the search compares shapes); `incumbent_s` is None before the first plan."""

    phase: Phase
    elapsed_s: float
    shapes_done: int
    shapes_left: int
    incumbent_s: float | None
    bound_s: float

    @property
    def gap(self) -> float | None:
        """(incumbent - bound) / incumbent, None before the first plan or while the bound is unknown."""
        if self.incumbent_s is None or math.isinf(self.bound_s) or self.incumbent_s <= 0:
            return None
        return max(0.0, (self.incumbent_s - self.bound_s) / self.incumbent_s)


ProgressHook = Callable[[SearchProgress], None]
