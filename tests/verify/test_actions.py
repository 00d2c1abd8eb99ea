"""Schedule orders replayed with equal op times and no communication against hand-computed makespans, and the
torchtitan CSV reader."""

from __future__ import annotations

import pytest

from scaleacross_milp.spec.instance import InputError
from scaleacross_milp.spec.search import Schedule
from scaleacross_milp.verify.actions import build_actions, check_actions, read_csv, write_csv
from scaleacross_milp.verify.replay import DeadlockError


def test_1f1b_p4_m8_has_the_textbook_bubble(makespan):
    # F = 1, B = I + W = 1: (m + p - 1)(F + B) = 11 x 2; the bubble (p - 1)(F + B) = 6 is 27 % of 22.
    assert makespan(build_actions(Schedule.one_f_one_b, 4, 8), 1.0, 0.5, 0.5) == pytest.approx(22.0)


def test_gpipe_runs_all_forwards_then_all_backwards(makespan):
    # forward phase (m + p - 1) F, then backward phase (m + p - 1) B: 11 x (1 + 2)
    assert makespan(build_actions(Schedule.gpipe, 4, 8), 1.0, 1.0, 1.0) == pytest.approx(33.0)


def test_interleaved_divides_the_bubble_by_v(makespan):
    # v = 2 chunks of half a stage: work m (F + B) = 16, bubble (p - 1)(F + B) / v = 3
    assert makespan(build_actions(Schedule.interleaved, 4, 8, 2), 0.5, 0.25, 0.25) == pytest.approx(19.0)


def test_zb_h1_bubble_is_p_minus_1_times_f_plus_i_minus_w(makespan):
    # Qi et al.: m (F + I + W) + (p - 1)(F + I - W) = 24 + 3
    assert makespan(build_actions(Schedule.zb_h1, 4, 8), 1.0, 1.0, 1.0) == pytest.approx(27.0)


@pytest.mark.parametrize("m", [8, 16])
def test_zb_v_only_fills(makespan, m):
    # V-shaped map: the last rank waits (p - 1) chunk forwards for its first input, then never idles;
    # work m x 2 chunks x (F + I + W)
    actions = build_actions(Schedule.zb_v, 4, m)
    assert actions.rank_of == (0, 1, 2, 3, 3, 2, 1, 0)
    assert makespan(actions, 0.5, 0.5, 0.5) == pytest.approx(m * 2 * 1.5 + 3 * 0.5)


@pytest.mark.parametrize(("schedule", "v"), [(Schedule.gpipe, 1), (Schedule.one_f_one_b, 1),
                                             (Schedule.interleaved, 4), (Schedule.zb_h1, 1), (Schedule.zb_v, 2)])
@pytest.mark.parametrize(("p", "m"), [(2, 2), (4, 4), (3, 9)])
def test_every_schedule_runs_every_action_once(schedule, v, p, m, makespan):
    if schedule is Schedule.interleaved and m % p:
        pytest.skip("interleaving needs m divisible by p")
    actions = build_actions(schedule, p, m, v)
    assert check_actions(actions) == []
    assert makespan(actions, 1.0, 1.0, 1.0) >= m * actions.chunks * 3.0


def test_csv_round_trip(tmp_path, makespan):
    actions = build_actions(Schedule.zb_v, 4, 8)
    path = tmp_path / "zbv.csv"
    write_csv(actions, path)
    assert path.read_text().splitlines()[0].startswith("0F0,0F1,")
    loaded = read_csv(path, 4, 8)
    assert loaded.order == actions.order and loaded.rank_of == actions.rank_of
    assert makespan(loaded, 0.5, 0.5, 0.5) == makespan(actions, 0.5, 0.5, 0.5)


def test_csv_lowered_format_skips_communication_actions(tmp_path):
    path = tmp_path / "lowered.csv"
    path.write_text("0F0,0SEND_F0,0RECV_B0,0B0,0UNSHARD\n1RECV_F0,1F0,1B0,1SEND_B0\n")
    loaded = read_csv(path, 2, 1)
    assert [str(a) for a in loaded.order[0]] == ["0F0", "0B0"]


def test_csv_missing_action_names_line(tmp_path):
    path = tmp_path / "missing.csv"
    path.write_text("0F0,0F1,0I0,0W0,0I1\n1F0,1I0,1W0,1F1,1I1,1W1\n")
    with pytest.raises(InputError, match=r"missing.csv: line 1: action 0W1 is missing"):
        read_csv(path, 2, 2)


def test_csv_duplicated_action_names_both_lines(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("0F0,,0B0\n1F0,1B0,1B0\n")
    with pytest.raises(InputError, match=r"line 2: action 1B0 is duplicated \(first on line 2\)"):
        read_csv(path, 2, 1)


def test_csv_bad_cell_names_line_and_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("0F0,0X0\n1F0,1B0\n")
    with pytest.raises(InputError, match=r"line 1, column 2: '0X0' is not an action"):
        read_csv(path, 2, 1)


def test_csv_wrong_rank_count(tmp_path):
    path = tmp_path / "ranks.csv"
    path.write_text("0F0,0B0\n")
    with pytest.raises(InputError, match="1 ranks \\(rows\\) but the layout has pp = 2"):
        read_csv(path, 2, 1)


def test_csv_order_that_deadlocks_is_reported(tmp_path, makespan):
    path = tmp_path / "deadlock.csv"
    path.write_text("0F0,0B0\n1B0,1F0\n")  # rank 1 runs the backward before the forward it needs
    with pytest.raises(DeadlockError, match="deadlocks"):
        makespan(read_csv(path, 2, 1), 1.0, 1.0, 1.0)
