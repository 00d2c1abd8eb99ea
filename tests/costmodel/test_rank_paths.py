"""ZB-H1's rank paths (ScheduleOption.rank_paths) against the replayed graph's longest path (stream_paths)."""

from __future__ import annotations

import random

import pytest

from scaleacross_milp.costmodel.schedule import ScheduleOption
from scaleacross_milp.costmodel.stream_paths import critical_path
from scaleacross_milp.spec.search import Schedule

SHARES = (0.3, 0.35, 0.35)


def longest_rank_path(p: int, m: int, stage_s: list[float]) -> float:
    return max(sum(sum(n * f for n, f in zip(counts, SHARES, strict=True)) * s
                   for counts, s in zip(path, stage_s, strict=True))
               for path in ScheduleOption(Schedule.zb_h1).rank_paths(p, m))


def graph_s(p: int, m: int, stage_s: list[float]) -> float:
    return critical_path(Schedule.zb_h1, p, m, 1, False, stage_s, [SHARES] * p, [0.0] * (p - 1)).length_s


@pytest.mark.parametrize(("p", "m"), [(2, 2), (4, 4), (4, 9), (8, 11), (8, 30), (12, 13)])
def test_the_rank_paths_are_the_longest_whenever_one_rank_is_the_slowest(p, m):
    for r in range(p):
        stage_s = [1.0] * p
        stage_s[r] = 1.5
        assert longest_rank_path(p, m, stage_s) == pytest.approx(graph_s(p, m, stage_s))
    assert longest_rank_path(p, m, [1.0] * p) == pytest.approx(graph_s(p, m, [1.0] * p))


def test_a_front_heavy_pipeline_is_priced_below_the_zero_bubble_formula():
    # stage 0 half again as slow as the others runs its steady state while they fill: the formula's m max + beta (S -
    # max), exact at equal stages, charges 3.9 % more than the longest path
    p, m, stage_s = 8, 11, [1.5, 1, 1, 1, 1, 1, 1, 1]
    f, i, w = SHARES
    formula = m * max(stage_s) + (f + i - w) * (sum(stage_s) - max(stage_s))
    assert longest_rank_path(p, m, stage_s) == pytest.approx(graph_s(p, m, stage_s))
    assert longest_rank_path(p, m, stage_s) < 0.97 * formula


def test_every_rank_path_is_a_path_at_any_stage_times():
    rng = random.Random(7)
    for p, m in [(4, 6), (8, 11), (16, 23)]:
        for _ in range(30):
            stage_s = [rng.choice([0.3, 0.6, 1.0, 1.5, 2.0]) for _ in range(p)]
            assert longest_rank_path(p, m, stage_s) <= graph_s(p, m, stage_s) * (1 + 1e-9)


def test_other_schedules_have_none():
    assert ScheduleOption(Schedule.one_f_one_b).rank_paths(8, 11) == ()
    assert ScheduleOption(Schedule.zb_h1).rank_paths(1, 4) == ()
