"""The instance generator: deterministic per seed, always a valid instance, and covering the ranges it states."""

from __future__ import annotations

import json

import pytest

from scaleacross_milp.generate import (
    GPU_CHOICES,
    SIZES,
    Size,
    batch_divides,
    generate,
    generate_instance,
    link_class,
    model_params,
)
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.topology import Link

SEEDS = range(300)


@pytest.fixture(scope="module")
def medium() -> list[Instance]:
    return [generate_instance(seed, Size.medium) for seed in SEEDS]


def test_same_seed_same_instance_and_seeds_differ():
    assert json.dumps(generate(7, "small")) == json.dumps(generate(7, "small"))
    assert generate(7, "small") != generate(8, "small")
    assert generate(7, "small") != generate(7, "medium")


@pytest.mark.parametrize("size", list(Size))
def test_every_instance_passes_the_contract_within_its_size(size):
    bounds = SIZES[size]
    for seed in SEEDS if size is not Size.large else range(60):
        instance = Instance.model_validate(generate(seed, size))
        gpus = [b.gpus for b in instance.topology.buildings]
        assert bounds.min_gpus <= sum(gpus) <= bounds.max_gpus, (seed, gpus)
        assert 2 <= len(gpus) <= bounds.max_buildings
        assert len(set(gpus)) > 1, f"seed {seed}: equal buildings {gpus}"
        assert all(g % 8 == 0 for g in gpus)
        assert model_params()[instance.model_spec.name] <= bounds.max_params
        assert instance.search.time_limit_s == bounds.time_limit_s
        ends = [frozenset((link.a, link.b)) for link in instance.topology.links]
        assert len(ends) == len(set(ends)), f"seed {seed}: two links join the same buildings"


def test_medium_covers_the_stated_ranges(medium):
    counts = [len(i.topology.buildings) for i in medium]
    assert min(counts) == 2 and max(counts) == 16
    totals = [sum(b.gpus for b in i.topology.buildings) for i in medium]
    assert min(totals) <= 128 and 2048 <= max(totals) <= 4096
    types = [{b.gpu_type for b in i.topology.buildings} for i in medium]
    assert set().union(*types) == set(GPU_CHOICES)
    assert any(len(t) == 3 for t in types) and any(len(t) == 1 for t in types)
    links = [link for i in medium for link in i.topology.links]
    assert {link_class(link) for link in links} == {"campus", "metro", "continental"}
    assert any(link.capacity_gbit_s <= 400 for link in links)
    assert any(link.loss_rate >= 1e-4 for link in links) and any(link.loss_rate == 0 for link in links)
    assert {len(link.transports) for link in links} == {1, 2}
    assert {link.paths for link in links} >= {1, 64} and {link.queue_pairs_per_connection for link in links} >= {1, 16}
    assert any(b.oversubscription >= 7 for i in medium for b in i.topology.buildings)
    moe = [i.model_spec.moe is not None for i in medium]
    assert any(moe) and not all(moe)
    divides = [batch_divides(i) for i in medium]
    assert any(divides) and not all(divides)


def test_large_reaches_a_quarter_million_gpus_over_16_buildings():
    largest = max((generate_instance(seed, Size.large) for seed in range(60)),
                  key=lambda i: sum(b.gpus for b in i.topology.buildings))
    assert sum(b.gpus for b in largest.topology.buildings) > 100_000


def test_link_classes_follow_the_distance():
    def link(km: float) -> Link:
        return Link(a="A", b="B", capacity_gbit_s=100, distance_km=km)

    # 10 us of switching (extra_latency_ms) counts as 2 km of fiber
    assert [link_class(link(km)) for km in (0.3, 5, 10, 80, 300, 3000)] == [
        "campus", "campus", "metro", "metro", "continental", "continental"]


def test_batch_divides_the_nodes_or_not():
    data = generate(0, "small")
    data["topology"]["buildings"] = [{"name": "A", "gpus": 64, "gpu_type": "h100-80gb"},
                                     {"name": "B", "gpus": 32, "gpu_type": "h100-80gb"}]
    data["topology"]["links"] = [{"a": "A", "b": "B", "capacity_gbit_s": 400, "distance_km": 1}]
    data["gpu_types"] = {"h100-80gb": GPU_CHOICES["h100-80gb"].model_dump(mode="json")}

    def divides(batch: int) -> bool:
        data["training"] = {"seq_len": 4096, "global_batch_sequences": batch}
        return batch_divides(Instance.model_validate(data))

    # 96 GPUs = 12 nodes of 8
    assert [divides(b) for b in (12, 24, 36, 16, 18, 509)] == [True, True, True, False, False, False]
