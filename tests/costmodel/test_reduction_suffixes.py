"""ScheduleOption.reduction_suffixes read off the schedules' real orders (costmodel.actions): the credit of each
suffix of a rank's chunks is the time of the ops that follow the op finalising its first chunk, plus that op."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.actions import build_actions
from scaleacross_milp.costmodel.costs import OpTimes
from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.spec.search import Schedule

LAYER = OpTimes(forward_s=1.0, backward_input_s=1.3, backward_weight_s=0.7)


def flat(pairs) -> list[float]:
    return [x for pair in pairs for x in pair]


def measured_suffixes(schedule: Schedule, p: int, m: int, v: int, rank: int = 0) -> list[tuple[float, float]]:
    """(share, credit) from `rank`'s order: chunks ordered by the end of the op that finalises them (B, or W when
    split), each suffix's credit the ops from that op on, in units of a stage's time per microbatch."""
    actions = build_actions(schedule, p, m, v)
    ops = actions.order[rank]
    final = "W" if any(a.kind == "W" for a in ops) else "B"
    last = {a.stage: k for k, a in enumerate(ops) if a.kind == final}
    chunks = len(last)
    op_s = {"F": LAYER.forward_s, "I": LAYER.backward_input_s, "W": LAYER.backward_weight_s,
            "B": LAYER.backward_input_s + LAYER.backward_weight_s}
    stage_s = chunks * (LAYER.forward_s + LAYER.backward_input_s + LAYER.backward_weight_s)
    order = sorted(last.values(), reverse=True)
    return [((j + 1) / chunks, sum(op_s[a.kind] for a in ops[k:]) / stage_s) for j, k in enumerate(order)]


@pytest.mark.parametrize(("p", "m", "v"), [(2, 2, 4), (2, 4, 2), (4, 8, 2), (4, 4, 4), (4, 12, 3), (8, 16, 2)])
def test_interleaved_chunks_reduce_p_chunk_backwards_apart(p, m, v):
    option = ScheduleOption(Schedule.interleaved, v)
    measured = measured_suffixes(Schedule.interleaved, p, m, v)
    assert flat(option.reduction_suffixes(p, LAYER)) == pytest.approx(flat(measured))


@pytest.mark.parametrize(("p", "m"), [(2, 2), (2, 8), (4, 4), (4, 16), (8, 8), (3, 5)])
def test_zb_v_s_head_chunk_reduces_behind_p_input_and_weight_backwards(p, m):
    option = ScheduleOption(Schedule.zb_v, 2)
    assert flat(option.reduction_suffixes(p, LAYER)) == pytest.approx(flat(measured_suffixes(Schedule.zb_v, p, m, 2)))


@pytest.mark.parametrize(("schedule", "final"), [(Schedule.one_f_one_b, 2.0), (Schedule.gpipe, 2.0),
                                                 (Schedule.zb_h1, 0.7)])
def test_one_chunk_hides_behind_its_last_finalising_op(schedule, final):
    assert flat(ScheduleOption(schedule).reduction_suffixes(4, LAYER)) == pytest.approx([1.0, final / 3.0])


@pytest.mark.parametrize(("p", "m"), [(2, 3), (4, 8), (8, 16), (3, 5)])
def test_zb_v_s_other_ranks_hide_their_first_chunk_behind_as_many_weight_backwards_as_their_rank(p, m):
    option = ScheduleOption(Schedule.zb_v, 2)
    for rank in range(1, p):
        measured = measured_suffixes(Schedule.zb_v, p, m, 2, rank)
        assert flat(option.reduction_suffixes(p, LAYER, rank)) == pytest.approx(flat(measured))
    assert option.reduction_suffixes(p, LAYER, 1)[-1][1] < option.reduction_suffixes(p, LAYER, 0)[-1][1]


@pytest.mark.parametrize(("schedule", "v"), [(Schedule.interleaved, 2), (Schedule.interleaved, 4),
                                             (Schedule.one_f_one_b, 1), (Schedule.zb_h1, 1), (Schedule.gpipe, 1)])
def test_every_rank_of_the_other_schedules_hides_its_reduction_as_rank_0_does(schedule, v):
    p, m = 4, 8
    option = ScheduleOption(schedule, v)
    for rank in range(p):
        assert flat(option.reduction_suffixes(p, LAYER, rank)) == pytest.approx(
            flat(measured_suffixes(schedule, p, m, v, rank)))
