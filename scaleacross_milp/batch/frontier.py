"""Inverse queries: the least capacity (or the most distance, loss) that keeps the verified iteration time within a
tolerance of the instance's own, by bisection over batch solves.

With T(x) the verified iteration time of the instance with axis value x and T0 its own, the answer is
    least x in [lo, hi] with T(x) <= (1 + pct) T0   for capacity axes (T falls as x grows),
    most  x in [lo, hi] with T(x) <= (1 + pct) T0   for distance and loss (T grows with x),
bracketed by the last value that failed and the last that held. Every point is a scenario of the batch runner, so
points already solved (in the results folder, by id) are read back, not solved again; the folder's summary (a
batch's) is left as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from scaleacross_milp.batch.result import ScenarioResult, Status
from scaleacross_milp.batch.runner import Executor, run_batch
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.sweep.expand import Scenario, scenario

LEAST_AXES = {"link_capacity_scale": (1 / 64, 1.0), "building_gpus_scale": (1 / 8, 1.0)}
"""Capacity axes (least value wanted) and their default range; the instance itself is the scale 1."""
MOST_AXES = {"link_distance_km": (0.0, 10_000.0), "loss_rate": (1e-6, 1e-2)}
"""Distance and loss axes (most value wanted) and their default range."""
INTEGER_AXES = {"buildings"}
"""Least number of buildings (the first n): default range 1 .. the instance's buildings."""
DEFAULT_STEPS = 6
"""Bisection steps after the two ends (a continuous bracket shrinks 2^6 = 64 fold)."""


class Want(str, Enum):
    least = "least"
    most = "most"


class FrontierError(ValueError):
    """The query cannot be asked: an axis frontier does not search, or a range it cannot bisect."""


@dataclass(frozen=True)
class Point:
    value: float
    result: ScenarioResult

    @property
    def iteration_s(self) -> float | None:
        """The verified iteration time (None without a plan: counted as not within)."""
        plan = self.result.plan
        return plan.verification.iteration_s if plan is not None and plan.verification is not None else None


@dataclass(frozen=True)
class Frontier:
    axis: str
    want: Want
    reference_s: float
    target_s: float
    points: list[Point]
    """Every point walked, the reference (axis unset) not included."""
    answer: float | None
    """None: not within even at the end of the range that should be best."""
    bracket: tuple[float, float] | None
    """(failed, held) values around the answer for a least axis, (held, failed) for a most axis; None when the
    whole range holds (the answer is its end)."""


def axis_range(axis: str, instance: Instance, lo: float | None, hi: float | None) -> tuple[Want, float, float]:
    """The direction wanted and the range [lo, hi] searched (defaults per axis)."""
    if axis in INTEGER_AXES:
        want, default = Want.least, (1, len(instance.topology.buildings))
    elif axis in LEAST_AXES:
        want, default = Want.least, LEAST_AXES[axis]
    elif axis in MOST_AXES:
        want, default = Want.most, MOST_AXES[axis]
    else:
        known = ", ".join(sorted([*LEAST_AXES, *MOST_AXES, *INTEGER_AXES]))
        raise FrontierError(f"--vary {axis}: frontier searches one of {known}")
    lo, hi = default[0] if lo is None else lo, default[1] if hi is None else hi
    if not lo < hi:
        raise FrontierError(f"--lo {lo:g} must be below --hi {hi:g}")
    if axis in INTEGER_AXES and (lo != int(lo) or hi != int(hi)):
        raise FrontierError(f"--vary {axis}: --lo and --hi must be whole numbers")
    return want, lo, hi


def midpoint(axis: str, good: float, bad: float) -> float | None:
    """The next value between a value that held and one that failed: the integer midpoint for building counts
    (None once they are adjacent), the geometric mean for scales and loss (positive, spanning decades), the
    arithmetic mean for distance."""
    if axis in INTEGER_AXES:
        return None if abs(good - bad) <= 1 else float((good + bad) // 2)
    if axis == "link_distance_km" or min(good, bad) <= 0:
        return (good + bad) / 2
    return math.sqrt(good * bad)


def frontier(instance: Instance, instance_path: Path, axis: str, within: float, executor: Executor,
             out_dir: Path, time_limit_s: float | None = None, lo: float | None = None, hi: float | None = None,
             steps: int = DEFAULT_STEPS) -> Frontier:
    """Bisect `axis` over [lo, hi] for the least (capacity) or most (distance, loss) value whose verified time
    stays within `within` (a fraction) of the instance's own."""
    want, lo, hi = axis_range(axis, instance, lo, hi)
    base = instance.model_dump(mode="json")
    solved: list[Scenario] = []

    def solve(axes: dict) -> ScenarioResult:
        found = scenario(base, axes, instance_path)
        solved.append(found)
        results = run_batch(solved, out_dir, executor, time_limit_s, summary=False).results
        return next(result for result in results if result.id == found.id)

    reference = solve({})
    if reference.status is not Status.solved or reference.plan.verification is None:
        raise FrontierError(f"the instance itself has no verified plan ({reference.status.value}: "
                            f"{reference.reason})")
    reference_s = reference.plan.verification.iteration_s
    target = reference_s * (1 + within)
    points: list[Point] = []

    def holds(value: float) -> bool:
        point = Point(value, solve({axis: int(value) if axis in INTEGER_AXES else value}))
        points.append(point)
        return point.iteration_s is not None and point.iteration_s <= target

    good, bad = (hi, lo) if want is Want.least else (lo, hi)
    if not holds(good):
        return Frontier(axis, want, reference_s, target, points, None, None)
    if holds(bad):
        return Frontier(axis, want, reference_s, target, points, bad, None)
    for _ in range(steps):
        middle = midpoint(axis, good, bad)
        if middle is None:
            break
        good, bad = (middle, bad) if holds(middle) else (good, middle)
    return Frontier(axis, want, reference_s, target, points, good, (bad, good) if want is Want.least else (good, bad))
