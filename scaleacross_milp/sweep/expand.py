"""A sweep's scenarios: every case x every grid point applied to the base instance, validated by the instance
contract, each with a stable id derived from its content."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaleacross_milp.calibration.defaults import bundled_names
from scaleacross_milp.loader import load_instance, resolve_instance
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import FileProblems, InputError
from scaleacross_milp.sweep.axes import AxisError, JsonData, apply_axis
from scaleacross_milp.sweep.spec import Sweep, load_sweep

ID_HEX_DIGITS = 16
"""Characters of the SHA-256 hex digest kept as a scenario id (64 bits: no collision in any realistic sweep)."""


@dataclass(frozen=True)
class Scenario:
    """One instance of a sweep: `axes` maps each axis (case keys, then grid axes) to its value here."""

    id: str
    axes: dict[str, Any]
    instance: Instance

    def label(self) -> str:
        return axes_label(self.axes)


def axes_label(axes: dict[str, Any]) -> str:
    """`link_capacity_scale=2, topology.links.0.transports=["ecmp_go_back_n"]` (`base` when no axis is set)."""
    return ", ".join(f"{axis}={json.dumps(value, separators=(',', ':'))}" for axis, value in axes.items()) or "base"


def canonical_json(instance: Instance) -> str:
    """The instance as JSON with sorted keys and no spaces; a collective profile file is replaced by the SHA-256 of
    its bytes, so the text depends on content only, not on where the files sit."""
    data = instance.model_dump(mode="json")
    reference = data["collective_profile"]
    if reference is not None and reference not in bundled_names():
        data["collective_profile"] = "sha256:" + hashlib.sha256(Path(reference).read_bytes()).hexdigest()
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def scenario_id(instance: Instance) -> str:
    """First ID_HEX_DIGITS hex digits of SHA-256(canonical_json(instance)): same scenario, same id."""
    return hashlib.sha256(canonical_json(instance).encode()).hexdigest()[:ID_HEX_DIGITS]


def base_instance(sweep: Sweep, sweep_path: Path) -> Instance:
    """The sweep's base: its instance file (relative to the sweep file) or its inline instance, resolved."""
    if isinstance(sweep.base, str):
        return load_instance(sweep_path.parent / sweep.base)
    return resolve_instance(sweep.base.model_dump(mode="json"), sweep_path.parent, sweep_path)


def combinations(sweep: Sweep) -> list[dict[str, Any]]:
    """Axis -> value for every case x grid point, case keys first, then grid axes in the file's order."""
    grid = [dict(zip(sweep.grid, values, strict=True)) for values in itertools.product(*sweep.grid.values())]
    return [{**case, **point} for case in (sweep.cases or [{}]) for point in grid]


def scenario(base: JsonData, axes: dict[str, Any], sweep_path: Path) -> Scenario:
    """The base with `axes` applied in order, resolved. Problems: FileProblems with one line per axis that cannot
    be applied, then (with those axes left out) one per field the instance contract refuses."""
    data, problems = json.loads(json.dumps(base)), []
    for axis, value in axes.items():
        try:
            apply_axis(data, axis, value)
        except AxisError as exc:
            problems.append(str(exc))
    try:
        instance = resolve_instance(data, sweep_path.parent, sweep_path)
    except FileProblems as exc:
        problems += exc.lines
    except InputError as exc:
        problems.append(str(exc))
    if problems:
        raise FileProblems(sweep_path, problems)
    return Scenario(scenario_id(instance), axes, instance)


def expand(sweep: Sweep, sweep_path: Path) -> tuple[list[Scenario], int]:
    """(the distinct scenarios in sweep order, how many duplicates were merged into them). Every scenario an axis
    breaks is reported, before anything is solved: FileProblems with `scenario <axes>: <field>: <problem>` lines."""
    base = base_instance(sweep, sweep_path).model_dump(mode="json")
    scenarios: dict[str, Scenario] = {}
    problems, total = [], 0
    for axes in combinations(sweep):
        total += 1
        try:
            found = scenario(base, axes, sweep_path)
        except FileProblems as exc:
            problems += [f"scenario {axes_label(axes)}: {line}" for line in exc.lines]
        else:
            scenarios.setdefault(found.id, found)
    if problems:
        raise FileProblems(sweep_path, problems)
    return list(scenarios.values()), total - len(scenarios)


def load_scenarios(path: Path) -> tuple[list[Scenario], int]:
    """load_sweep then expand."""
    return expand(load_sweep(path), path)
