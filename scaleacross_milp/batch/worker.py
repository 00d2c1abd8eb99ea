"""What a worker does with one scenario: solve it as `solve` does (one HiGHS thread), check and replay the plan,
and report the outcome; and the loop of a local worker process."""

from __future__ import annotations

import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from scaleacross_milp.batch.result import Status
from scaleacross_milp.gcpause import collect_left_cycles
from scaleacross_milp.milp.solve import NoPlanFound, solve_instance
from scaleacross_milp.report.attach import attach_usage, attach_verification
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Plan
from scaleacross_milp.verify.replay import DeadlockError

READY = "ready"
"""What a local worker sends once its imports are done, before its first job."""
SOLVER_THREADS = 1
"""HiGHS threads per solve: one solver per CPU, the batch runs as many solves as it has workers."""


@dataclass(frozen=True)
class Job:
    id: str
    instance: Instance
    time_limit_s: float


@dataclass(frozen=True)
class Outcome:
    status: Status
    reason: str = ""
    plan: Plan | None = None
    wall_s: float = 0.0
    rss_mib: float | None = None


SolveFn = Callable[[Job], Outcome]
"""A module-level function (spawned workers and Ray import it by name) from a job to its outcome."""


def solve_job(job: Job) -> Outcome:
    """solve_instance with one thread, then report.attach's usage and replay, as the `solve` command does. The
    solver's plan failing its check or replay is an error (a bug), as `solve` exits 3 on it."""
    try:
        plan = solve_instance(job.instance, time_limit_s=job.time_limit_s, threads=SOLVER_THREADS)
    except InputError as exc:
        return Outcome(Status.infeasible, str(exc))
    except NoPlanFound as exc:
        return Outcome(Status.no_plan, str(exc))
    try:
        plan = attach_usage(job.instance, plan)
        plan, _, _ = attach_verification(job.instance, plan, Path())
    except (InputError, DeadlockError) as exc:
        return Outcome(Status.error, f"the solver's plan does not check or replay: {exc}")
    return Outcome(Status.solved, plan=plan)


def resident_mib() -> float:
    """This process's resident set size now (/proc/self/statm), or its peak where /proc is missing."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def run_job(solve: SolveFn, job: Job) -> Outcome:
    """solve(job), timed, with the worker's memory once the job's garbage is collected; an unexpected exception
    becomes an error outcome naming it. The solve leaves its Pyomo models behind as cyclic garbage: collected here
    (`collect_left_cycles`), between jobs and outside their wall time, the collector does not pause inside the next
    solve's time limit (after the 131k-GPU instances, a 64-building solve under 0.5 s took 1.03 s; 0.53 s on a
    collected heap)."""
    start = time.perf_counter()
    try:
        outcome = solve(job)
    except Exception as exc:  # one scenario's bug must not stop the batch
        message = " ".join(str(exc).split())
        outcome = Outcome(Status.error, f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
    wall = time.perf_counter() - start
    collect_left_cycles()
    return Outcome(outcome.status, outcome.reason, outcome.plan, wall, resident_mib())


def serve(conn: Connection, solve: SolveFn) -> None:
    """A local worker: run each job received until None; Ctrl-C is the parent's to handle (it kills us)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send(READY)
    while (job := conn.recv()) is not None:
        conn.send(run_job(solve, job))
