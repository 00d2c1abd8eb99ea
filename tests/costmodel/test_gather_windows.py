"""costmodel.actions.gather_windows and ScheduleOption.regathers_behind_suffixes read off the schedules' real orders:
how many ops wait on an FSDP re-gather per microbatch, and how many follow a suffix's first chunk."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.actions import build_actions, gather_windows
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.spec.search import Schedule


@pytest.mark.parametrize(("schedule", "p", "m"), [(Schedule.one_f_one_b, 2, 2), (Schedule.one_f_one_b, 4, 3),
                                                  (Schedule.gpipe, 2, 4), (Schedule.gpipe, 4, 8)])
def test_without_a_steady_state_every_op_but_the_first_waits_once_per_microbatch(schedule, p, m):
    # 1F1B over no more microbatches than stages, and GPipe, never alternate forwards and backwards: the rank's ops
    # after its first (whose gather is the start's) re-gather once each, over m microbatches. Counted per forward
    # among them instead, 1F1B over 2 stages and 2 microbatches (F0 F1 B0 B1) had three windows per microbatch.
    actions = build_actions(schedule, p, m)
    checked = 0
    for order, windows in zip(actions.order, gather_windows(schedule, p, m), strict=True):
        kinds = [action.kind for action in order]
        if kinds.index("B") < len(kinds) - 1 - kinds[::-1].index("F"):
            continue  # a rank that alternates them (the last ones of 1F1B) has a steady state, counted per forward
        checked += 1
        assert sum(count for _, count in windows) == pytest.approx((len(kinds) - 1) / m)
    assert checked


@pytest.mark.parametrize(("p", "m", "v"), [(2, 2, 4), (2, 4, 2), (4, 8, 2), (4, 4, 4), (3, 6, 3)])
def test_regathers_behind_a_suffix_are_at_most_rank_0_s_own(p, m, v):
    # Each suffix's count is what every rank still re-gathers for after the op finalising the suffix's first chunk
    # starts on rank 0, one prefetched: never more than rank 0's own ops after that op, less one.
    order = build_actions(Schedule.interleaved, p, m, v).order[0]
    last = {a.stage: k for k, a in enumerate(order) if a.kind == "B"}
    firsts = sorted(last.values(), reverse=True)  # the op finalising chunk j (from the end) is firsts[j]
    counts = ScheduleOption(Schedule.interleaved, v).regathers_behind_suffixes(p)
    for j, count in enumerate(counts):
        after = sum(a.kind != "W" for a in order[firsts[j] + 1:])
        assert 0 <= count <= max(0, after - 1)
