"""Paths of a schedule's dependency graph through one boundary (costmodel.stream_paths)."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel import stream_paths as paths
from scaleacross_milp.spec.search import Schedule


def slowest(schedule: Schedule, p: int, m: int, v: int, b: int) -> paths.StreamPath:
    """The path with the most b-transfers (the one that binds on a slow link)."""
    return max(paths.stream_paths(schedule, p, m, v)[b], key=lambda path: path.crossings)


def test_1f1b_on_a_slow_boundary_sends_the_warm_up_forwards_then_every_gradient():
    # 16 ranks, 16 microbatches, boundary 7: p - 1 - b = 8 forwards cross before rank 8's first gradient, then the 16
    # gradients (24 transfers); while forwards remain, every two microbatches add a forward and a backward of ranks
    # 7 and 8 (4 times), and rank 8 runs one more pair before its first gradient; ranks 0-6 run one forward and one
    # backward (the first microbatch's fill, the last one's drain).
    path = slowest(Schedule.one_f_one_b, 16, 16, 1, 7)
    assert path.crossings == 16 + 16 - 1 - 7
    assert path.ops[8] == (5, 5, 5)  # B counts as I and W
    assert path.ops[7] == (5, 5, 5)
    assert all(path.ops[j] == (1, 1, 1) for j in range(7))
    assert all(path.ops[j] == (0, 0, 0) for j in range(9, 16))


def test_few_microbatches_cross_only_as_often_as_they_exist():
    # With fewer microbatches than warm-up forwards every forward crosses before the first gradient: 2m transfers.
    assert slowest(Schedule.one_f_one_b, 16, 4, 1, 0).crossings == 8
    assert slowest(Schedule.gpipe, 8, 7, 1, 3).crossings == 14


def test_zb_v_crosses_each_boundary_twice_per_microbatch():
    # ZB-V's chunk 0 runs down the ranks and chunk 1 back up, so a slow boundary carries 2m transfers a direction,
    # and the path through it takes them all (plus warm-up forwards that cross before the stream turns around).
    path = slowest(Schedule.zb_v, 4, 12, 2, 1)
    assert path.crossings >= 2 * 12


def length(path: paths.StreamPath, weight: float, chunks: int) -> float:
    return sum(sum(ops) for ops in path.ops) / 3 / chunks + path.crossings * weight


@pytest.mark.parametrize("schedule", [Schedule.one_f_one_b, Schedule.zb_h1, Schedule.zb_v, Schedule.gpipe])
@pytest.mark.parametrize("p", [3, 5])
def test_the_steady_state_repeated_is_the_full_graph_s_longest_path(schedule, p):
    # Past steady_after(p) microbatches the paths come from fewer microbatches with their steady state repeated; for
    # every boundary and weight, the longest repeated path is as long as the full graph's.
    v = 2 if schedule is Schedule.zb_v else 1
    for m in range(paths.steady_after(p) + 1, paths.steady_after(p) + 6):
        repeated = paths.stream_paths(schedule, p, m, v)
        full = paths._longest_paths(paths._dependency_graph(schedule, p, m, v, False), v)
        for b in range(p - 1):
            for weight in paths.WEIGHTS:
                assert max(length(path, weight, v) for path in repeated[b]) == pytest.approx(
                    max(length(path, weight, v) for path in full[b]), rel=1e-4)


def test_large_interleaved_schedules_get_no_paths():
    assert paths.stream_paths(Schedule.interleaved, 32, 256, 2) == tuple(() for _ in range(31))
    assert all(paths.stream_paths(Schedule.interleaved, 4, 8, 2))


def test_the_critical_path_of_equal_stages_is_the_textbook_1f1b_makespan():
    # p = 4 equal stages of 1 s per microbatch (F a third, B two thirds), m = 8, free transfers: (m + p - 1) s, along
    # every op of one rank and the fill and drain of the others; a 0.5 s transfer over boundary 1 lengthens it by
    # the transfers the path then takes.
    path = paths.critical_path(Schedule.one_f_one_b, 4, 8, 1, False, [1.0] * 4, [(1 / 3, 1 / 3, 1 / 3)] * 4, [0.0] * 3)
    assert path.length_s == pytest.approx(11.0)
    assert sum(sum(ops) for ops in path.ops) / 3 == pytest.approx(11.0)
    slow = paths.critical_path(Schedule.one_f_one_b, 4, 8, 1, False, [1.0] * 4, [(1 / 3, 1 / 3, 1 / 3)] * 4,
                               [0.0, 0.5, 0.0])
    assert slow.length_s == pytest.approx(sum(sum(ops) for ops in slow.ops) / 3 + 0.5 * slow.crossings[1])
    assert slow.length_s > path.length_s and slow.crossings[1] >= 2
