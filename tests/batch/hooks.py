"""Test doubles of the batch: a solve function injected into spawned workers (they import it by name), whose
scenario `description` scripts a failure, and an executor running jobs in this process."""

from __future__ import annotations

import os
import time

from scaleacross_milp.batch.worker import Job, Outcome, run_job, solve_job

HANG_S = 3600


def scripted(job: Job) -> Outcome:
    """description 'hang': never returns; 'crash': the process exits with code 3; 'raise': RuntimeError."""
    action = job.instance.description
    if action == "hang":
        time.sleep(HANG_S)
    if action == "crash":
        os._exit(3)
    if action == "raise":
        raise RuntimeError("scripted failure")
    return solve_job(job)


class InProcess:
    """An executor running jobs here, in order: `fail` maps an id to the outcome its first run gives; `stop_after`
    raises KeyboardInterrupt (a Ctrl-C) once that many jobs have finished. `seen` records every job run."""

    def __init__(self, fail: dict[str, Outcome] | None = None, stop_after: int | None = None) -> None:
        self.fail, self.stop_after, self.seen = dict(fail or {}), stop_after, []

    def run(self, jobs, started):
        for job in jobs:
            if self.stop_after is not None and len(self.seen) == self.stop_after:
                raise KeyboardInterrupt
            started(job)
            self.seen.append(job.id)
            outcome = self.fail.pop(job.id, None)
            yield job, outcome or run_job(solve_job, job)
