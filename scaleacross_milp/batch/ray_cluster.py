"""Distributed execution on Ray (the optional extra `scaleacross-milp[ray]`): one task per scenario with one CPU
reserved, results streamed back as they finish, overrunning tasks cancelled by force."""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from scaleacross_milp.batch.local import Started, hard_limit_s, timed_out
from scaleacross_milp.batch.result import Status
from scaleacross_milp.batch.worker import Job, Outcome, SolveFn, run_job, solve_job

LOCAL = "local"
"""--ray local: start a Ray instance on this machine with --workers CPUs (and stop it afterwards)."""


class RayUnavailable(RuntimeError):
    """Ray is not installed: `pip install "scaleacross-milp[ray]"`."""


def warm() -> int:
    """A no-op task: running it imports this module, and with it the solver, in a Ray worker."""
    return os.getpid()


def failed(exc: Exception) -> Outcome:
    """A task that died without an answer (its worker crashed, the node was lost): the error's first line."""
    lines = str(exc).strip().splitlines()
    return Outcome(Status.crashed, f"the Ray task failed: {type(exc).__name__}: {lines[0] if lines else ''}".strip())


class RayPool:
    """Jobs as Ray tasks (num_cpus=1, never retried by Ray: the runner decides). At most as many tasks in flight
    as the cluster has CPUs, so each starts when submitted and its hard limit counts from then. Connects to
    `address` ('auto', 'host:port', 'ray://...') or starts a local instance (`LOCAL`, `cpus` CPUs) unless Ray is
    already initialised in this process; stops only the instance it started."""

    def __init__(self, address: str, solve: SolveFn = solve_job, cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise RayUnavailable('Ray is not installed; pip install "scaleacross-milp[ray]"') from None
        self.ray = ray
        self.owned = not ray.is_initialized()
        if self.owned:
            local = address == LOCAL
            ray.init(address=None if local else address, num_cpus=cpus if local else None,
                     include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
        self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.task = ray.remote(num_cpus=1, max_retries=0)(run_job)
        self.solve = solve
        ray.get([ray.remote(num_cpus=1)(warm).remote() for _ in range(self.slots)])

    def _submit(self, job: Job) -> Any:
        return self.task.remote(self.solve, job)

    def run(self, jobs: list[Job], started: Started) -> Iterator[tuple[Job, Outcome]]:
        """Each job's outcome as it finishes (ray.wait); a task past its hard limit is cancelled with force=True
        (its worker process is killed) and reported timed out; on exit (Ctrl-C too) every running task is."""
        queue: deque[Job] = deque(jobs)
        running: dict[Any, tuple[Job, float]] = {}
        try:
            while queue or running:
                while queue and len(running) < self.slots:
                    job = queue.popleft()
                    running[self._submit(job)] = (job, time.monotonic())
                    started(job)
                deadline = min(begun + hard_limit_s(job) for job, begun in running.values())
                done, _ = self.ray.wait(list(running), num_returns=1,
                                        timeout=max(0.0, deadline - time.monotonic()))
                for ref in done:
                    job, _ = running.pop(ref)
                    try:
                        outcome = self.ray.get(ref)
                    except self.ray.exceptions.RayError as exc:
                        outcome = failed(exc)
                    yield job, outcome
                now = time.monotonic()
                for ref, (job, begun) in list(running.items()):
                    if now >= begun + hard_limit_s(job):
                        self.ray.cancel(ref, force=True)
                        del running[ref]
                        yield job, timed_out(job, now - begun)
        finally:
            for ref in running:
                self.ray.cancel(ref, force=True)

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.owned:
            self.ray.shutdown()
