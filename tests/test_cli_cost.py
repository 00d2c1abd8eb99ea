"""Cost on the command line: a cost solve's report in dollars, an unreachable budget or a missing price refused
with exit 2 naming the field, and the price fields in the instance schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scaleacross_milp import cli
from tests.pricing import FAR_USD, NEAR_USD, priced_halls

runner = CliRunner()


@pytest.fixture
def instance_file(small_instance, tmp_path):
    """The priced two-hall instance (tests/pricing.py) with `search` overrides, written as JSON."""

    def write(**search) -> Path:
        path = tmp_path / "priced.json"
        data = priced_halls(small_instance, **search).model_dump(mode="json", exclude_none=True)
        path.write_text(json.dumps(data))
        return path

    return write


def dollars(pattern: str, text: str) -> float:
    return float(re.search(pattern, text, re.M).group(1))


def test_cost_solve_reports_its_objective_bound_and_costs_in_dollars(instance_file):
    result = runner.invoke(cli.app, ["solve", str(instance_file(objective="cost")), "--quiet"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert re.search(r"^Objective: cost$", text, re.M) and re.search(r"^Status: optimal$", text, re.M)
    incumbent = dollars(r"^Incumbent: \$([\d.]+)/iteration \([\d.]+ s\)$", text)
    bound = dollars(r"^Best bound: \$([\d.]+)/iteration$", text)
    predicted = dollars(r"^Cost \(predicted\): \$([\d.]+)/iteration, \$[\d.]+/M tokens \(16 GPUs held", text)
    assert 0 < bound <= incumbent and predicted == incumbent
    assert re.search(r"^Cost \(verified\): \$[\d.]+/iteration, \$[\d.]+/M tokens \(16 GPUs held", text, re.M)


def test_an_unreachable_budget_exits_2_naming_the_field(instance_file, assert_input_error):
    result = runner.invoke(cli.app, ["solve", str(instance_file(max_cost_per_iteration=0.001)), "--quiet"])
    assert_input_error(result, "infeasible", "search.max_cost_per_iteration ($0.001/iteration)")


def test_a_cost_objective_without_a_price_for_every_building_exits_2_naming_it(instance_file, assert_input_error):
    path = instance_file(objective="cost")
    data = json.loads(path.read_text())
    del data["gpu_types"]["h100-far"]["gpu_hour_usd"]
    path.write_text(json.dumps(data))
    result = runner.invoke(cli.app, ["validate", str(path)])
    assert_input_error(result, "topology.buildings[1].gpu_hour_usd", "'far'", "gpu_types['h100-far'].gpu_hour_usd",
                       "search.objective is 'cost'")
    data["search"]["objective"] = "time"  # still priced (near hall, link): the far hall would go uncounted
    path.write_text(json.dumps(data))
    assert_input_error(runner.invoke(cli.app, ["validate", str(path)]), "topology.buildings[1].gpu_hour_usd",
                       "prices are given")


def test_instance_schema_describes_the_prices_and_objectives():
    result = runner.invoke(cli.app, ["schema", "instance"])
    assert result.exit_code == 0
    defs = json.loads(result.stdout)["$defs"]
    for model, field in [("Building", "gpu_hour_usd"), ("GPUType", "gpu_hour_usd"), ("Link", "egress_usd_per_gb"),
                         ("SearchOptions", "objective"), ("SearchOptions", "max_cost_per_iteration"),
                         ("SearchOptions", "min_tokens_per_s")]:
        assert defs[model]["properties"][field]["description"], (model, field)
    assert defs["Objective"]["enum"] == ["time", "cost"]


def test_compare_prices_every_baseline_at_the_instance_s_prices(instance_file, tmp_path):
    # Each baseline's replay carries its cost (the verifier prices every replay when the instance gives prices), and
    # the comparison table sets $ per iteration and per million tokens beside the times.
    plan_path = tmp_path / "plan.json"
    result = runner.invoke(cli.app, ["solve", str(instance_file()), "--compare", "--quiet", "-o", str(plan_path)],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert re.search(r"┃ kind .* \$/iteration .* \$/M tokens ", result.stdout)
    plan = json.loads(plan_path.read_text())
    for row in plan["comparison"]:
        if row["iteration_s"] is None:
            continue
        cost = row["cost"]
        held = {k for stage in row["layout"]["stages"] for k in stage["cells_per_building"]}
        held_usd_s = sum(16 * price / 3600 for hall, price in (("near", NEAR_USD), ("far", FAR_USD)) if hall in held)
        assert cost["iteration_s"] == pytest.approx(row["iteration_s"])
        assert cost["gpu_usd"] == pytest.approx(held_usd_s * row["iteration_s"], rel=1e-9), row["kind"]
        assert cost["usd_per_iteration"] == pytest.approx(cost["gpu_usd"] + cost["egress_usd"])
