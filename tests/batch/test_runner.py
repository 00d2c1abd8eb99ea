"""The batch runner on the bundled two-building Llama 3 8B instance (A, B: 128 H100 each, 3,200 Gbit/s over
1,000 km): resume, retries, Ctrl-C, atomic writes and the summary, with an in-process executor; the local pool of
spawned workers with scripted hangs and crashes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from scaleacross_milp.batch.local import LocalPool
from scaleacross_milp.batch.result import ScenarioResult, Status, atomic_write, read_result, result_path
from scaleacross_milp.batch.runner import Silent, run_batch
from scaleacross_milp.batch.worker import Job, Outcome, run_job
from scaleacross_milp.sweep.expand import load_scenarios
from tests.batch.hooks import InProcess, scripted

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "instances" / "dp-out-2b-far-llama3-8b.json"
LIMIT_S = 5.0
SEQ_LEN, BATCH = 8192, 512


def scenarios(tmp_path: Path, **fields):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"base": str(BASE), **fields}))
    return load_scenarios(path)[0]


def test_resume_skips_finished_and_reruns_the_failed(tmp_path):
    one, two = scenarios(tmp_path, grid={"buildings": [1, 2]})
    out = tmp_path / "results"
    crashed = Outcome(Status.crashed, "the worker process died (killed by signal SIGKILL)")
    first = InProcess(fail={two.id: crashed})
    report = run_batch([one, two], out, first, LIMIT_S, retries=0)
    assert first.seen == [one.id, two.id]
    assert [(r.status, r.attempts) for r in report.results] == [(Status.solved, 1), (Status.crashed, 1)]
    assert report.failed[0].reason == "the worker process died (killed by signal SIGKILL)"
    kept = result_path(out, one.id).read_bytes()

    again = InProcess()
    report = run_batch([one, two], out, again, LIMIT_S, retries=0)
    assert again.seen == [two.id]
    assert (report.reused, report.run, report.failed) == (1, 1, [])
    assert result_path(out, one.id).read_bytes() == kept
    assert read_result(out, two.id).attempts == 2


def test_retries_run_a_failure_again_within_the_batch(tmp_path):
    (only,) = scenarios(tmp_path, cases=[{"buildings": 1}])
    executor = InProcess(fail={only.id: Outcome(Status.error, "RuntimeError: once")})
    report = run_batch([only], tmp_path / "results", executor, LIMIT_S, retries=1)
    assert executor.seen == [only.id, only.id]
    assert [(r.status, r.attempts) for r in report.results] == [(Status.solved, 2)]


def test_ctrl_c_keeps_finished_results_and_the_next_run_goes_on(tmp_path):
    one, two = scenarios(tmp_path, grid={"buildings": [1, 2]})
    out = tmp_path / "results"
    report = run_batch([one, two], out, InProcess(stop_after=1), LIMIT_S)
    assert report.interrupted and [r.id for r in report.results] == [one.id]
    assert not result_path(out, two.id).exists()
    assert [row["id"] for row in pq.read_table(out / "summary.parquet").to_pylist()] == [one.id]
    rest = InProcess()
    run_batch([one, two], out, rest, LIMIT_S)
    assert rest.seen == [two.id]


def test_summary_holds_each_scenario_with_its_axes_and_figures(tmp_path):
    """tokens/s is the batch run over the verified time: 512 x 8,192 tokens / T_verified."""
    one, two = scenarios(tmp_path, grid={"buildings": [1, 2]})
    out = tmp_path / "results"
    failure = Outcome(Status.infeasible, "memory: scripted")
    run_batch([one, two], out, InProcess(fail={two.id: failure}), LIMIT_S)
    with (out / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    table = pq.read_table(out / "summary.parquet").to_pylist()
    assert [row["id"] for row in rows] == [row["id"] for row in table] == [one.id, two.id]
    assert [row["buildings"] for row in table] == [1, 2]
    solved, failed = table
    plan = ScenarioResult.model_validate_json(result_path(out, one.id).read_bytes()).plan
    verified = plan.verification.iteration_s
    assert solved["status"] == "solved" and solved["pattern"] == "single-building"
    assert solved["verified_iteration_s"] == verified
    assert solved["predicted_iteration_s"] == plan.prediction.iteration_s
    assert solved["tokens_per_s"] == pytest.approx(BATCH * SEQ_LEN / verified)
    assert solved["tp"] * solved["pp"] * solved["dp"] <= 128
    assert float(rows[0]["verified_iteration_s"]) == pytest.approx(verified)
    assert (failed["status"], failed["reason"], failed["verified_iteration_s"]) == ("infeasible", "memory: scripted",
                                                                                  None)


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")

    def half(handle):
        handle.write("partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_local_pool_kills_a_hang_survives_a_crash_and_an_exception(tmp_path):
    """Each scenario's own time limit (no batch limit): the hang's 0.25 s, so it is killed at 0.5 s; the crash and
    the exception are recorded; the real scenario (5 s limit) is solved by a spawned worker."""
    cases = [{"description": action, "buildings": 1, "search.time_limit_s": 0.25 if action == "hang" else LIMIT_S}
             for action in ("", "raise", "crash", "hang")]
    real, fails, crash, hang = scenarios(tmp_path, cases=cases)
    with LocalPool(2, scripted) as pool:
        report = run_batch([hang, crash, fails, real], tmp_path / "results", pool, retries=0)
    found = {r.id: r for r in report.results}
    assert report.run == 4
    assert found[hang.id].status is Status.timed_out
    assert "past the hard limit of 0.5 s (2 x its 0.25 s time limit): killed" in found[hang.id].reason
    assert (found[crash.id].status, found[crash.id].reason) == (Status.crashed,
                                                                "the worker process died (exited with code 3)")
    assert (found[fails.id].status, found[fails.id].reason) == (Status.error, "RuntimeError: scripted failure")
    assert found[real.id].status is Status.solved
    assert found[real.id].plan.verification is not None and found[real.id].worker_rss_mib > 0


def test_worker_outcome_names_an_unexpected_exception():
    def broken(job: Job) -> Outcome:
        raise ZeroDivisionError("division by zero")

    outcome = run_job(broken, Job("x", None, 1.0))
    assert (outcome.status, outcome.reason, outcome.plan) == (Status.error, "ZeroDivisionError: division by zero",
                                                              None)


class CtrlCOnStart(Silent):
    """A Ctrl-C arriving as soon as a worker has taken a job."""

    def started(self, job: Job) -> None:
        raise KeyboardInterrupt


def test_ctrl_c_kills_the_running_solve_and_leaves_no_file(tmp_path):
    (hang,) = scenarios(tmp_path, cases=[{"description": "hang", "buildings": 1}])
    out = tmp_path / "results"
    with LocalPool(1, scripted) as pool:
        report = run_batch([hang], out, pool, LIMIT_S, observer=CtrlCOnStart())
        (worker,) = pool.workers
        assert worker.job is not None and worker.process.is_alive()
    assert not worker.process.is_alive()
    assert report.interrupted and report.results == []
    assert sorted(p.name for p in out.iterdir()) == ["summary.csv", "summary.parquet"]
