"""One scenario's result file: the contract, and writing it so a killed run never leaves a partial file."""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import IO

from pydantic import Field, JsonValue, NonNegativeFloat, PositiveFloat, PositiveInt, ValidationError

from scaleacross_milp.spec.base import Contract
from scaleacross_milp.spec.plan import Plan

TEMP_MARK = ".tmp-"
"""Temporary files are `.<name>.tmp-<pid>` in the results folder, renamed over `<name>` once complete."""


class Status(str, Enum):
    solved = "solved"
    infeasible = "infeasible"
    """No layout satisfies the scenario, or its input is refused at solve time (the reason names the field)."""
    no_plan = "no plan"
    """The time limit ended before any feasible layout (the scenario may still be feasible)."""
    error = "error"
    """The solve or the replay raised an unexpected exception (a bug, please report)."""
    crashed = "crashed"
    """The worker process died (segmentation fault, out of memory killer, ...)."""
    timed_out = "timed out"
    """Killed at the hard wall-clock limit: HARD_KILL_FACTOR x its time limit."""


RETRYABLE = frozenset({Status.error, Status.crashed, Status.timed_out})
"""Failures that may not happen again: solved again under --retries. The others are answers about the scenario."""


class ScenarioResult(Contract):
    """What one scenario of a sweep gave: its plan (with usage and verification) when solved, else the reason."""

    id: str
    axes: dict[str, JsonValue] = Field(description="axis -> value of this scenario")
    status: Status
    reason: str = Field("", description="why there is no plan (empty when solved)")
    attempts: PositiveInt = Field(description="times the scenario was run, over every resumed run")
    time_limit_s: PositiveFloat
    wall_s: NonNegativeFloat = Field(description="the worker's time on the scenario: solve, check, replay")
    worker_rss_mib: NonNegativeFloat | None = Field(None, description="the worker's resident memory afterwards")
    plan: Plan | None = None


def atomic_write(path: Path, write: Callable[[IO], None], binary: bool = False) -> None:
    """Write through `write` into `.<name>.tmp-<pid>` beside `path`, then os.replace it over `path`: readers see
    the old file or the complete new one, never a partial one."""
    temp = path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}")
    try:
        with temp.open("wb" if binary else "w") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def result_path(out_dir: Path, scenario_id: str) -> Path:
    return out_dir / f"{scenario_id}.json"


def write_result(out_dir: Path, result: ScenarioResult) -> None:
    atomic_write(result_path(out_dir, result.id), lambda handle: handle.write(result.model_dump_json(indent=2)))


def read_result(out_dir: Path, scenario_id: str) -> ScenarioResult | None:
    """The scenario's result file, or None when there is none or it does not read as one (then it is run again)."""
    path = result_path(out_dir, scenario_id)
    try:
        return ScenarioResult.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


def remove_temporaries(out_dir: Path) -> None:
    """Temporary files a killed run left behind."""
    for path in out_dir.glob(f".*{TEMP_MARK}*"):
        path.unlink(missing_ok=True)
