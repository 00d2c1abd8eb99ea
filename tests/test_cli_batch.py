"""Batch rounding through the command line (typer's CliRunner): the schema documents it, `evaluate` accepts the
rounded batch and refuses others (exit 2), `solve` reports and writes the batch it runs."""

from __future__ import annotations

import json

import pytest

from scaleacross_milp.spec.plan import Plan
from tests.test_cli import bare_layout, run, small, write


def test_schema_documents_the_rounding_fields():
    result = run("schema", "instance")
    assert result.exit_code == 0, result.output
    fields = json.loads(result.stdout)["$defs"]["Training"]["properties"]
    assert fields["batch_rounding"]["default"] == "exact"
    assert "m = floor(B/q)" in fields["batch_rounding"]["description"]
    assert fields["batch_tolerance"]["default"] == 0.05
    assert fields["batch_tolerance"]["exclusiveMaximum"] == 1


def test_evaluate_runs_the_batch_rounded_up_and_reports_it(tmp_path):
    """509 sequences rounded up: TP 8 x PP 4 x DP 8 on all 256 GPUs runs 8 x 64 = 512 (+0.6 %)."""
    result = run("evaluate", small(tmp_path, 256, 509, batch_rounding="up"), bare_layout(tmp_path, 8, 4, 8, 64))
    assert result.exit_code == 0, result.output
    assert "Batch: 512 sequences run (requested 509, +0.6 %, rounded up under batch_rounding 'up'), " in result.stdout
    assert "tokens/s on the batch run" in result.stdout
    assert "GPUs used: 256 of 256 (100.0 %)" in result.stdout


def test_evaluate_refuses_a_batch_the_rule_does_not_give(tmp_path, assert_input_error):
    result = run("evaluate", small(tmp_path, 256, 509, batch_rounding="down"), bare_layout(tmp_path, 8, 4, 8, 64))
    assert_input_error(result, "shape.microbatches: dp x micro_batch x microbatches = 512 sequences",
                       "training.batch_rounding 'down' within batch_tolerance 5.0 % allows 504 sequences "
                       "(63 microbatches)")


def test_solve_writes_the_batch_it_runs(tmp_path):
    """13 sequences on 8 H100s at TP 4: rounding down within 10 % runs DP 2 x 6 = 12 (-7.7 %) on all 8 GPUs."""
    data = json.loads(small(tmp_path, 8, 13, batch_rounding="down", batch_tolerance=0.1).read_text())
    data["search"] |= {"tp_degrees": [4], "cp_degrees": [1], "pp_degrees": [1], "micro_batch_sizes": [1],
                       "dp_modes": ["ddp"]}
    out = tmp_path / "plan.json"
    result = run("solve", write(tmp_path, data, "thirteen.json"), "-o", out, "--no-verify")
    assert result.exit_code == 0, result.output
    assert "Batch: 12 sequences run (requested 13, -7.7 %, rounded down under batch_rounding 'down')" in result.stdout
    plan = Plan.model_validate_json(out.read_text())
    assert (plan.shape.dp, plan.shape.batch_sequences, plan.usage.used_gpus) == (2, 12, 8)
    assert (plan.usage.batch.requested_sequences, plan.usage.batch.run_sequences) == (13, 12)
    assert plan.usage.batch.tokens_per_s == pytest.approx(12 * 8192 / plan.prediction.iteration_s)
