"""Small real instances for the MILP tests, built from the bundled files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleacross_milp.spec.instance import Instance, load_instance

ROOT = Path(__file__).resolve().parents[2]
H100 = {"peak_dense_tflops": {"bf16": 989}, "hbm_gib": 79.6, "hbm_tbyte_s": 3.35,
        "nvlink_domain_gpus": 8, "nvlink_gbyte_s": 370, "nic_gbit_s": 400}


@pytest.fixture
def bundled():
    def load(name: str) -> Instance:
        return load_instance(ROOT / "instances" / f"{name}.json")
    return load


@pytest.fixture
def tiny():
    """An instance from keyword overrides on a one-building Llama 3 8B job."""

    def make(buildings=None, links=None, search=None, **training) -> Instance:
        data = {
            "name": "tiny",
            "model": json.loads((ROOT / "models" / "llama3-8b.json").read_text()),
            "training": {"seq_len": 8192, "global_batch_sequences": 16, "recompute": "selective", **training},
            "gpu_types": {"h100": H100},
            "topology": {"buildings": buildings or [{"name": "A", "gpus": 8, "gpu_type": "h100"}],
                         "links": links or []},
            "search": {"time_limit_s": 30, "rel_gap": 0.0, **(search or {})},
        }
        return Instance.model_validate(data)

    return make
