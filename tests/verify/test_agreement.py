"""MILP vs verifier on every bundled instance (the two 131,072-GPU ones included) and on generated small
instances: whatever plan solve returns, the replay is never more optimistic than the tolerance, and the difference
beyond it is explained by measured effects."""

from __future__ import annotations

import pytest

from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.verify.verifier import TOLERANCE, verify
from tests.conftest import BUNDLED, OWN_TIME_LIMIT, bundled_params

TWO = [{"name": "A", "gpus": 32, "gpu_type": "h100", "pod_gpus": 16, "oversubscription": 2.0},
       {"name": "B", "gpus": 32, "gpu_type": "h100"}]


def link(**kw) -> list[dict]:
    return [{"a": "A", "b": "B", "paths": 8, **kw}]


GENERATED = {
    "one-building": dict(),
    "near-1f1b": dict(buildings=TWO, links=link(capacity_gbit_s=3200, distance_km=10),
                      search={"schedules": ["1f1b"], "dp_modes": ["ddp"]}),
    "far-thin-interleaved": dict(buildings=TWO, links=link(capacity_gbit_s=400, distance_km=800),
                                 search={"schedules": ["interleaved", "gpipe"]}),
    "lossy-zb-h1": dict(buildings=TWO, links=link(capacity_gbit_s=1600, distance_km=80, loss_rate=1e-4,
                                                 transports=["ecmp_go_back_n", "ecmp_selective_repeat"]),
                        search={"schedules": ["zb-h1", "1f1b"], "dp_modes": ["hsdp", "fsdp-no-reshard"]}),
    "full-recompute-zb-v": dict(buildings=TWO, links=link(capacity_gbit_s=6400, distance_km=2), recompute="full",
                                search={"schedules": ["zb-v"]}),
}


def check(plan, instance) -> None:
    verification, _ = verify(instance, plan)
    predicted = plan.prediction.iteration_s
    assert verification.predicted_s == predicted
    assert verification.iteration_s >= predicted * (1 - TOLERANCE), verification
    assert abs(verification.residual_s) <= TOLERANCE * predicted, verification
    explained = sum(e.seconds for e in verification.effects)
    assert verification.difference_s == pytest.approx(explained + verification.residual_s)
    for effect in verification.effects:
        assert effect.seconds > 0 and effect.detail
    parts = verification.breakdown
    assert sum(parts.model_dump().values()) == pytest.approx(verification.iteration_s)


def test_every_bundled_instance_is_checked():
    assert set(OWN_TIME_LIMIT) <= set(BUNDLED)


@pytest.mark.parametrize("name", bundled_params())
def test_bundled_instance_agrees_or_is_explained(name, solved_bundled):
    instance, plan = solved_bundled(name)
    check(plan, instance)


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_instance_agrees_or_is_explained(name, tiny):
    instance = tiny(**GENERATED[name])
    check(solve_instance(instance, time_limit_s=10, threads=2), instance)
