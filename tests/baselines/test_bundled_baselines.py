"""On every bundled instance the optimiser's plan, replayed, is no slower than any baseline's (issue 14), beyond its own
proven gap and the MILP's pricing tolerance: the plan is optimal in the MILP's prices only to within the solve's
gap, and the MILP prices a layout within PRICING_TOLERANCE of its replay, so a baseline the replay puts ahead by
less than gap + that tolerance is not a miss (metro-4b at a 15 s limit: single-dimension 1.7 % ahead, gap 3 %;
the 131k-GPU DeepSeek-V3 at its 60 s limit: single-dimension's layout, the same shape and schedule, 4.0 % ahead,
gap 2.7 %, the plan priced 2.6 % below its replay: its cross-building pipeline sends, 31 ms priced, 94 ms replayed).

Exhaustive is refused on every bundled instance (far above its limit). On the two 131,072-GPU instances (slow)
single-dimension takes about four and a half minutes (DeepSeek-V3: since session 41 its placement solve returns
another placement and the descent replays more 131k-GPU candidates, 5-10 s each; 32 s before, nine minutes until
session 42 replayed each layout once and stopped the descent one round earlier) and three (Llama 3 405B) on 2 cores."""

from __future__ import annotations

import pytest

from scaleacross_milp.baselines import Kind, baseline
from scaleacross_milp.verify.verifier import verify
from tests.conftest import BUNDLED_TIME_LIMIT_S, bundled_params

PRICING_TOLERANCE = 0.03
"""How far the MILP may misprice a plan against its replay: issue 12's worst-case agreement target, which the
bundled plans meet (worst 2.6 %, DeepSeek-V3 at 131k GPUs; README, How it decides)."""


SLOW_BASELINES = ("metro-4b-llama3-405b", "pp-out-2b-thin-link-llama3-70b")
"""Their baselines take 30-45 s on 2 cores (single-dimension's descent replays many candidates): run with the slow set,
as the 131,072-GPU ones, so the default suite stays within five minutes."""


@pytest.mark.parametrize("name", bundled_params(also_slow=SLOW_BASELINES))
def test_the_plan_is_no_slower_than_any_baseline(name, solved_bundled):
    instance, plan = solved_bundled(name)
    verified = verify(instance, plan)[0].iteration_s
    kinds = [Kind.production, Kind.framework, Kind.single_dimension]
    times = {kind.value: baseline(instance, kind, BUNDLED_TIME_LIMIT_S).iteration_s for kind in kinds}
    floor = verified * (1 - plan.solve.rel_gap - PRICING_TOLERANCE)
    assert all(time_s >= floor for time_s in times.values()), (verified, plan.solve.rel_gap, times)
