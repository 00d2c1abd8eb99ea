"""Solve functions injected into batch workers by the tests (spawned workers import them by name): the scenario's
`description` scripts a failure, anything else is solved for real."""

from __future__ import annotations

import os
import time

from scaleacross_milp.batch.worker import Job, Outcome, solve_job

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
