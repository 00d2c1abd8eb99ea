"""Small real instances for the MILP tests, built from the bundled files."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaleacross_milp.loader import load_instance
from scaleacross_milp.spec.instance import Instance

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundled():
    def load(name: str) -> Instance:
        return load_instance(ROOT / "instances" / f"{name}.json")
    return load


@pytest.fixture
def tiny(small_instance):
    """An instance from keyword overrides on a one-building (8 GPUs) Llama 3 8B job, solved to optimality."""

    def make(buildings=None, links=None, search=None, gpu_types=None, **training) -> Instance:
        return small_instance(buildings, links, search, gpus=8, batch=16, gpu_types=gpu_types,
                              search_defaults={"time_limit_s": 30, "rel_gap": 0.0}, **training)

    return make
