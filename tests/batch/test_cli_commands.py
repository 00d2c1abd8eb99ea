"""`batch`, `frontier`, `plot` and `schema sweep` through typer's CliRunner, and the frontier's bisection beneath,
on the bundled two-building Llama 3 8B instance (A, B: 128 H100 each, 3,200 Gbit/s over 1,000 km). One building
holds half the GPUs, so its iteration takes about twice as long (the per-GPU work doubles)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from scaleacross_milp import cli
from scaleacross_milp.batch.frontier import Want, frontier
from scaleacross_milp.loader import load_instance
from tests.batch.hooks import InProcess

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "instances" / "dp-out-2b-far-llama3-8b.json"
runner = CliRunner()


def run(*args):
    return runner.invoke(cli.app, [str(a) for a in args])


def sweep(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"base": str(BASE), **fields}))
    return path


@pytest.fixture(scope="module")
def batch_run(tmp_path_factory):
    """One batch over buildings 1 and 2 on one spawned worker, then the same command again."""
    folder = tmp_path_factory.mktemp("batch")
    path = sweep(folder, grid={"buildings": [1, 2]})
    out = folder / "results"
    first = run("batch", path, "-o", out, "--workers", 1, "--time-limit", 5, "--quiet")
    again = run("batch", path, "-o", out, "--workers", 1, "--time-limit", 5, "--quiet")
    return first, again, out


def test_batch_solves_every_scenario_and_resumes(batch_run):
    first, again, out = batch_run
    assert first.exit_code == 0, first.output
    assert "Sweep " in first.stdout and ": 2 scenarios" in first.stdout
    assert "Solved 2 of 2 scenarios (0 already finished, 2 runs now); 0 without a plan" in first.stdout
    assert again.exit_code == 0, again.output
    assert "Solved 2 of 2 scenarios (2 already finished, 0 runs now)" in again.stdout
    table = pq.read_table(out / "summary.parquet").to_pylist()
    assert [row["buildings"] for row in table] == [1, 2]
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{row['id']}.json" for row in table]
                                                          + ["summary.csv", "summary.parquet"])


def test_batch_refuses_a_broken_sweep_before_solving(tmp_path, assert_input_error):
    path = sweep(tmp_path, grid={"link_capacity_scale": [2, -1], "topology.links.0.loss_rate": [0, 1.5]})
    out = tmp_path / "results"
    result = run("batch", path, "-o", out, "--quiet")
    assert_input_error(result, f"{path}: 4 problems",
                       "scenario link_capacity_scale=2, topology.links.0.loss_rate=1.5: topology.links.0.loss_rate: "
                       "Input should be less than 1",
                       "scenario link_capacity_scale=-1, topology.links.0.loss_rate=0: link_capacity_scale: must be "
                       "a number > 0, got -1",
                       "scenario link_capacity_scale=-1, topology.links.0.loss_rate=1.5: link_capacity_scale: must be "
                       "a number > 0, got -1\n  scenario link_capacity_scale=-1, topology.links.0.loss_rate=1.5: "
                       "topology.links.0.loss_rate: Input should be less than 1")
    assert not out.exists()


def test_schema_sweep_documents_the_axes():
    result = run("schema", "sweep")
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert set(schema["properties"]) == {"name", "description", "base", "grid", "cases"}
    assert "link_capacity_scale" in schema["properties"]["grid"]["description"]


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_plot_writes_the_image(batch_run, tmp_path, suffix):
    _, _, out = batch_run
    image = tmp_path / f"sweep.{suffix}"
    result = run("plot", out, "--x", "buildings", "--y", "verified_iteration_s", "--color", "pattern", "-o", image)
    assert result.exit_code == 0, result.output
    head = image.read_bytes()[:64]
    assert head.startswith(b"\x89PNG") if suffix == "png" else b"<svg" in image.read_bytes()[:2000]


def test_plot_names_a_missing_column(batch_run, tmp_path, assert_input_error):
    _, _, out = batch_run
    result = run("plot", out, "--x", "buildings", "--y", "tokens", "-o", tmp_path / "a.png")
    assert_input_error(result, "tokens: no such column in the summary (columns: id, buildings, status")


def test_frontier_least_buildings(tmp_path):
    """Within 50 %: one building (about +90 %) is beyond, so the answer is 2 with the bracket 1 .. 2; within
    150 % the whole range holds and the answer is 1."""
    instance = load_instance(BASE)
    found = frontier(instance, BASE, "buildings", 0.5, InProcess(), tmp_path)
    (one,) = found.points[1:]
    assert found.want is Want.least and [p.value for p in found.points] == [2, 1]
    assert found.points[0].iteration_s == found.reference_s
    assert found.reference_s * 1.5 < one.iteration_s < found.reference_s * 2.5
    assert (found.answer, found.bracket) == (2, (1, 2))
    executor = InProcess()
    loose = frontier(instance, BASE, "buildings", 1.5, executor, tmp_path)
    assert executor.seen == []  # every point was in the results folder already
    assert (loose.answer, loose.bracket) == (1, None)


def test_frontier_command_prints_curve_and_answer(tmp_path):
    result = run("frontier", BASE, "--vary", "buildings", "--within", 50, "--time-limit", 5, "--results", tmp_path)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1] == "Curve walked (2 points):"
    assert lines[2].startswith("  buildings 1 buildings: verified ") and lines[2].endswith("beyond")
    assert lines[3].startswith("  buildings 2 buildings: verified ") and "(+0.0 %), within" in lines[3]
    assert lines[4] == "Answer: least buildings = 2 buildings (bracket 1 buildings .. 2 buildings)"


def test_frontier_refuses_an_axis_it_cannot_bisect(assert_input_error):
    result = run("frontier", BASE, "--vary", "gpu_type", "--within", 5)
    assert_input_error(result, "--vary gpu_type: frontier searches one of building_gpus_scale, buildings")
