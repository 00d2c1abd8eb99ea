"""Golden objectives (as GridPath keeps them): every bundled instance's optimal iteration time, predicted by the MILP
and replayed by the verifier, stored in tests/golden/bundled.json. A change that moves any plan shows up here as
a diff a reviewer reads; `pytest tests/test_golden.py --update-golden` (add `-m ''` for the 131k instances)
rewrites the entries this run solved.

Each solve proves its optimum lies in [T (1 - gap), T] (T its incumbent); the golden run proved the same for its
own incumbent, so the two intervals must overlap. Where the plan is the golden one (same layout, same placement of
stages, routes and transports, and the same MILP time), the replay is deterministic and must reproduce the golden
verified time. A solve stopped at its gap may return another placement of equal MILP time, which replays
differently; the placement fingerprint tells the two apart."""

from __future__ import annotations

import hashlib
import json

import pytest

from scaleacross_milp.spec.plan import Plan
from scaleacross_milp.verify.verifier import verify
from tests.conftest import BUNDLED, ROOT, bundled_params

GOLDEN = ROOT / "tests" / "golden" / "bundled.json"
SAME = 1e-6
"""Relative difference below which two MILP times are the same plan's (HiGHS's feasibility tolerance is 1e-7)."""


def placement_fingerprint(plan: Plan) -> str:
    """12 hex digits identifying where the plan puts its stages, how its pipelines are routed, and the transports."""
    decisions = {"stages": [stage.model_dump(mode="json") for stage in plan.stages],
                 "pipelines": [route.model_dump(mode="json") for route in plan.pipelines],
                 "transports": {key: transport.value for key, transport in sorted(plan.link_transports().items())}}
    return hashlib.sha256(json.dumps(decisions, sort_keys=True).encode()).hexdigest()[:12]


def _load() -> dict[str, dict]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def test_every_bundled_instance_has_a_golden_entry(request):
    if request.config.getoption("--update-golden"):
        pytest.skip("rewriting the golden file")
    assert sorted(_load()) == BUNDLED


@pytest.mark.parametrize("name", bundled_params())
def test_bundled_optimum_matches_the_golden_one(name, solved_bundled, request):
    instance, plan = solved_bundled(name)
    verification, _ = verify(instance, plan)
    layout = f"{plan.shape.label()} {plan.schedule.value} v{plan.interleave} {plan.dp_mode.value}"
    now = {"layout": layout, "placement": placement_fingerprint(plan), "milp_s": plan.prediction.iteration_s,
           "gap": plan.solve.rel_gap, "verified_s": verification.iteration_s}
    if request.config.getoption("--update-golden"):
        golden = _load()
        golden[name] = now
        GOLDEN.write_text(json.dumps(dict(sorted(golden.items())), indent=2) + "\n")
        return
    old = _load()[name]
    assert now["milp_s"] >= old["milp_s"] * (1 - old["gap"]) * (1 - SAME), (now, old)
    assert old["milp_s"] >= now["milp_s"] * (1 - now["gap"]) * (1 - SAME), (now, old)
    same_plan = (now["layout"], now["placement"]) == (old["layout"], old.get("placement"))
    if same_plan and now["milp_s"] == pytest.approx(old["milp_s"], rel=SAME):
        assert now["verified_s"] == pytest.approx(old["verified_s"], rel=SAME), (now, old)
