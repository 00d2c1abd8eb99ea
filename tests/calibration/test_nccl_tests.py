"""The parser on the 21 real logs, on other layouts nccl-tests prints, and on garbage."""

from __future__ import annotations

import pytest

from scaleacross_milp.calibration.nccl_tests import LogError, parse_log, parse_text

# file, collective, ranks, nodes (None: the log does not say), rows, and one row copied from the file:
# (line, size B, out-of-place us, in-place us)
REAL = [
    ("nccl_a100-8gpu-nvlink_sendrecv_8gpus.txt", "p2p", None, None, 4, (12, 536870912, 2785.4, 2772.2)),
    ("nccl_aws-p4de-a100-efa_all_reduce_16gpus.txt", "all_reduce", 16, None, 29, (20, 131072, 229.7, 226.8)),
    ("nccl_aws-p5-h100-batch-unknown-nodes_all_reduce_Ngpus.txt", "all_reduce", 8, None, 32,
     (23, 524288, 21.17, 20.96)),
    ("nccl_aws-p5-h100-efa_all_reduce_16gpus.txt", "all_reduce", 16, None, 32, (22, 524288, 123.7, 113.3)),
    ("nccl_dgx-h100_all_reduce_8gpus.txt", "all_reduce", 8, 1, 32, (35, 524288, 20.66, 19.70)),
    ("nccl_gcp-a3mega-h100-tcpxo_all_reduce_16gpus.txt", "all_reduce", 16, 2, 31, (51, 262144, 167.1, 163.9)),
    ("nccl_h100-sxm-cluster00-2nodes_alltoall_16gpus.txt", "all_to_all", 16, 2, 10,
     (34, 1073741824, 42714.8, 42690.4)),
    ("nccl_h100-sxm-cluster00-2nodes_sendrecv_16gpus.txt", "p2p", 16, 2, 10, (34, 1073741824, 70928.5, 70922.4)),
    ("nccl_h100-sxm-cluster01-10nodes_all_gather_80gpus.txt", "all_gather", 80, 10, 10,
     (100, 1073740800, 4001.42, 4011.73)),
    ("nccl_h100-sxm-cluster01-10nodes_all_reduce_80gpus.txt", "all_reduce", 80, 10, 10,
     (100, 1073741824, 6149.19, 6119.12)),
    ("nccl_h100-sxm-cluster01-10nodes_alltoall_80gpus.txt", "all_to_all", 80, 10, 10,
     (100, 1073740800, 21159.9, 21106.3)),
    ("nccl_h100-sxm-cluster01-10nodes_reduce_scatter_80gpus.txt", "reduce_scatter", 80, 10, 10,
     (100, 1073740800, 3786.91, 4085.44)),
    ("nccl_h100-sxm-cluster01-10nodes_sendrecv_80gpus.txt", "p2p", 80, 10, 10, (100, 1073741824, 70501.7, 70465.3)),
    ("nccl_h100-sxm-cluster01-1node_all_gather_8gpus.txt", "all_gather", 8, 1, 10, (28, 1073741824, 2719.60, 2700.76)),
    ("nccl_h100-sxm-cluster01-1node_all_reduce_8gpus.txt", "all_reduce", 8, 1, 10, (28, 1073741824, 4000.82, 3997.59)),
    ("nccl_h100-sxm-cluster01-1node_alltoall_8gpus.txt", "all_to_all", 8, 1, 10, (28, 1073741824, 2830.00, 2819.51)),
    ("nccl_h100-sxm-cluster01-1node_reduce_scatter_8gpus.txt", "reduce_scatter", 8, 1, 10,
     (28, 1073741824, 2741.51, 2734.35)),
    ("nccl_h100-sxm-cluster01-1node_sendrecv_8gpus.txt", "p2p", 8, 1, 10, (28, 1073741824, 2974.51, 2983.65)),
    ("nccl_h100-sxm-cluster01-2nodes_alltoall_16gpus.txt", "all_to_all", 16, 2, 3, (32, 8589934592, 87635.7, 87557.8)),
    ("nccl_h100-sxm-cluster01-2nodes_sendrecv_16gpus.txt", "p2p", 16, 2, 3, (32, 8589934592, 187260, 187248)),
    ("nccl_together-h100-1node-ring_all_reduce_8gpus.txt", "all_reduce", 8, 1, 31, (37, 262144, 37.95, 37.18)),
]


def test_every_shared_log_is_listed(logs):
    assert sorted(p.name for p in logs.glob("*.txt")) == sorted(r[0] for r in REAL)


