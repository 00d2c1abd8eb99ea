"""What a batch prints: the live progress display on stderr, the per-scenario lines and the frontier's walk."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from scaleacross_milp.batch.frontier import Frontier
from scaleacross_milp.batch.result import ScenarioResult, Status
from scaleacross_milp.batch.runner import BatchReport
from scaleacross_milp.batch.summary import SUMMARY_CSV, SUMMARY_PARQUET, plan_columns
from scaleacross_milp.batch.worker import Job
from scaleacross_milp.report.summary import seconds


class BatchProgress:
    """A batch's live progress on stderr (batch.runner.Observer): done / running / failed of all scenarios and the
    ETA; inert when `enabled` is false or stderr is not a terminal."""

    def __init__(self, enabled: bool = True) -> None:
        console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("batch"), BarColumn(), MofNCompleteColumn(),
            TextColumn("done, {task.fields[running]} running, {task.fields[failed]} failed, ETA"),
            TimeRemainingColumn(), console=console, transient=True, disable=not (enabled and console.is_terminal))
        self.task: TaskID | None = None
        self.running: set[str] = set()
        self.failed = 0

    def begin(self, total: int, done: int) -> None:
        self.task = self.progress.add_task("batch", total=total, completed=done, running=0, failed=0)

    def started(self, job: Job) -> None:
        self.running.add(job.id)
        self.progress.update(self.task, running=len(self.running))

    def finished(self, result: ScenarioResult, final: bool) -> None:
        """A run ended; a failure that will be retried is not done yet."""

        self.running.discard(result.id)
        self.failed += final and result.status is not Status.solved
        self.progress.update(self.task, advance=int(final), running=len(self.running), failed=self.failed)

    def __enter__(self) -> BatchProgress:
        self.progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.progress.stop()


def result_line(result: ScenarioResult, label: str) -> str:
    """`<id> (<axes>): verified 1.728 s, 2,427,171 tokens/s, TP1 ..., fsdp, DP-out` or its failure."""
    columns = plan_columns(result)
    if not columns:
        return f"{result.id} ({label}): {result.status.value} after {result.attempts} run(s): {result.reason}"
    time = columns["verified_iteration_s"] or columns["predicted_iteration_s"]  # replayed when there is a replay
    return (f"{result.id} ({label}): verified {seconds(time)} per iteration, {columns['tokens_per_s']:,.0f} tokens/s, "
            f"{columns['shape']}, {columns['schedule']}, {columns['dp_mode']}, {columns['pattern']}")


def batch_lines(report: BatchReport, labels: dict[str, str], out_dir: Path) -> list[str]:
    """Counts (scenarios not run: a Ctrl-C), the fastest scenario, every failure with its reason, and where the
    results are."""

    solved = [r for r in report.results if r.status is Status.solved and r.plan is not None]
    missing = len(labels) - len(report.results)
    lines = [f"Solved {len(solved):,} of {len(labels):,} scenarios ({report.reused:,} already finished, "
             f"{report.run:,} runs now); {len(report.failed):,} without a plan"
             + (f"; {missing:,} not run" if missing else "")]
    if solved:
        best = max(solved, key=lambda r: plan_columns(r)["tokens_per_s"])
        lines.append("Fastest: " + result_line(best, labels[best.id]))
    lines += ["Failed: " + result_line(r, labels[r.id]) for r in report.failed]
    lines.append(f"Results in {out_dir}: one JSON per scenario, {SUMMARY_CSV}, {SUMMARY_PARQUET}")
    return lines


def axis_value(axis: str, value: float) -> str:
    """An axis value of a frontier with its unit."""
    if axis == "buildings":
        return f"{int(value)} buildings"
    if axis == "link_distance_km":
        return f"{value:,.0f} km"
    if axis == "loss_rate":
        return f"{value * 100:.3g} % loss"
    return f"{value:.4g} x"


def frontier_lines(found: Frontier, within_pct: float) -> list[str]:
    """The reference and target times, the curve walked sorted by value, and the answer with its bracket."""
    lines = [f"Instance's own verified iteration time: {seconds(found.reference_s)}; within {within_pct:g} %: "
             f"at most {seconds(found.target_s)}", f"Curve walked ({len(found.points)} points):"]
    for point in sorted(found.points, key=lambda p: p.value):
        time = point.iteration_s
        verdict = (f"verified {seconds(time)} ({(time / found.reference_s - 1) * 100:+.1f} %), "
                   f"{'within' if time <= found.target_s else 'beyond'}") if time is not None else (
            f"no plan ({point.result.status.value}: {point.result.reason})")
        lines.append(f"  {found.axis} {axis_value(found.axis, point.value)}: {verdict}")
    what = f"{found.want.value} {found.axis}"
    if found.answer is None:
        end = found.points[0].value
        lines.append(f"No {found.axis} in the range keeps it within {within_pct:g} %: even "
                     f"{axis_value(found.axis, end)} is beyond")
    elif found.bracket is None:
        lines.append(f"Answer: {what} = {axis_value(found.axis, found.answer)}, the end of the range searched "
                     f"(the whole range is within {within_pct:g} %; widen it with --lo / --hi)")
    else:
        low, high = sorted(found.bracket)
        lines.append(f"Answer: {what} = {axis_value(found.axis, found.answer)} (bracket "
                     f"{axis_value(found.axis, low)} .. {axis_value(found.axis, high)})")
    return lines
