"""Screening: necessary conditions on byte counts, compute floors, and the bound kept valid under a deadline."""

from __future__ import annotations

import pytest

from scaleacross_milp.milp.bounds import lower_bound_s
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.screen import screen
from scaleacross_milp.milp.solve import MAX_BUILDINGS, solve_instance
from scaleacross_milp.milp.work import WorkClock
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError


def test_compute_floor_never_exceeds_the_screening_bound(bundled):
    # The floor orders the queue and bounds unpriced shapes, so it must stay below each shape's priced bound.
    instance = bundled("dp-out-2b-far-llama3-8b")
    screening = screen(instance, route_table(instance.topology))
    assert screening.candidates
    for candidate in screening.candidates:
        ctx = screening.context(candidate)
        assert 0 < candidate.floor_s <= lower_bound_s(ctx, ctx.pairs) * (1 + 1e-12)


def test_deadline_leaves_shapes_unscreened_under_a_valid_bound(bundled):
    # A work budget already spent screens shapes until one passes; the bound over the rest is at most the priced
    # bound of every candidate the full screening finds among them.
    instance = bundled("dp-out-2b-far-llama3-8b")
    routes = route_table(instance.topology)
    spent = WorkClock(1.0, 60.0, spent_s=1.0)
    full, cut = screen(instance, routes), screen(instance, routes, spent)
    assert spent.spent_s > 1.0  # charged what it screened
    assert len(cut.candidates) == 1 and cut.unscreened > 0
    screened = cut.total - cut.unscreened
    assert screened == cut.no_schedule + cut.no_dp_variant + cut.no_capacity + len(cut.no_memory) + 1
    seen = {cut.candidates[0].index}
    rest = [c for c in full.candidates if c.index not in seen]
    for candidate in rest:
        full.context(candidate)
    assert rest and cut.unscreened_bound_s <= min(candidate.bound_s for candidate in rest)


def test_more_buildings_than_supported_are_refused_up_front(bundled):
    base = bundled("dp-out-2b-far-llama3-8b")
    names = [f"b{k}" for k in range(MAX_BUILDINGS + 1)]
    data = base.model_dump(mode="json", exclude_none=True)
    data["topology"] = {
        "buildings": [{"name": name, "gpus": 8, "gpu_type": "h100-sxm"} for name in names],
        "links": [{"a": names[0], "b": name, "capacity_gbit_s": 400, "distance_km": 1} for name in names[1:]],
    }
    with pytest.raises(InputError, match=f"at most {MAX_BUILDINGS}"):
        solve_instance(Instance.model_validate(data), time_limit_s=1.0)