@pytest.mark.parametrize(("name", "collective", "ranks", "nodes", "rows", "row"), REAL, ids=[r[0] for r in REAL])
def test_real_log(logs, name, collective, ranks, nodes, rows, row):
    (test,) = parse_log(logs / name)
    assert (test.collective, test.ranks, test.nodes, len(test.rows)) == (collective, ranks, nodes, rows)
    line, size, out_us, in_us = row
    (found,) = [r for r in test.rows if r.line == line]
    assert found.bytes == size
    assert found.out_of_place_s == pytest.approx(out_us * 1e-6)
    assert found.in_place_s == pytest.approx(in_us * 1e-6)
    assert found.time_s == pytest.approx(min(out_us, in_us) * 1e-6)
    sizes = [r.bytes for r in test.rows]
    assert sizes == sorted(sizes)
    if nodes is not None:
        assert test.gpu_name == "NVIDIA H100 80GB HBM3"


def test_avg_bus_bandwidth_and_na_cells(logs):
    (test,) = parse_log(logs / "nccl_h100-sxm-cluster01-1node_sendrecv_8gpus.txt")  # '#wrong' in-place is N/A
    assert test.avg_busbw_gbyte_s == pytest.approx(279.874)
    assert all(r.in_place_s is not None for r in test.rows)


def test_several_tests_in_one_log(logs, tmp_path):
    parts = [(logs / f"nccl_h100-sxm-cluster01-1node_{k}_8gpus.txt").read_text() for k in ("all_gather", "sendrecv")]
    combined = tmp_path / "both.log"
    combined.write_text(parts[0] + parts[1])
    first, second = parse_log(combined)
    assert (first.collective, second.collective) == ("all_gather", "p2p")
    assert second.line == first.line + len(parts[0].splitlines())
    assert len(first.rows) == len(second.rows) == 10


OLD_LAYOUT = """\
# nThread 1 nGpus 4 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
#                                             out-of-place                    in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024            32   float     10.0    0.10    0.08  0e+00     11.0    0.09    0.07  0e+00
        2048            64   float     12.0    0.17    0.13  0e+00     12.5    0.16    0.12  0e+00
"""


def test_older_layout_without_redop_root_and_with_error_column():
    (test,) = parse_text(OLD_LAYOUT, "old.log")
    assert [r.time_s for r in test.rows] == pytest.approx([10e-6, 12e-6])
    assert test.collective is None  # unnamed, and this arithmetic (1/n count, no reduction) is ambiguous
    assert test.nodes is None and test.ranks is None


def _real_lines(logs):
    return (logs / "nccl_h100-sxm-cluster01-1node_all_reduce_8gpus.txt").read_text().splitlines()


def _garbage(tmp_path, lines):
    path = tmp_path / "bad.log"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LogError) as info:
        parse_log(path)
    assert info.value.file == str(path)
    assert str(info.value).startswith(f"{path}:{info.value.line}: ")
    return info.value


def test_truncated_row(logs, tmp_path):
    lines = _real_lines(logs)
    lines[23] = lines[23][:60]  # second data row cut mid-way
    error = _garbage(tmp_path, lines)
    assert error.line == 24 and "truncated" in error.message


def test_truncated_file(logs, tmp_path):
    lines = _real_lines(logs)[:26]
    lines[-1] = lines[-1][:30]
    assert _garbage(tmp_path, lines).line == 26


def test_table_with_no_rows(logs, tmp_path):
    lines = [line for line in _real_lines(logs) if line.startswith("#")]
    error = _garbage(tmp_path, lines)
    assert error.line == 21 and "no rows" in error.message  # the header line


def test_wrong_collective_name(logs, tmp_path):
    lines = [line.replace("all_reduce_perf", "allreduce_perf") for line in _real_lines(logs)]
    error = _garbage(tmp_path, lines)
    assert error.line == 5 and "'allreduce_perf'" in error.message


def test_unsupported_collective(logs, tmp_path):
    lines = [line.replace("all_reduce_perf", "broadcast_perf") for line in _real_lines(logs)]
    assert "unsupported" in _garbage(tmp_path, lines).message


def test_not_nccl_tests_output(tmp_path):
    error = _garbage(tmp_path, ["name,value", "a,1", "b,2"])
    assert error.line == 3 and "not nccl-tests output" in error.message


def test_non_numeric_cell_and_failed_validation(logs, tmp_path):
    lines = _real_lines(logs)
    bad_time = lines.copy()
    bad_time[22] = bad_time[22].replace("182.87", "18x.87")
    error = _garbage(tmp_path, bad_time)
    assert error.line == 23 and "'time'" in error.message and "18x.87" in error.message
    wrong = lines.copy()
    wrong[22] = wrong[22][:-1] + "3"  # in-place #wrong = 3
    assert "failed validation" in _garbage(tmp_path, wrong).message
