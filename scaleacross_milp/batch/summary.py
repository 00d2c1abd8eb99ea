"""A batch's summary table: results/summary.csv and results/summary.parquet, one row per scenario."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from scaleacross_milp.batch.result import ScenarioResult, atomic_write
from scaleacross_milp.milp.extract import layout_pattern
from scaleacross_milp.spec.plan import dp_mode_label, schedule_label

SUMMARY_CSV, SUMMARY_PARQUET = "summary.csv", "summary.parquet"
RESULT_COLUMNS = (
    "status", "reason", "shape", "tp", "cp", "ep", "pp", "dp", "schedule", "dp_mode", "pattern",
    "predicted_iteration_s", "verified_iteration_s", "tokens_per_s", "mfu", "predicted_usd_per_iteration",
    "verified_usd_per_iteration", "usd_per_m_tokens", "held_gpus", "objective", "best_bound_s", "best_bound_usd",
    "rel_gap", "solve_wall_s", "solve_work_s", "solve_wall_bound", "attempts", "wall_s", "worker_rss_mib",
)
"""Columns after `id` and the axes. tokens_per_s, mfu and usd_per_m_tokens are at the verified time (the predicted
one when there is no replay); the times are seconds per iteration, the costs $ per iteration (Prediction.cost and
Verification.cost; empty without prices) and $ per million tokens, best_bound_s / best_bound_usd the bound of the
objective the search minimised (rel_gap is on it), solve_wall_s, solve_work_s (the search's work, SolveStats.work_s)
and wall_s seconds, solve_wall_bound whether the wall clock ended the search (its plan then depends on the workers'
load), worker_rss_mib MiB."""


def plan_columns(result: ScenarioResult) -> dict[str, Any]:
    """The chosen layout and its figures; empty when the scenario has no plan."""
    plan = result.plan
    if plan is None:
        return {}
    verified = plan.verification.iteration_s if plan.verification else None
    time = verified if verified is not None else plan.prediction.iteration_s
    predicted_cost = plan.prediction.cost
    verified_cost = plan.verification.cost if plan.verification else None
    cost = verified_cost if verified_cost is not None else predicted_cost
    return {
        "shape": plan.shape.label(), "tp": plan.shape.tp, "cp": plan.shape.cp, "ep": plan.shape.ep,
        "pp": plan.shape.pp, "dp": plan.shape.dp, "schedule": schedule_label(plan), "dp_mode": dp_mode_label(plan),
        "pattern": layout_pattern(plan.stages, plan.pipelines).split(" (")[0],  # the name before its gloss
        "predicted_iteration_s": plan.prediction.iteration_s, "verified_iteration_s": verified,
        "tokens_per_s": plan.prediction.tokens_per_s * plan.prediction.iteration_s / time,
        "mfu": plan.prediction.mfu * plan.prediction.iteration_s / time,  # same FLOPs and GPUs: MFU ~ 1 / time
        "predicted_usd_per_iteration": predicted_cost.usd_per_iteration if predicted_cost else None,
        "verified_usd_per_iteration": verified_cost.usd_per_iteration if verified_cost else None,
        "usd_per_m_tokens": cost.usd_per_million_tokens if cost else None,
        "held_gpus": cost.held_gpus if cost else None, "objective": plan.solve.objective.value,
        "best_bound_s": plan.solve.bound_s, "best_bound_usd": plan.solve.bound_usd, "rel_gap": plan.solve.rel_gap,
        "solve_wall_s": plan.solve.wall_s, "solve_work_s": plan.solve.work_s, "solve_wall_bound": plan.solve.wall_bound,
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
