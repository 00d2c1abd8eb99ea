"""`scaleacross-milp calibrate` through typer's CliRunner."""

from __future__ import annotations

from typer.testing import CliRunner

from scaleacross_milp.calibration.profile import Profile
from scaleacross_milp.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, ["calibrate", *[str(a) for a in args]])


def test_writes_a_profile_and_prints_fit_quality_with_units(logs, tmp_path, assert_input_error):
    out = tmp_path / "p.json"
    names = ["nccl_h100-sxm-cluster01-1node_all_reduce_8gpus.txt", "nccl_h100-sxm-cluster01-2nodes_sendrecv_16gpus.txt"]
    result = run(*(logs / n for n in names), "-o", out)
    assert result.exit_code == 0, result.output
    profile = Profile.model_validate_json(out.read_text())
    assert profile.name == "p" and profile.gpu_model == "H100"
    assert [(c.collective, c.tier, c.ranks) for c in profile.curves] == [("all_reduce", "nvlink", 8),
                                                                          ("p2p", "fabric", 16)]
    assert "fit error" in result.stdout and "32 MiB" in result.stdout and "182.9 us" in result.stdout
    assert "GB/s" in result.stdout and f"Profile written to {out}" in result.stdout
    assert_input_error(run(logs / names[0], "-o", out), "exists", "--force")
    assert run(logs / names[0], "-o", out, "--force").exit_code == 0


def test_garbage_exits_2_naming_file_and_line(tmp_path, assert_input_error):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\nworld\n")
    assert_input_error(run(bad), f"{bad}:2:", "not nccl-tests output")


def test_missing_facts_are_asked_for_and_checked(logs, tmp_path, assert_input_error):
    a100 = logs / "nccl_a100-8gpu-nvlink_sendrecv_8gpus.txt"
    assert_input_error(run(a100), f"{a100}:8:", "--ranks")
    assert_input_error(run(a100, "--ranks", 8), "--tier or --nodes")
    assert_input_error(run(a100, "--ranks", 8, "--nodes", 1), "--gpu-model")
    ok = run(a100, "--ranks", 8, "--nodes", 1, "--gpu-model", "A100", "-o", tmp_path / "a.json")
    assert ok.exit_code == 0, ok.output
    h100 = logs / "nccl_h100-sxm-cluster01-1node_all_reduce_8gpus.txt"
    assert_input_error(run(h100, "--ranks", 16), "rank count: the log says 8, but 16 was given")
    assert_input_error(run(h100, "--collective", "sendrecv"), "collective")


def test_rebuild_defaults_refuses_to_overwrite_and_needs_a_folder(logs, tmp_path, assert_input_error):
    assert_input_error(run("--rebuild-defaults", logs), "-o DIR")
    (tmp_path / "default.json").write_text("{}")
    assert_input_error(run("--rebuild-defaults", logs, "-o", tmp_path), "default.json exists")


def test_refuses_logs_from_different_clusters_naming_both(logs, tmp_path, assert_input_error):
    """cluster00 runs NCCL 2.28.7 (nccl-library=22807), cluster01 NCCL 2.29.2 (22902): one profile, one cluster."""
    old, new = (logs / f"nccl_h100-sxm-cluster0{i}-2nodes_sendrecv_16gpus.txt" for i in (0, 1))
    out = tmp_path / "p.json"
    result = run(old, new, "-o", out)
    assert_input_error(result, f"{new}:29: NCCL 2.29.2, but {old.name}:27 ran NCCL 2.28.7", "calibrate them separately")
    assert not out.exists()


def test_output_into_a_missing_directory_or_onto_a_directory_is_refused(logs, tmp_path, assert_input_error):
    log = logs / "nccl_h100-sxm-cluster01-1node_all_reduce_8gpus.txt"
    missing = tmp_path / "missing" / "p.json"
    result = run(log, "-o", missing)
    assert_input_error(result, f"{missing}: directory {missing.parent} does not exist")
    assert "fit error" not in result.stdout  # refused before fitting
    assert_input_error(run(log, "-o", tmp_path, "--force"), f"{tmp_path} is a directory")
    assert_input_error(run("--rebuild-defaults", logs, "-o", tmp_path / "missing"),
                       f"{tmp_path / 'missing'}: not a directory")


def test_says_when_it_cannot_tell_the_logs_come_from_one_cluster(logs, tmp_path):
    """The DGX H100 log prints no nccl-tests version line; together's prints NCCL 2.26.2: fitted, with a warning."""
    dgx = logs / "nccl_dgx-h100_all_reduce_8gpus.txt"
    together = logs / "nccl_together-h100-1node-ring_all_reduce_8gpus.txt"
    result = run(dgx, together, "-o", tmp_path / "p.json")
    assert result.exit_code == 0, result.output
    assert result.stderr == (f"warning: cannot check that the 2 logs come from one cluster: {dgx.name} does not state "
                             "the NCCL version (a '# nccl-tests version ... nccl-library=' line)\n")
    alone = run(together, "-o", tmp_path / "q.json")
    assert alone.exit_code == 0 and alone.stderr == ""
