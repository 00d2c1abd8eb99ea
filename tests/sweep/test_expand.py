"""Sweep expansion on the bundled two-building Llama 3 8B instance (A, B: 128 H100 each; one 3,200 Gbit/s link,
1,000 km): axes, named axes, stable ids, and every broken scenario reported with its field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleacross_milp.spec.jsonfile import FileProblems
from scaleacross_milp.sweep.expand import load_scenarios, scenario_id

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "instances" / "dp-out-2b-far-llama3-8b.json"


def sweep_file(tmp_path: Path, name: str = "sweep.json", **fields) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"base": str(BASE), **fields}))
    return path


def test_grid_is_the_cartesian_product_in_file_order(tmp_path):
    path = sweep_file(tmp_path, grid={"link_capacity_scale": [0.5, 2], "topology.links.0.loss_rate": [0, 1e-4]})
    scenarios, merged = load_scenarios(path)
    assert merged == 0
    assert [s.axes for s in scenarios] == [
        {"link_capacity_scale": 0.5, "topology.links.0.loss_rate": 0},
        {"link_capacity_scale": 0.5, "topology.links.0.loss_rate": 1e-4},
        {"link_capacity_scale": 2, "topology.links.0.loss_rate": 0},
        {"link_capacity_scale": 2, "topology.links.0.loss_rate": 1e-4},
    ]
    links = [s.instance.topology.links[0] for s in scenarios]
    assert [(link.capacity_gbit_s, link.loss_rate) for link in links] == [
        (1600, 0), (1600, 1e-4), (6400, 0), (6400, 1e-4)]


def test_named_axes_act_on_the_whole_topology(tmp_path):
    path = sweep_file(tmp_path, cases=[{"buildings": 1}, {"building_gpus_scale": 0.5}, {"link_distance_km": 20},
                                       {"gpu_type": "h100-sxm", "loss_rate": 0.01}])
    one, halved, near, lossy = (s.instance.topology for s in load_scenarios(path)[0])
    assert [b.name for b in one.buildings] == ["A"] and one.links == []
    assert [b.gpus for b in halved.buildings] == [64, 64]
    assert near.links[0].distance_km == 20 and near.links[0].latency_ms is None
    assert near.links[0].one_way_latency_s == pytest.approx(20 * 4.9e-6 + 0.01e-3)
    assert lossy.links[0].loss_rate == 0.01 and {b.gpu_type for b in lossy.buildings} == {"h100-sxm"}


def test_same_scenario_same_id_whatever_the_route_to_it(tmp_path):
    """The file base and the same instance inline, with the model by another path, give the same ids; the
    scale-1 point equals the base (one id) and is merged with an explicit capacity of 3,200 Gbit/s."""
    by_file = sweep_file(tmp_path, "a.json", grid={"link_capacity_scale": [1, 2]})
    inline = json.loads(BASE.read_text())
    inline["model"] = {"file": str(ROOT / "models" / ".." / "models" / "llama3-8b.json")}
    by_inline = tmp_path / "b.json"
    by_inline.write_text(json.dumps({"base": inline, "grid": {"link_capacity_scale": [1, 2]},
                                     "cases": [{}, {"topology.links.0.capacity_gbit_s": 3200.0}]}))
    first, merged_first = load_scenarios(by_file)
    second, merged_second = load_scenarios(by_inline)
    assert merged_first == 0 and merged_second == 2
    assert [s.id for s in first] == [s.id for s in second]
    assert first[0].id != first[1].id
    assert [s.id for s in load_scenarios(by_file)[0]] == [s.id for s in first]
    assert scenario_id(first[0].instance) == first[0].id and len(first[0].id) == 16


def test_model_axis_reads_files_relative_to_the_sweep(tmp_path):
    model = json.loads((ROOT / "models" / "llama3-70b.json").read_text())
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.json").write_text(json.dumps(model))
    path = sweep_file(tmp_path, grid={"model": [{"file": "models/m.json"}]})
    (only,), _ = load_scenarios(path)
    assert only.instance.model_spec.layers == model["layers"]


def test_every_broken_scenario_is_reported_with_its_field(tmp_path):
    path = sweep_file(tmp_path, grid={"loss_rate": [0, 2], "topology.links.3.paths": [4], "buildings": [3]})
    with pytest.raises(FileProblems) as caught:
        load_scenarios(path)
    assert caught.value.lines == [
        'scenario loss_rate=0, topology.links.3.paths=4, buildings=3: topology.links: index 3 out of range '
        '(the list has 1 items)',
        "scenario loss_rate=0, topology.links.3.paths=4, buildings=3: buildings: must be a whole number from 1 to 2 "
        "(the base's buildings), got 3",
        'scenario loss_rate=2, topology.links.3.paths=4, buildings=3: topology.links: index 3 out of range '
        '(the list has 1 items)',
        "scenario loss_rate=2, topology.links.3.paths=4, buildings=3: buildings: must be a whole number from 1 to 2 "
        "(the base's buildings), got 3",
        "scenario loss_rate=2, topology.links.3.paths=4, buildings=3: topology.links.0.loss_rate: "
        "Input should be less than 1",
    ]


def test_unknown_fields_and_refused_values_name_the_field(tmp_path):
    path = sweep_file(tmp_path, cases=[{"topology.linkz.0": 1}, {"search.time_limit": 5},
                                       {"training.global_batch_sequences": "512"}])
    with pytest.raises(FileProblems) as caught:
        load_scenarios(path)
    assert caught.value.lines == [
        'scenario topology.linkz.0=1: topology.linkz: unknown field (fields of topology: buildings, links)',
        'scenario search.time_limit=5: search.time_limit: Extra inputs are not permitted',
        'scenario training.global_batch_sequences="512": training.global_batch_sequences: Input should be a valid '
        "integer, not the string '512'",
    ]


def test_a_profile_file_counts_by_content_not_by_place(tmp_path):
    """The same profile bytes in two folders give one id; other bytes another."""
    profile = ROOT / "scaleacross_milp" / "calibration" / "profiles" / "default.json"
    ids = []
    for folder, text in (("a", profile.read_text()), ("b", profile.read_text()), ("c", profile.read_text() + "\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "p.json").write_text(text)
        inline = json.loads(BASE.read_text())
        inline["model"] = {"file": str(ROOT / "models" / "llama3-8b.json")}
        inline["collective_profile"] = "p.json"
        path = tmp_path / folder / "sweep.json"
        path.write_text(json.dumps({"base": inline}))
        (only,), _ = load_scenarios(path)
        assert only.instance.collective_profile == str((tmp_path / folder / "p.json").resolve())
        ids.append(only.id)
    assert ids[0] == ids[1] != ids[2]
