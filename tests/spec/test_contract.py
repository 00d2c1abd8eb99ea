"""The instance contract rejects inconsistent input with messages naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from scaleacross_milp.loader import load_instance
from scaleacross_milp.spec.instance import Instance

ROOT = Path(__file__).resolve().parents[2]


def campus() -> dict:
    data = json.loads((ROOT / "instances" / "campus-2b-llama3-70b.json").read_text())
    data["model"] = json.loads((ROOT / "models" / "llama3-70b.json").read_text())
    return data


def test_every_bundled_instance_loads():
    for path in sorted((ROOT / "instances").glob("*.json")):
        instance = load_instance(path)
        assert instance.model_spec.layers > 0
        assert len(instance.topology.buildings) >= 2


def test_batch_tokens_must_be_whole_sequences():
    data = campus()
    data["training"]["global_batch_tokens"] = 8192 * 100 + 1
    with pytest.raises(ValidationError, match="not a multiple of seq_len"):
        Instance.model_validate(data)


def test_kernels_default_to_fused_and_reject_other_values():
    data = campus()
    assert Instance.model_validate(data).training.kernels.value == "fused"
    data["training"]["kernels"] = "eager"
    assert Instance.model_validate(data).training.kernels.value == "eager"
    data["training"]["kernels"] = "compiled"
    with pytest.raises(ValidationError, match=r"training\.kernels\n  Input should be 'fused' or 'eager'"):
        Instance.model_validate(data)


def test_link_needs_exactly_one_of_distance_or_latency():
    data = campus()
    data["topology"]["links"][0]["latency_ms"] = 1.0
    with pytest.raises(ValidationError, match="exactly one of distance_km or latency_ms"):
        Instance.model_validate(data)


def test_unknown_gpu_type_is_named():
    data = campus()
    data["topology"]["buildings"][1]["gpu_type"] = "tpu"
    with pytest.raises(ValidationError, match="uses gpu_type 'tpu'"):
        Instance.model_validate(data)


def test_duplicate_building_names_are_rejected():
    data = campus()
    data["topology"]["buildings"][1]["name"] = "A"
    with pytest.raises(ValidationError, match="unique"):
        Instance.model_validate(data)


def test_link_distance_sets_latency():
    link = Instance.model_validate(campus()).topology.links[0]
    assert link.one_way_latency_s == pytest.approx(2 * 4.9e-6 + link.extra_latency_ms / 1e3)


def test_tf32_needs_the_gpu_types_tf32_peak():
    data = campus()
    data["training"]["precision"] = "tf32"
    with pytest.raises(ValidationError, match="tf32"):
        Instance.model_validate(data)
    for gpu_type in data["gpu_types"].values():
        gpu_type["peak_dense_tflops"]["tf32"] = 494
    assert Instance.model_validate(data).training.bytes_per_element == 4
