"""`solve --compare`: every baseline beside the optimiser's plan, through the function and the CLI; the `baseline`
command."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from scaleacross_milp.baselines import Kind, baseline
from scaleacross_milp.baselines.compare import compare
from scaleacross_milp.cli import app
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.report.summary import seconds
from scaleacross_milp.spec.plan import Layout, Plan
from scaleacross_milp.verify.verifier import verify

SMALL_SPACE = {"tp_degrees": [8], "cp_degrees": [1], "pp_degrees": [1], "micro_batch_sizes": [1], "dp_modes": ["ddp"],
               "schedules": ["1f1b"]}
"""Five layouts (DP 1 or 2 over two 16-GPU buildings): exhaustive runs."""


def test_every_baseline_is_priced_and_the_speedup_is_the_tokens_ratio(two_buildings):
    # DDP overlapping its reduction as the baselines' FSDP modes do, so no baseline outside the searched space (DDP
    # only) can beat the plan by the overlap alone
    instance = two_buildings(16, 16, search=SMALL_SPACE, batch=2, link={"capacity_gbit_s": 1}, overlap_grad_reduce=True)
    plan = solve_instance(instance)
    verification, _ = verify(instance, plan)
    rows = compare(instance, verification.tokens_per_s)
    assert [row.kind for row in rows] == [kind.value for kind in Kind]
    for row in rows:
        assert row.layout is not None and row.iteration_s is not None, row.note
        assert row.speedup == pytest.approx(verification.tokens_per_s / row.tokens_per_s - 1)
        assert row.iteration_s == pytest.approx(verify(instance, row.layout)[0].iteration_s)
    exhaustive = rows[-1]
    # the optimiser's plan is the exhaustive optimum here (DP 2 in one building): no speedup either way
    assert exhaustive.speedup == pytest.approx(0.0, abs=1e-9)
    assert all(row.speedup >= -1e-9 for row in rows)


@pytest.mark.slow  # every baseline of a 128-GPU instance priced end to end (about 12 s on 2 cores)
def test_a_space_too_large_for_exhaustive_is_a_row_with_the_count(two_buildings):
    instance = two_buildings(64, 64, batch=64)
    rows = compare(instance, 1.0)
    exhaustive = next(row for row in rows if row.kind == "exhaustive")
    assert exhaustive.iteration_s is None and exhaustive.speedup is None
    assert "layouts, above the limit of 20,000" in exhaustive.note


def write_instance(tmp_path, instance) -> str:
    path = tmp_path / "instance.json"
    path.write_text(instance.model_dump_json())
    return str(path)


def test_baseline_command_prints_the_verified_report_and_writes_a_layout_evaluate_reads(tmp_path, two_buildings):
    instance = two_buildings(16, 16, search=SMALL_SPACE, batch=2)
    path, out = write_instance(tmp_path, instance), tmp_path / "production.json"
    result = CliRunner().invoke(app, ["baseline", path, "--kind", "production", "-o", str(out)])
    assert result.exit_code == 0, result.output
    expected = baseline(instance, Kind.production)
    assert "Baseline production: TP8 CP1 EP1 PP1" in result.stdout
    assert f"Verifier: {seconds(expected.iteration_s)}" in result.stdout
    layout = Layout.model_validate_json(out.read_text())
    assert layout == expected.layout
    evaluated = CliRunner().invoke(app, ["evaluate", path, str(out)])
    assert evaluated.exit_code == 0, evaluated.output
    assert verify(instance, layout)[0].iteration_s == pytest.approx(expected.iteration_s)


def test_exhaustive_refuses_a_large_space_with_exit_2(tmp_path, two_buildings, assert_input_error):
    path = write_instance(tmp_path, two_buildings(64, 64, batch=64))
    result = CliRunner().invoke(app, ["baseline", path, "--kind", "exhaustive"])
    assert_input_error(result, "exhaustive: the searched space holds", "above the limit of 20,000")


def test_solve_compare_prints_the_table_and_the_plan_carries_it(tmp_path, two_buildings):
    instance = two_buildings(16, 16, search=SMALL_SPACE, batch=2, link={"capacity_gbit_s": 1})
    path, out = write_instance(tmp_path, instance), tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["solve", path, "--compare", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "Optimiser vs baselines" in result.stdout
    plan = Plan.model_validate(json.loads(out.read_text()))
    assert [row.kind for row in plan.comparison] == [kind.value for kind in Kind]
    assert all(row.speedup is not None for row in plan.comparison)


def test_compare_needs_the_replay(tmp_path, two_buildings, assert_input_error):
    path = write_instance(tmp_path, two_buildings(16, 16, search=SMALL_SPACE, batch=2))
    assert_input_error(CliRunner().invoke(app, ["solve", path, "--compare", "--no-verify"]), "--compare")
