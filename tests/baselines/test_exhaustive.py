"""Exhaustive enumeration: counts, mirror pruning, a hand-checked optimum and the refusal of a large space."""

from __future__ import annotations

from itertools import islice

import pytest

from scaleacross_milp.baselines import Kind, baseline
from scaleacross_milp.baselines.exhaustive import (
    LIMIT,
    count_layouts,
    layouts,
    placement_count,
    placements,
    route_multisets,
    routings,
)
from scaleacross_milp.baselines.pricing import replay_s
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout

THIN = {"capacity_gbit_s": 1}


def mirrored(layout: Layout) -> Layout:
    swap = {"A": "B", "B": "A"}
    stages = [stage.model_copy(update={"cells_per_building": {swap[k]: n for k, n in stage.cells_per_building.items()}})
              for stage in layout.stages]
    routes = [route.model_copy(update={"buildings": [swap[k] for k in route.buildings]})
              for route in layout.pipelines or []]
    return layout.model_copy(update={"stages": stages, "pipelines": routes or None})


@pytest.mark.parametrize("pp, cells, caps", [(1, 3, (2, 2)), (2, 2, (3, 2)), (3, 2, (2, 2, 3))])
def test_placement_count_matches_the_enumeration(pp, cells, caps):
    assert placement_count(pp, cells, caps) == len(list(placements(pp, cells, caps))) > 0


def test_routings_of_two_split_stages_are_the_straight_and_the_crossed_pair():
    """One cell of each stage in each building: both pipelines stay (A-A, B-B) or both cross (A-B, B-A)."""
    assert sorted(routings(((1, 1), (1, 1)))) == [(((0, 0), 1), ((1, 1), 1)), (((0, 1), 1), ((1, 0), 1))]


@pytest.mark.parametrize("pp, cells, caps", [(1, 3, (2, 2)), (2, 2, (3, 2)), (3, 2, (2, 2, 3)), (2, 4, (5, 4, 3))])
def test_route_count_matches_the_enumeration(pp, cells, caps):
    """route_multisets counts placements with their routes: (2, 2, (3, 2)) has 5 placements, and the one with a
    cell of each stage in each building ((1, 1), (1, 1)) has two routings: 6."""
    assert route_multisets(pp, cells, caps) == sum(len(list(routings(x))) for x in placements(pp, cells, caps))
    assert route_multisets(2, 2, (3, 2)) == 6


def test_exhaustive_finds_the_hand_checked_optimum(two_buildings):
    """TP 8, PP 1, DDP, batch 2 over a 1 Gb/s link, 16 GPUs (2 cells) per building. The space: DP 1 (one cell in A
    or B) and DP 2 (cells (2,0), (1,1), (0,2)): 5 layouts; the swap leaves DP 1 in B, DP 2 all in B and the split,
    3 replayed. DP 2 halves each replica's microbatches against DP 1, and keeping both replicas in one building
    spares the gradient all-reduce the 1 Gb/s link: the optimum is DP 2 in one building."""
    search = {"tp_degrees": [8], "cp_degrees": [1], "pp_degrees": [1], "micro_batch_sizes": [1], "dp_modes": ["ddp"],
              "schedules": ["1f1b"]}
    instance = two_buildings(16, 16, search=search, batch=2, link=THIN)
    assert count_layouts(instance) == (5, True)
    result = baseline(instance, Kind.exhaustive)
    assert result.evaluated == 3
    assert result.layout.shape.dp == 2
    assert [stage.cells_per_building for stage in result.layout.stages] == [{"B": 2}]
    others = [replay_s(instance, layout) for layout in layouts(instance) if layout != result.layout]
    assert len(others) == 2 and all(seconds > result.iteration_s for seconds in others)
    assert result.iteration_s == pytest.approx(replay_s(instance, mirrored(result.layout)), rel=1e-12)


def test_mirror_images_replay_alike(two_buildings):
    """The swap pruning is exact: layouts spanning both buildings (split stages, FSDP, HSDP, DDP) and their mirror
    images replay to the same time."""
    search = {"tp_degrees": [8], "pp_degrees": [2], "micro_batch_sizes": [1], "schedules": ["1f1b"],
              "dp_modes": ["fsdp", "hsdp", "ddp"]}
    instance = two_buildings(32, 32, search=search, batch=8)
    spanning = [layout for layout in layouts(instance)
                if len({k for stage in layout.stages for k in stage.cells_per_building}) == 2
                and layout.stages[0].layers == 16]
    assert {layout.dp_mode.value for layout in spanning} == {"fsdp", "hsdp", "ddp"}
    for layout in islice(spanning, 0, None, 3):
        assert replay_s(instance, layout) == pytest.approx(replay_s(instance, mirrored(layout)), rel=1e-9)


def test_a_large_space_is_refused_with_its_count(two_buildings):
    instance = two_buildings(64, 64, batch=32)
    count, exact = count_layouts(instance, LIMIT)
    assert count > LIMIT and count_layouts(instance)[0] >= count
    with pytest.raises(InputError, match=f"{'at least ' if not exact else ''}{count:,} layouts, above the limit of "
                                         f"{LIMIT:,}"):
        baseline(instance, Kind.exhaustive)
