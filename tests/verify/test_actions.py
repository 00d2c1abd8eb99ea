"""Schedule orders replayed with equal op times and no communication against hand-computed makespans, and the
torchtitan CSV reader."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.actions import build_actions, check_actions, read_csv, write_csv
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.search import Schedule
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


# Per-rank orders transcribed by hand from torch.distributed.pipelining, torch/distributed/pipelining/schedules.py at
# pytorch/pytorch@1fd7abc2f521e4429a29c3088e39ebaca20f4698: ScheduleZBVZeroBubble._calculate_single_rank_operations
# (V map, n_micro = max(2p - 1, m), actions of microbatches >= m dropped), ScheduleInterleaved1F1B (_get_warmup_ops with
# multiply_factor=2, _get_1f1b_rank_ops) and ScheduleInterleavedZeroBubble at one stage per rank (ZB-H1: warmup
# p - 1 - r, W deferred by num_1f1b_microbatches = r). torch's idle steps (None) carry no action and are left out.
TORCH_ORDERS = [
    (Schedule.zb_v, 2, 4, 2, [
        "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3",
        "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3",
    ]),
    (Schedule.zb_v, 3, 4, 2, [  # m < 2p - 1: built for 5 microbatches, microbatch 4 dropped (rank 0 shown)
        "0F0 0F1 0F2 0F3 5F0 5I0 5W0 5F1 5I1 5W1 5F2 5I2 5W2 0I0 0W0 5F3 5I3 5W3 0I1 0W1 0I2 0W2 0I3 0W3",
    ]),
    (Schedule.interleaved, 2, 4, 2, [
        "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
        "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3",
    ]),
    (Schedule.zb_h1, 2, 4, 1, [
        "0F0 0F1 0I0 0W0 0F2 0I1 0W1 0F3 0I2 0W2 0I3 0W3",
        "1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1F3 1I3 1W2 1W3",
    ]),
]


@pytest.mark.parametrize(("schedule", "p", "m", "v", "rows"), TORCH_ORDERS)
def test_per_rank_order_is_torchs(schedule, p, m, v, rows):
    actions = build_actions(schedule, p, m, v)
    assert [" ".join(map(str, ops)) for ops in actions.order[:len(rows)]] == rows


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
