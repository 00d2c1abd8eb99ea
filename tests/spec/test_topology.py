"""Looking up buildings by name."""

from __future__ import annotations

import pytest

from scaleacross_milp.spec.topology import Topology


def test_building_lookup_follows_a_copy_that_replaces_the_buildings():
    # The name index is kept beside the model; a model_copy that swaps the buildings list must not read the old one.
    topology = Topology(buildings=[{"name": "A", "gpus": 16, "gpu_type": "h100"}], links=[])
    assert topology.building("A").gpus == 16
    grown = topology.model_copy(update={"buildings": [topology.buildings[0].model_copy(update={"gpus": 32})]})
    assert grown.building("A").gpus == 32 and topology.building("A").gpus == 16
    with pytest.raises(KeyError):
        topology.building("B")
