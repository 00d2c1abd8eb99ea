"""Reading a user's instance: the contract and its model file (spec), then its collective profile (calibration).
It sits above both, so the contract never reads calibration files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scaleacross_milp.calibration.defaults import bundled_names, load_profile
from scaleacross_milp.spec.instance import Instance, ModelFile
from scaleacross_milp.spec.jsonfile import InputError, read_json, validate_json


def resolve_instance(data: Any, base_dir: Path, source: Path) -> Instance:
    """Instance data (read from `source`) validated strictly, its model file loaded and its collective profile
    checked, both relative to `base_dir`, and a profile file's path made absolute (found from any directory
    later). FileProblems (one line per field) or InputError name the file each problem is in."""
    instance = validate_json(Instance, data, source)
    if isinstance(instance.model, ModelFile):
        instance = instance.model_copy(update={"model": instance.model.load(base_dir)})
    reference = instance.collective_profile
    try:
        load_profile(reference, base_dir)
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    if reference is not None and reference not in bundled_names():
        instance = instance.model_copy(update={"collective_profile": str((base_dir / reference).resolve())})
    return instance


def load_instance(path: str | Path) -> Instance:
    """Read, validate and resolve an instance file (`resolve_instance`); a model file reference is replaced by its
    spec."""
    path = Path(path)
    return resolve_instance(read_json(path), path.parent, path)
