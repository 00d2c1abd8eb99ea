"""The terminal summary of a plan, rendered from hand-built plans (no solver)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from scaleacross_milp.report.summary import (
    compress_route,
    dp_mode_label,
    percent,
    render_plan,
    schedule_label,
    seconds,
)
from scaleacross_milp.spec.plan import Plan


def plan_data(**overrides) -> dict:
    data = {
        "instance": "two-buildings",
        "shape": {"tp": 4, "cp": 2, "ep": 1, "pp": 4, "dp": 8, "micro_batch": 1, "microbatches": 16},
        "schedule": "interleaved", "interleave": 2, "dp_mode": "hsdp", "hsdp_replicas": 2,
        "stages": [
            {"stage": 0, "layers": 20, "cells_per_building": {"A": 8}},
            {"stage": 1, "layers": 20, "cells_per_building": {"A": 6, "B": 2}},
            {"stage": 2, "layers": 20, "cells_per_building": {"B": 8}},
            {"stage": 3, "layers": 20, "cells_per_building": {"B": 8}},
        ],
        "pipelines": [{"buildings": ["A", "A", "B", "B"], "pipelines": 2},
                      {"buildings": ["A", "B", "B", "B"], "pipelines": 6}],
        "links": [{"a": "A", "b": "B", "transport": "spray_selective_repeat", "efficiency": 0.975,
                   "pp_gbyte": 12.5, "dp_gbyte": 3.25, "busy_s": 0.0421}],
        "prediction": {
            "iteration_s": 2.5,
            "breakdown": {"compute_s": 2.0, "exposed_tp_ep_s": 0.2, "bubble_s": 0.25, "exposed_pp_s": 5e-16,
                          "exposed_dp_s": 0.04, "optimizer_s": 0.01},
            "tokens_per_s": 1234567.8, "mfu": 0.4321,
        },
        "solve": {"status": "time limit", "incumbent_s": 2.5, "bound_s": 2.25, "rel_gap": 0.1,
                  "wall_s": 12.345, "shapes_total": 500, "shapes_solved": 7, "shapes_pruned": 30,
                  "variables": 120, "binaries": 10, "integers": 20, "constraints": 300},
        "explanation": ["Layout: hybrid [pipelines and DP groups both cross buildings].", "Second line."],
    }
    return data | overrides


def rendered(plan: Plan) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    render_plan(plan, console)
    return console.export_text()


@pytest.fixture
def text() -> str:
    return rendered(Plan.model_validate(plan_data()))


def test_header_shape_schedule_and_dp_mode(text):
    assert "Plan for two-buildings" in text
    assert "TP 4  CP 2  EP 1  PP 4  DP 8" in text
    assert "micro-batch 1 x 16 microbatches (128 sequences)" in text  # DP 8 x 1 x 16: the batch run
    assert "GPUs used 256 (cell = 8 GPUs)" in text
    assert "Schedule: interleaved (v=2)" in text
    assert "DP mode: hsdp (2 replicas x shard group 4)" in text


def test_placement_rows_give_cells_and_gpus_per_building(text):
    row = next(line for line in text.splitlines() if line.startswith("│     1 "))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells == ["1", "20", "6 / 48", "2 / 16", "64"]
    row0 = next(line for line in text.splitlines() if line.startswith("│     0 "))
    assert [c.strip() for c in row0.strip("│").split("│")] == ["0", "20", "8 / 64", "-", "64"]


def test_routes_are_compressed(text):
    assert "A x2 -> B x2" in text
    assert "A -> B x3" in text


def test_links_with_units(text):
    row = next(line for line in text.splitlines() if "A-B" in line and "spray" in line)
    assert "97.5 %" in row and "12.5 GB" in row and "3.2 GB" in row and "42.1 ms" in row


def test_prediction_and_breakdown_with_units(text):
    assert "Predicted iteration time: 2.500 s" in text
    assert "Iteration time: 2.500 s" in text
    assert "Throughput: 1,234,568 tokens/s" in text
    assert "MFU: 43.2 %" in text
    lines = text.splitlines()
    assert any("compute" in line and "2.000 s" in line and "80.0 %" in line for line in lines)
    assert any("pipeline bubble" in line and "250.0 ms" in line and "10.0 %" in line for line in lines)
    assert any("pipeline sends" in line and "0 ms" in line for line in lines)  # 5e-16 noise shows as 0
    assert any("optimizer step" in line and "10.0 ms" in line for line in lines)


def test_solve_report(text):
    for line in ["Status: time limit", "Incumbent: 2.500 s", "Best bound: 2.250 s", "Relative gap: 10.000 %",
                 "Wall time: 12.35 s; work: 0.00 s of the reference machine (the same steps and plan on any load)",
                 "Shapes: 500 enumerated, 37 passed screening, 7 solved, 30 pruned by bound",
                 "Model size (chosen shape): 120 variables (10 binary, 20 integer), 300 constraints"]:
        assert line in text


def test_a_solve_the_wall_clock_ended_says_its_plan_depends_on_the_load():
    data = plan_data()
    data["solve"] |= {"work_s": 9.5, "wall_bound": True}
    assert ("Wall time: 12.35 s; work: 9.50 s of the reference machine (the wall clock ended the search first: on a "
            "slower or busier machine the plan may differ)") in rendered(Plan.model_validate(data))


def test_shapes_left_open_at_the_limit_are_not_called_pruned():
    data = plan_data()
    data["solve"] |= {"shapes_pruned": 10, "shapes_open": 20}
    assert "Shapes: 500 enumerated, 37 passed screening, 7 solved, 10 pruned by bound, 20 left open at the limit" in (
        rendered(Plan.model_validate(data)))


def test_explanation_printed_verbatim(text):
    assert "- Layout: hybrid [pipelines and DP groups both cross buildings]." in text
    assert "- Second line." in text
    assert text.index("Status:") < text.index("- Second line.")


def test_no_links_and_missing_bound():
    data = plan_data(links=[], schedule="1f1b", interleave=1, dp_mode="ddp", hsdp_replicas=None)
    data["solve"] = data["solve"] | {"bound_s": None, "rel_gap": None}
    text = rendered(Plan.model_validate(data))
    assert "Inter-building links" not in text
    assert "Schedule: 1f1b   DP mode: ddp" in text
    assert "Best bound: n/a" in text and "Relative gap: n/a" in text


@pytest.mark.parametrize(("route", "expected"), [
    (["A"], "A"),
    (["A"] * 8 + ["B"] * 8, "A x8 -> B x8"),
    (["A", "B", "A"], "A -> B -> A"),
    (["A", "A", "C"], "A x2 -> C"),
])
def test_compress_route(route, expected):
    assert compress_route(route) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (None, "n/a"), (0.0, "0 ms"), (1e-17, "0 ms"), (0.0005, "0.5 ms"), (0.999, "999.0 ms"), (1.0, "1.000 s"),
    (75.25, "75.250 s"),
])
def test_seconds(value, expected):
    assert seconds(value) == expected


def test_percent_and_labels():
    assert percent(0.46659) == "46.7 %"
    assert percent(None) == "n/a"
    plan = Plan.model_validate(plan_data(schedule="zb-v", interleave=2, dp_mode="fsdp", hsdp_replicas=None))
    assert schedule_label(plan) == "zb-v (v=2)"
    assert dp_mode_label(plan) == "fsdp"
