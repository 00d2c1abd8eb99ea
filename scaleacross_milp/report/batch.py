"""A batch's reports: the summary table (results/summary.csv and .parquet, one row per scenario) and the live
progress display on stderr."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from scaleacross_milp.milp.extract import layout_pattern
from scaleacross_milp.report.summary import seconds
from scaleacross_milp.spec.plan import dp_mode_label, schedule_label

if TYPE_CHECKING:
    from scaleacross_milp.batch.frontier import Frontier
    from scaleacross_milp.batch.result import ScenarioResult
    from scaleacross_milp.batch.runner import BatchReport
    from scaleacross_milp.batch.worker import Job

SUMMARY_CSV, SUMMARY_PARQUET = "summary.csv", "summary.parquet"
RESULT_COLUMNS = (
    "status", "reason", "shape", "tp", "cp", "ep", "pp", "dp", "schedule", "dp_mode", "pattern",
    "predicted_iteration_s", "verified_iteration_s", "tokens_per_s", "mfu", "best_bound_s", "rel_gap",
    "solve_wall_s", "attempts", "wall_s", "worker_rss_mib",
)
"""Columns after `id` and the axes. tokens_per_s and mfu are at the verified time (the predicted one when there is
no replay); the times are seconds per iteration, solve_wall_s and wall_s seconds, worker_rss_mib MiB."""


def plan_columns(result: ScenarioResult) -> dict[str, Any]:
    """The chosen layout and its figures; empty when the scenario has no plan."""
    plan = result.plan
    if plan is None:
        return {}
    verified = plan.verification.iteration_s if plan.verification else None
    time = verified if verified is not None else plan.prediction.iteration_s
    return {
        "shape": plan.shape.label(), "tp": plan.shape.tp, "cp": plan.shape.cp, "ep": plan.shape.ep,
        "pp": plan.shape.pp, "dp": plan.shape.dp, "schedule": schedule_label(plan), "dp_mode": dp_mode_label(plan),
        "pattern": layout_pattern(plan.stages, plan.pipelines).split(" (")[0],  # the name before its gloss
        "predicted_iteration_s": plan.prediction.iteration_s, "verified_iteration_s": verified,
        "tokens_per_s": plan.prediction.tokens_per_s * plan.prediction.iteration_s / time,
        "mfu": plan.prediction.mfu * plan.prediction.iteration_s / time,  # same FLOPs and GPUs: MFU ~ 1 / time
        "best_bound_s": plan.solve.bound_s, "rel_gap": plan.solve.rel_gap, "solve_wall_s": plan.solve.wall_s,
    }


def summary_row(result: ScenarioResult) -> dict[str, Any]:
    return {"id": result.id, **result.axes, "status": result.status.value, "reason": result.reason,
            "attempts": result.attempts, "wall_s": result.wall_s, "worker_rss_mib": result.worker_rss_mib,
            **plan_columns(result)}


def axis_names(results: list[ScenarioResult]) -> list[str]:
    """Every axis of the results, in the order first met."""
    return list(dict.fromkeys(axis for result in results for axis in result.axes))


def column_values(values: list[Any]) -> list[Any]:
    """One type per column, as parquet needs: numbers stay numbers, strings strings; a column holding anything
    else (objects, lists, a mix) becomes compact JSON text."""
    present = [v for v in values if v is not None]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)
    if numbers and any(isinstance(v, float) for v in present):
        return [None if v is None else float(v) for v in values]
    if numbers or all(isinstance(v, str) for v in present) or all(isinstance(v, bool) for v in present):
        return values
    return [None if v is None else json.dumps(v, separators=(",", ":")) for v in values]


def summary_columns(results: list[ScenarioResult]) -> dict[str, list[Any]]:
    """Column name -> values, one row per result: id, the axes, then RESULT_COLUMNS."""
    rows = [summary_row(result) for result in results]
    names = ["id", *axis_names(results), *RESULT_COLUMNS]
    return {name: column_values([row.get(name) for row in rows]) for name in names}


def write_summary(out_dir: Path, results: list[ScenarioResult]) -> None:
    """summary.csv and summary.parquet in `out_dir`, each written atomically (batch.result.atomic_write)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scaleacross_milp.batch.result import atomic_write

    columns = summary_columns(results)

    def write_csv(handle) -> None:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(zip(*columns.values(), strict=True))

    atomic_write(out_dir / SUMMARY_CSV, write_csv)
    table = pa.table({name: pa.array(values) for name, values in columns.items()})
    atomic_write(out_dir / SUMMARY_PARQUET, lambda handle: pq.write_table(table, handle), binary=True)


def read_summary(out_dir: Path) -> list[dict[str, Any]]:
    """The rows of out_dir/summary.parquet."""
    import pyarrow.parquet as pq

    return pq.read_table(out_dir / SUMMARY_PARQUET).to_pylist()


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
        from scaleacross_milp.batch.result import Status

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
    from scaleacross_milp.batch.result import Status

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
