"""Small two-building Llama 3 8B instances for the baselines."""

from __future__ import annotations

import pytest

from tests.conftest import H100

LINK = {"a": "A", "b": "B", "capacity_gbit_s": 400, "distance_km": 50}


@pytest.fixture
def two_buildings(small_instance):
    """Buildings A and B of `a` and `b` H100s (HBM `hbm_gib`) joined by one 400 Gb/s, 50 km link."""

    def make(a: int, b: int, search=None, hbm_gib: float = H100["hbm_gib"], batch: int = 16, link=None, **training):
        buildings = [{"name": "A", "gpus": a, "gpu_type": "s"}, {"name": "B", "gpus": b, "gpu_type": "s"}]
        return small_instance(buildings, [{**LINK, **(link or {})}], search, gpus=a + b, batch=batch,
                              search_defaults={"time_limit_s": 10}, gpu_types={"s": {**H100, "hbm_gib": hbm_gib}},
                              **training)

    return make
