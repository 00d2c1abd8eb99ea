"""Axes of a sweep acting on an instance's JSON data: dotted paths into it and named axes over the whole topology.

Every function works on the instance as JSON data (`Instance.model_dump(mode="json")`), so what an axis produces
is validated by the instance contract like a file would be, and problems name the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JsonData = dict[str, Any]


class AxisError(ValueError):
    """An axis that cannot be applied: the message names the axis and the field."""


def _number(axis: str, value: Any, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or (positive and not value > 0) or value < 0:
        raise AxisError(f"{axis}: must be a number {'> 0' if positive else '>= 0'}, got {value!r}")
    return value


def _links(data: JsonData) -> list[JsonData]:
    return data["topology"]["links"]


def scale_link_capacity(data: JsonData, value: Any) -> None:
    """capacity_gbit_s of every link x value."""
    factor = _number("link_capacity_scale", value, positive=True)
    for link in _links(data):
        link["capacity_gbit_s"] *= factor


def set_link_distance(data: JsonData, value: Any) -> None:
    """distance_km of every link = value (its latency then follows from distance, so latency_ms is cleared)."""
    km = _number("link_distance_km", value, positive=False)
    for link in _links(data):
        link["distance_km"], link["latency_ms"] = km, None


def set_loss_rate(data: JsonData, value: Any) -> None:
    """loss_rate of every link = value (the contract bounds it to [0, 1))."""
    rate = _number("loss_rate", value, positive=False)
    for link in _links(data):
        link["loss_rate"] = rate


def scale_building_gpus(data: JsonData, value: Any) -> None:
    """gpus of every building = round(gpus x value), at least 1; pod_gpus = min(pod_gpus, gpus)."""
    factor = _number("building_gpus_scale", value, positive=True)
    for building in data["topology"]["buildings"]:
        building["gpus"] = max(1, round(building["gpus"] * factor))
        if building.get("pod_gpus") is not None:
            building["pod_gpus"] = min(building["pod_gpus"], building["gpus"])


def keep_buildings(data: JsonData, value: Any) -> None:
    """The first `value` buildings and the links joining two of them."""
    buildings = data["topology"]["buildings"]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= len(buildings):
        raise AxisError(f"buildings: must be a whole number from 1 to {len(buildings)} (the base's buildings), "
                        f"got {value!r}")
    kept = buildings[:value]
    names = {building["name"] for building in kept}
    data["topology"]["buildings"] = kept
    data["topology"]["links"] = [link for link in _links(data) if link["a"] in names and link["b"] in names]


def set_gpu_type(data: JsonData, value: Any) -> None:
    """gpu_type of every building = value (a key of gpu_types)."""
    if not isinstance(value, str):
        raise AxisError(f"gpu_type: must be the name of one of gpu_types, got {value!r}")
    for building in data["topology"]["buildings"]:
        building["gpu_type"] = value


NAMED_AXES: dict[str, Callable[[JsonData, Any], None]] = {
    "link_capacity_scale": scale_link_capacity,
    "link_distance_km": set_link_distance,
    "loss_rate": set_loss_rate,
    "building_gpus_scale": scale_building_gpus,
    "buildings": keep_buildings,
    "gpu_type": set_gpu_type,
}


def _step(node: Any, part: str, where: str) -> tuple[Any, str | int]:
    """The key or index `part` addresses in `node` (an object or a list)."""
    if isinstance(node, list):
        if not part.lstrip("-").isdigit():
            raise AxisError(f"{where}: is a list; give an integer index, not '{part}'")
        index = int(part)
        if not 0 <= index < len(node):
            raise AxisError(f"{where}: index {index} out of range (the list has {len(node)} items)")
        return node, index
    if isinstance(node, dict):
        return node, part
    raise AxisError(f"{where}: is {type(node).__name__ if node is not None else 'null'}, not an object or a list")


def set_path(data: JsonData, path: str, value: Any) -> None:
    """data[p0][p1]...[pn] = value for path 'p0.p1...pn' (integers index lists). Every part but the last must
    exist; a new last key is left for the contract to accept or refuse (as an unknown field)."""
    parts = path.split(".")
    node: Any = data
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or "(top level)"
        container, key = _step(node, part, where)
        if depth == len(parts) - 1:
            container[key] = value
        elif isinstance(container, dict) and key not in container:
            known = ", ".join(sorted(container)) or "none"
            raise AxisError(f"{'.'.join(parts[:depth + 1])}: unknown field (fields of {where}: {known})")
        else:
            node = container[key]


def apply_axis(data: JsonData, axis: str, value: Any) -> None:
    """A named axis, or else a dotted path."""
    if axis in NAMED_AXES:
        NAMED_AXES[axis](data, value)
    else:
        set_path(data, axis, value)
