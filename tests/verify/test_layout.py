"""Layouts checked against their instance: clear errors naming the field, single-building defaults, chaining."""

from __future__ import annotations

import pytest

from scaleacross_milp.spec.instance import InputError
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.verify.layout import resolve

TWO = [{"name": "A", "gpus": 32, "gpu_type": "h100"}, {"name": "B", "gpus": 32, "gpu_type": "h100"}]
LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 10}]


def layout(**overrides) -> Layout:
    data = {"shape": {"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "microbatches": 8}, "schedule": "1f1b",
            "dp_mode": "ddp",
            "stages": [{"stage": 0, "layers": 16, "cells_per_building": {"A": 2, "B": 2}},
                       {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]}
    return Layout.model_validate(data | overrides)


def test_stages_are_chained_within_buildings(tiny):
    resolved = resolve(tiny(buildings=TWO, links=LINK), layout())
    assert [(p.buildings, p.pipelines) for p in resolved.patterns] == [(("A", "A"), 2), (("B", "B"), 2)]


def test_no_placement_puts_everything_in_the_first_building_that_fits(tiny):
    bare = Layout.model_validate({"shape": {"tp": 8, "pp": 4, "dp": 1, "micro_batch": 1, "microbatches": 32},
                                  "schedule": "interleaved", "interleave": 2, "dp_mode": "fsdp"})
    resolved = resolve(tiny(), bare)
    assert [s.layers for s in resolved.stages] == [8, 8, 8, 8]
    assert resolved.patterns[0].buildings == ("A",) * 4
    assert "all stages in building A" in resolved.notes[0]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"stages": [{"stage": 0, "layers": 16, "cells_per_building": {"A": 2, "C": 2}},
                 {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]},
     "stages[0].cells_per_building: unknown building 'C'"),
    ({"stages": [{"stage": 0, "layers": 16, "cells_per_building": {"A": 3, "B": 2}},
                 {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]},
     "stages[0]: 5 cells (40 GPUs), the shape needs dp/ep = 4 cells"),
    ({"stages": [{"stage": 0, "layers": 16, "cells_per_building": {"A": 4}},
                 {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]},
     "building A is over capacity: 48 GPUs placed, it has 32"),
    ({"stages": [{"stage": 0, "layers": 15, "cells_per_building": {"A": 2, "B": 2}},
                 {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]},
     "stages: layers add up to 31, the model has 32"),
    ({"pipelines": [{"buildings": ["A", "B"], "pipelines": 4}]},
     "pipelines: stage 0 is in {'A': 4} by the routes but in {'A': 2, 'B': 2}"),
    ({"shape": {"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "microbatches": 4}},
     "dp x micro_batch x microbatches = 16 sequences, but the instance's global batch is 32"),
    ({"instance": "other"}, "instance: the layout is for 'other', not 'tiny'"),
    ({"transports": {"A-C": "ecmp_go_back_n"}}, "transports: unknown link 'A-C'"),
    ({"transports": {"A-B": "spray_selective_repeat"}}, "'spray_selective_repeat' is not among the link's"),
    ({"dp_mode": "hsdp", "hsdp_replicas": 3}, "hsdp_replicas: HSDP needs replica groups r >= 2 dividing"),
])
def test_mismatched_layout_is_named(tiny, overrides, message):
    with pytest.raises(InputError, match=None) as error:
        resolve(tiny(buildings=TWO, links=LINK), layout(**overrides))
    assert message in str(error.value)
