"""Solving a sweep's scenarios on an executor (local processes or Ray), resumably: one result file per scenario
written as it finishes. A scenario with a final result (solved, infeasible, no plan) is never solved again; one
that crashed, timed out or raised is run again by every invocation, up to 1 + `retries` times, and reported."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from scaleacross_milp.batch.result import (
    RETRYABLE,
    ScenarioResult,
    Status,
    read_result,
    remove_temporaries,
    write_result,
)
from scaleacross_milp.batch.summary import write_summary
from scaleacross_milp.batch.worker import Job, Outcome
from scaleacross_milp.sweep.expand import Scenario


class Executor(Protocol):
    def run(self, jobs: list[Job], started: Callable[[Job], None]) -> Iterator[tuple[Job, Outcome]]:
        """Each job's outcome as it finishes; `started(job)` when the job begins to run."""


class Observer(Protocol):
    """What the runner tells a progress display."""

    def begin(self, total: int, done: int) -> None: ...

    def started(self, job: Job) -> None: ...

    def finished(self, result: ScenarioResult, final: bool) -> None:
        """A run ended; `final`: the scenario will not be run again in this batch."""


class Silent:
    def begin(self, total: int, done: int) -> None:
        pass

    def started(self, job: Job) -> None:
        pass

    def finished(self, result: ScenarioResult, final: bool) -> None:
        pass


@dataclass(frozen=True)
class BatchReport:
    results: list[ScenarioResult]
    """The latest result of every scenario that has one, in sweep order."""
    reused: int
    """Scenarios not run: their result files were final."""
    run: int
    """Scenario runs in this invocation, retries included."""
    interrupted: bool
    """Ctrl-C: the running solves were left to the executor to kill; finished results are kept."""

    @property
    def failed(self) -> list[ScenarioResult]:
        return [result for result in self.results if result.status is not Status.solved]


def final(result: ScenarioResult | None) -> bool:
    """A result that answers the scenario (solved, infeasible, no plan): never run again."""
    return result is not None and result.status not in RETRYABLE


def job_for(scenario: Scenario, time_limit_s: float | None) -> Job:
    """The scenario with the batch's time limit, or its own search.time_limit_s."""
    return Job(scenario.id, scenario.instance, time_limit_s or scenario.instance.search.time_limit_s)


def record(scenario: Scenario, job: Job, outcome: Outcome, previous: ScenarioResult | None) -> ScenarioResult:
    return ScenarioResult(
        id=scenario.id, axes=scenario.axes, status=outcome.status, reason=outcome.reason,
        attempts=(previous.attempts if previous else 0) + 1, time_limit_s=job.time_limit_s, wall_s=outcome.wall_s,
        worker_rss_mib=outcome.rss_mib, plan=outcome.plan)


def run_batch(scenarios: list[Scenario], out_dir: Path, executor: Executor, time_limit_s: float | None = None,
              retries: int = 1, observer: Observer | None = None, summary: bool = True) -> BatchReport:
    """Run every scenario without a `final` result on `executor`, writing each result file (atomically) as it
    arrives; the retryable failures again, up to `retries` more passes; then (with `summary`) results/summary.csv
    and .parquet over all scenarios. Ctrl-C ends the passes early; the summary still covers every finished one."""
    observer = observer or Silent()
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_temporaries(out_dir)
    latest = {s.id: result for s in scenarios if (result := read_result(out_dir, s.id)) is not None}
    by_id = {s.id: s for s in scenarios}
    todo = [s for s in scenarios if not final(latest.get(s.id))]
    reused, runs, interrupted = len(scenarios) - len(todo), 0, False
    observer.begin(len(scenarios), reused)
    try:
        for attempt in range(1 + retries):
            jobs = [job_for(s, time_limit_s) for s in todo]
            for job, outcome in executor.run(jobs, observer.started):
                result = record(by_id[job.id], job, outcome, latest.get(job.id))
                write_result(out_dir, result)
                latest[job.id], runs = result, runs + 1
                observer.finished(result, final(result) or attempt == retries)
            todo = [s for s in todo if not final(latest[s.id])]
    except KeyboardInterrupt:
        interrupted = True
    results = [latest[s.id] for s in scenarios if s.id in latest]
    if summary:
        write_summary(out_dir, results)
    return BatchReport(results, reused, runs, interrupted)
