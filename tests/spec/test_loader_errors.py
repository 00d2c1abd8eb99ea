"""Bad input files a new user might write: load_instance refuses each with InputError naming the file and the
field (dotted path), one line per problem, never a traceback from deep inside."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from scaleacross_milp.loader import load_instance
from scaleacross_milp.spec.jsonfile import FileProblems, InputError

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "llama3-70b.json"


def campus(inline: bool = True) -> dict:
    data = json.loads((ROOT / "instances" / "campus-2b-llama3-70b.json").read_text())
    data["model"] = json.loads(MODEL.read_text()) if inline else {"file": str(MODEL)}
    return data


def refused(path: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_instance(path)
    return caught.value


def write(tmp_path: Path, data: dict, name: str = "instance.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_deeply_nested_json_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    message = str(refused(path))
    assert str(path) in message and "nested" in message


def test_latin1_instance_is_refused_naming_the_byte_and_line(tmp_path):
    path = tmp_path / "latin.json"
    text = json.dumps(campus(), indent=1).replace('"description": "', '"description": "caf\u00e9 ', 1)
    path.write_bytes(text.encode("latin-1"))
    line = text[: text.index("caf\u00e9")].count("\n") + 1
    message = str(refused(path))
    assert f"{path}: not UTF-8 text (byte 0xe9 on line {line})" in message


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "plan.bin"
    path.write_bytes(bytes(range(256)))
    assert f"{path}: binary data" in str(refused(path))


def test_duplicate_key_is_refused_with_its_dotted_path(tmp_path):
    path = tmp_path / "dupe.json"
    text = json.dumps(campus()).replace('"gpus": 2048,', '"gpus": 2048, "gpus": 4096,', 1)
    path.write_text(text)
    assert f"{path}: topology.buildings.0: duplicate key 'gpus'" in str(refused(path))


Change = Callable[[dict], None]


def _link(data: dict) -> dict:
    return data["topology"]["links"][0]


def _building(data: dict) -> dict:
    return data["topology"]["buildings"][0]


@pytest.mark.parametrize(("change", "line"), [
    (lambda d: _link(d).update(capacity_gbit_s=float("inf")),
     "topology.links.0.capacity_gbit_s: Input should be a finite number"),
    (lambda d: _link(d).update(capacity_gbit_s="3200"),
     "topology.links.0.capacity_gbit_s: Input should be a valid number, not the string '3200'"),
    (lambda d: _building(d).update(gpus=10**30),
     "topology.buildings.0.gpus: Input should be less than or equal to 10000000"),
    (lambda d: _building(d).update(pod_gpus=4096),
     "topology.buildings.0: pod_gpus (4096) exceeds the building's gpus (2048)"),
    (lambda d: d["topology"]["links"].append(dict(_link(d), a="B", b="A")),
     "topology: links[1] joins B and A again (links[0] already does); give one link with their combined "
     "capacity"),
    (lambda d: d["model"].update(hidden=4097, heads=32, kv_heads=8),
     "model: hidden (4097) is not a multiple of heads (32); give head_dim"),
    (lambda d: d["model"].update(layers=0), "model.layers: Input should be greater than 0"),
    (lambda d: d["model"].update(layers=10**30), "model.layers: Input should be less than or equal to 10000"),
    (lambda d: d["training"].update(global_batch_sequences=10**30),
     "training.global_batch_sequences: Input should be less than or equal to 100000000"),
])
def test_invalid_field_is_one_line_with_its_dotted_path(tmp_path, change: Change, line: str):
    data = campus()
    change(data)
    error = refused(write(tmp_path, data))
    assert isinstance(error, FileProblems)
    assert error.lines == [line]
    assert error.source == tmp_path / "instance.json"


def test_json_infinity_literal_and_overflowing_number_are_not_finite(tmp_path):
    for literal in ("Infinity", "1e309"):
        path = tmp_path / "inf.json"
        path.write_text(json.dumps(campus()).replace('"capacity_gbit_s": 25600', f'"capacity_gbit_s": {literal}'))
        assert refused(path).lines == ["topology.links.0.capacity_gbit_s: Input should be a finite number"]


def test_head_dim_lets_hidden_differ_from_heads_times_head_dim(tmp_path):
    data = campus()
    data["model"].update(hidden=4097, heads=32, kv_heads=8, head_dim=128)
    assert load_instance(write(tmp_path, data)).model_spec.attention_head_dim == 128


def test_bad_model_file_is_named_not_the_instance(tmp_path):
    (tmp_path / "model.json").write_text(json.dumps(json.loads(MODEL.read_text()) | {"vocab": "128256"}))
    data = campus() | {"model": {"file": "model.json"}}
    error = refused(write(tmp_path, data))
    assert error.source == tmp_path / "model.json"
    assert error.lines == ["vocab: Input should be a valid integer, not the string '128256'"]


@pytest.mark.parametrize(("content", "needle"), [
    ("caf\u00e9".encode("latin-1"), "not UTF-8 text"),
    (b'{"name": ', "malformed JSON"),
    (b'{"name": "x", "curves": []}', "gpu_model"),
])
def test_broken_collective_profile_is_named_not_the_model_file(tmp_path, content: bytes, needle: str):
    (tmp_path / "profile.json").write_bytes(content)
    path = write(tmp_path, campus(inline=False) | {"collective_profile": "profile.json"})
    message = str(refused(path))
    assert f"{path}: {tmp_path / 'profile.json'}: " in message and needle in message
    assert "llama3-70b" not in message
