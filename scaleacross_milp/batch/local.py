"""Local execution: a pool of spawned worker processes, one solve each at a time, each killed past its hard
limit (and replaced while jobs wait)."""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import TracebackType

from scaleacross_milp.batch.result import Status
from scaleacross_milp.batch.worker import READY, Job, Outcome, SolveFn, serve, solve_job

HARD_KILL_FACTOR = 2.0
"""A scenario still running at this multiple of its time limit is killed (the solver honours the limit itself; only
a hang gets this far)."""
STOP_WAIT_S = 1.0
"""How long an idle worker is given to exit when the pool closes before it is killed."""

Started = Callable[[Job], None]


class WorkerStartError(RuntimeError):
    """A worker process could not start (it died before its first job): no scenario can run."""


def hard_limit_s(job: Job) -> float:
    return HARD_KILL_FACTOR * job.time_limit_s


def timed_out(job: Job, elapsed_s: float) -> Outcome:
    return Outcome(Status.timed_out, f"still running at {elapsed_s:.1f} s, past the hard limit of "
                                     f"{hard_limit_s(job):g} s ({HARD_KILL_FACTOR:g} x its {job.time_limit_s:g} s "
                                     f"time limit): killed", wall_s=elapsed_s)


def died(code: int | None) -> Outcome:
    """The worker process ended without answering: by a signal (negative exit code) or an exit code."""
    if code is not None and code < 0:
        how = f"killed by signal {signal.Signals(-code).name}"
    else:
        how = f"exited with code {code}"
    return Outcome(Status.crashed, f"the worker process died ({how})")


@dataclass
class Worker:
    process: BaseProcess
    conn: Connection
    ready: bool = False
    job: Job | None = None
    started: float = 0.0
    deadline: float = field(default=float("inf"))


class LocalPool:
    """`workers` processes started with the 'spawn' method (a fresh interpreter, nothing inherited from this one),
    each running batch.worker.serve with `solve`; used as a context manager, which kills them all on exit."""

    def __init__(self, workers: int, solve: SolveFn = solve_job) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.solve, self.size = solve, workers
        self.workers: list[Worker] = []
        """Started while jobs wait (a resumed batch with nothing left starts none)."""

    def _start(self) -> Worker:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=serve, args=(child, self.solve), daemon=True)
        process.start()
        child.close()
        return Worker(process, parent)

    def _retire(self, worker: Worker) -> None:
        """Kill `worker`; `_assign` starts another when there is work for it."""
        self._kill(worker)
        self.workers.remove(worker)

    @staticmethod
    def _kill(worker: Worker) -> None:
        worker.process.kill()
        worker.process.join()
        worker.conn.close()

    def _assign(self, queue: deque[Job], started: Started) -> None:
        """Start workers up to min(pool size, jobs waiting + jobs running); hand a job to each ready idle one."""
        running = sum(worker.job is not None for worker in self.workers)
        while len(self.workers) < min(self.size, len(queue) + running):
            self.workers.append(self._start())
        for worker in self.workers:
            if queue and worker.ready and worker.job is None:
                job = queue.popleft()
                worker.conn.send(job)
                worker.job, worker.started = job, time.monotonic()
                worker.deadline = worker.started + hard_limit_s(job)
                started(job)

    def _collect(self, worker: Worker, ready: list) -> Outcome | None:
        """The outcome `worker` has to report after `wait` returned `ready`, if any (a ready message only marks it
        ready; a death or an overrun retires it)."""
        now = time.monotonic()
        if worker.conn in ready:
            try:
                message = worker.conn.recv()
            except EOFError:
                message = None
            if message == READY:
                worker.ready = True
                return None
            if isinstance(message, Outcome):
                worker.job = None
                return message
        if worker.conn in ready or worker.process.sentinel in ready:
            worker.process.join()
            if not worker.ready:
                reason = died(worker.process.exitcode).reason
                raise WorkerStartError(f"a worker process ended before taking any job ({reason}); see its error "
                                       f"output above")
            outcome = died(worker.process.exitcode) if worker.job is not None else None
            self._retire(worker)
            return outcome
        if worker.job is not None and now >= worker.deadline:
            outcome = timed_out(worker.job, now - worker.started)
            self._retire(worker)
            return outcome
        return None

    def run(self, jobs: list[Job], started: Started) -> Iterator[tuple[Job, Outcome]]:
        """Each job's outcome as it finishes (in finishing order); `started(job)` when a worker takes it."""
        queue = deque(jobs)
        while queue or any(worker.job is not None for worker in self.workers):
            self._assign(queue, started)
            deadlines = [worker.deadline for worker in self.workers if worker.job is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = wait([handle for worker in self.workers
                          for handle in (worker.conn, worker.process.sentinel)], timeout)
            for worker in list(self.workers):
                job = worker.job
                outcome = self._collect(worker, ready)
                if outcome is not None:
                    yield job, outcome

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        """Idle workers are asked to stop, busy ones (a Ctrl-C, an error) killed at once."""
        for worker in self.workers:
            if worker.job is None and worker.ready:
                worker.conn.send(None)
                worker.process.join(STOP_WAIT_S)
            self._kill(worker)
