"""Single-dimension coordinate descent: recorded steps, never slower than production."""

from __future__ import annotations

import pytest

from scaleacross_milp.baselines import Kind, baseline, single_dimension
from scaleacross_milp.baselines.pricing import replay_s

SEARCH = {"tp_degrees": [8], "pp_degrees": [1, 2], "micro_batch_sizes": [1], "time_limit_s": 5}


def test_single_dimension_leaves_a_thin_link_and_records_its_steps(two_buildings):
    """A 40 + B 24 GPUs over a 1 Gb/s link: production spreads DP 8 over both buildings (5 + 3 cells), so each
    step's gradient synchronisation crosses the link; the placement step moves every cell into one building,
    and the descent ends once the other two dimensions have brought nothing since."""
    instance = two_buildings(40, 24, search=SEARCH, link={"capacity_gbit_s": 1})
    start = baseline(instance, Kind.production)
    assert [s.cells_per_building for s in start.layout.stages] == [{"A": 5, "B": 3}]
    result = baseline(instance, Kind.single_dimension)
    assert result.steps[0].dimension == "start" and result.steps[0].iteration_s == start.iteration_s
    assert result.steps[1].dimension == "placement" and result.steps[1].change != "no change"
    assert len({k for s in result.layout.stages for k in s.cells_per_building}) == 1
    times = [step.iteration_s for step in result.steps]
    assert times == sorted(times, reverse=True)
    last_change = max(i for i, step in enumerate(result.steps) if step.change != "no change")
    assert [step.change for step in result.steps[last_change + 1:]] == ["no change"] * 2
    assert result.iteration_s == pytest.approx(times[-1], rel=1e-12)
    assert result.iteration_s < start.iteration_s / 2


def test_the_descent_replays_each_distinct_layout_once(two_buildings, monkeypatch):
    # The steps meet the same layouts again (the current one among the transports' candidates, the placement the
    # MILP returns unchanged): each is replayed once (`single_dimension.Replays`), yet the result is the same.
    link = {"capacity_gbit_s": 3200, "transports": ["ecmp_go_back_n", "spray_selective_repeat"]}
    instance = two_buildings(32, 32, search=SEARCH, link=link)
    expected = baseline(instance, Kind.single_dimension)
    replayed = []
    monkeypatch.setattr(single_dimension, "replay_s",
                        lambda i, lay: replayed.append(lay.model_dump_json()) or replay_s(i, lay))
    result = baseline(instance, Kind.single_dimension)
    assert len(replayed) == len(set(replayed)) > 3
    assert result.iteration_s == expected.iteration_s and result.steps == expected.steps


def test_single_dimension_is_never_slower_than_production(two_buildings):
    """On a fat link with a spraying option: every step is taken only when the replay is faster."""
    link = {"capacity_gbit_s": 3200, "transports": ["ecmp_go_back_n", "spray_selective_repeat"]}
    instance = two_buildings(32, 32, search=SEARCH, link=link)
    start = baseline(instance, Kind.production)
    result = baseline(instance, Kind.single_dimension)
    assert result.iteration_s <= start.iteration_s
    assert result.steps[0].iteration_s == start.iteration_s


def test_transports_go_link_by_link_beyond_the_product_limit(small_instance, monkeypatch):
    """Three buildings in a chain, both links lossy (go-back-N resends whole windows, spraying pools the paths):
    production's ECMP layout spans all three. Link by link (the limit forced below the 9 combinations) reaches
    the best of every combination (through the uniform choices first: neither link alone gains), in 3 + 2 x 2
    replays per sweep rather than 9."""
    link = {"capacity_gbit_s": 400, "distance_km": 500, "loss_rate": 1e-3, "paths": 8,
            "transports": ["ecmp_go_back_n", "ecmp_selective_repeat", "spray_selective_repeat"]}
    buildings = [{"name": n, "gpus": 24, "gpu_type": "h100"} for n in "ABC"]
    instance = small_instance(buildings, [{**link, "a": "A", "b": "B"}, {**link, "a": "B", "b": "C"}],
                              {**SEARCH, "pp_degrees": [1]}, gpus=72, batch=18, search_defaults={})
    layout = baseline(instance, Kind.production).layout
    assert len({b for s in layout.stages for b in s.cells_per_building}) == 3
    start_s = replay_s(instance, layout)
    product, product_s = single_dimension.best_transports(single_dimension.Replays(instance), layout, start_s)
    replays = []
    monkeypatch.setattr(single_dimension, "TRANSPORT_PRODUCT_LIMIT", 1)
    monkeypatch.setattr(single_dimension, "replay_s", lambda i, lay: replays.append(lay) or replay_s(i, lay))
    by_link, by_link_s = single_dimension.best_transports(single_dimension.Replays(instance), layout, start_s)
    assert product_s < start_s and by_link_s == pytest.approx(product_s, rel=1e-9)
    assert by_link.link_transports() == product.link_transports()
    assert (len(replays) - 3) % 4 == 0 and len(replays) < 9 * 2
