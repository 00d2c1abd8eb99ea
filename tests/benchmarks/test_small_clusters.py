"""The five-zone scenario of benchmarks/small_clusters.py: a valid instance with every GPU placed in whole nodes."""

from __future__ import annotations

import pytest

from benchmarks.small_clusters import zone_gpus, zones_instance


@pytest.mark.parametrize(("gpus", "zones"), [(160, 5), (400, 5), (1000, 8), (64, 8)])
def test_zones_hold_every_gpu_in_whole_nodes_and_grow_in_size(gpus, zones):
    counts = zone_gpus(gpus, zones)
    assert sum(counts) == gpus and len(counts) == zones
    assert all(count % 8 == 0 and count > 0 for count in counts)
    assert counts[0] <= counts[-1]


def test_the_scenario_links_every_pair_of_zones():
    instance = zones_instance(160, 5)
    assert [b.gpus for b in instance.topology.buildings] == [16, 24, 32, 40, 48]
    assert len(instance.topology.links) == 10
