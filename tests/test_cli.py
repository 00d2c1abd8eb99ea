"""The command line, run through typer's CliRunner on the campus instance and broken copies of it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scaleacross_milp import cli
from scaleacross_milp.loader import load_instance
from scaleacross_milp.milp import solve as solve_module
from scaleacross_milp.milp.price import price_layout
from scaleacross_milp.spec.plan import Layout, Plan
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.verifier import TOLERANCE
from tests.conftest import H100

ROOT = Path(__file__).resolve().parents[1]
CAMPUS = ROOT / "instances" / "campus-2b-llama3-70b.json"
DP_OUT = ROOT / "instances" / "dp-out-2b-far-llama3-8b.json"
"""Proven optimal in about a second: the instance of the tests about what `solve` writes, not what it finds."""
MODEL = ROOT / "models" / "llama3-70b.json"

runner = CliRunner()


def run(*args: str):
    return runner.invoke(cli.app, [str(a) for a in args])


def campus() -> dict:
    data = json.loads(CAMPUS.read_text())
    data["model"] = {"file": str(MODEL)}  # absolute, so copies work from tmp_path
    data["search"]["time_limit_s"] = 20
    return data


def write(tmp_path: Path, data: dict, name: str = "instance.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """One solve of the campus instance with -o, shared by the output tests."""
    out = tmp_path_factory.mktemp("solve") / "plan.json"
    result = run("solve", CAMPUS, "-o", out, "--time-limit", "30", "--threads", "2")
    return result, out


# ---- solve -------------------------------------------------------------------------------------------------


def test_solve_prints_solve_report_and_iteration_time(solved):
    result, _ = solved
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert re.search(r"^Status: (optimal|time limit)$", text, re.M)
    incumbent = float(re.search(r"^Incumbent: ([\d.]+) s$", text, re.M).group(1))
    bound = float(re.search(r"^Best bound: ([\d.]+) s$", text, re.M).group(1))
    gap = float(re.search(r"^Relative gap: ([\d.]+) %$", text, re.M).group(1))
    assert 0 < bound <= incumbent + 1e-3
    assert 0 <= gap <= 1.0  # the instance asks for a 1 % gap
    iteration = float(re.search(r"^Iteration time: ([\d.]+) s$", text, re.M).group(1))
    assert iteration == pytest.approx(incumbent, abs=2e-3)
    assert re.search(r"^Throughput: [\d,]+ tokens/s$", text, re.M)
    assert re.search(r"^MFU: [\d.]+ %$", text, re.M)
    assert "Placement per stage" in text and "Pipeline routes" in text


def test_solve_output_is_a_valid_plan_matching_the_summary(solved):
    result, out = solved
    plan = Plan.model_validate_json(out.read_text())
    assert plan.instance == "campus-2b-llama3-70b"
    assert f"Plan written to {out}" in result.stdout
    assert f"Iteration time: {plan.prediction.iteration_s:.3f} s" in result.stdout
    assert sum(n for stage in plan.stages for n in stage.cells_per_building.values()) * plan.shape.cell_gpus \
        == plan.shape.gpus
    assert plan.shape.gpus <= 4096


def test_solve_refuses_to_overwrite_without_force(tmp_path, assert_input_error):
    out = tmp_path / "plan.json"
    out.write_text("keep me")
    result = run("solve", CAMPUS, "-o", out)
    assert_input_error(result, "exists", "--force")
    assert out.read_text() == "keep me"
    assert "Iteration time" not in result.stdout  # refused before solving


def test_solve_force_overwrites(tmp_path):
    out = tmp_path / "plan.json"
    out.write_text("old")
    result = run("solve", DP_OUT, "-o", out, "--force")
    assert result.exit_code == 0, result.output
    Plan.model_validate_json(out.read_text())


def test_solve_without_output_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("solve", DP_OUT, "--gap", "0.02")
    assert result.exit_code == 0, result.output
    assert "Iteration time:" in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_solve_model_that_cannot_fit_in_memory_exits_2(tmp_path, assert_input_error):
    data = campus()
    data["gpu_types"]["small"] = {"peak_dense_tflops": {"bf16": 100}, "hbm_gib": 16, "hbm_tbyte_s": 1,
                                  "nvlink_domain_gpus": 8, "nvlink_gbyte_s": 100}
    for building in data["topology"]["buildings"]:
        building.update(gpus=8, gpu_type="small", pod_gpus=8)
    path = write(tmp_path, data)
    assert run("validate", path).exit_code == 0  # the file itself is valid
    result = run("solve", path)
    assert_input_error(result, "infeasible", "memory", "GiB")


def test_solve_no_plan_found_exits_1(monkeypatch):
    def give_up(*_args, **_kwargs):
        raise solve_module.NoPlanFound("no feasible layout found within the 1 s time limit")

    monkeypatch.setattr(solve_module, "solve_instance", give_up)
    result = run("solve", CAMPUS, "--time-limit", "1")
    assert result.exit_code == 1
    assert "no feasible layout found" in result.stderr
    assert "Traceback" not in result.output


def test_solve_invalid_plan_from_solver_is_internal_error_exit_3(monkeypatch):
    from scaleacross_milp.spec.plan import Breakdown

    def broken(*_args, **_kwargs):
        return Breakdown(compute_s=1, exposed_tp_ep_s=0, bubble_s=-4e-5, exposed_pp_s=0, exposed_dp_s=0,
                         optimizer_s=0)

    monkeypatch.setattr(solve_module, "solve_instance", broken)
    result = run("solve", CAMPUS)
    assert result.exit_code == 3
    assert "internal error" in result.stderr and "Breakdown" in result.stderr and "bubble_s:" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("option", [("--time-limit", "0"), ("--gap", "1.5"), ("--threads", "0")])
def test_solve_rejects_bad_options(option):
    result = run("solve", CAMPUS, *option)
    assert result.exit_code == 2
    assert option[0] in result.output


def test_solve_missing_file_exits_2(tmp_path, assert_input_error):
    assert_input_error(run("solve", tmp_path / "nope.json"), "nope.json", "cannot read")


# ---- validate ----------------------------------------------------------------------------------------------


def test_validate_ok_prints_summary():
    result = run("validate", CAMPUS)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "model llama3-70b (80 layers" in text
    assert "building A: 2,048 GPUs h100-sxm" in text and "building B: 2,048 GPUs h100-sxm" in text
    assert "link A-B: 25,600 Gbit/s" in text
    assert re.search(r"searched: [\d,]+ shapes; TP 1, 2, 4, 8;", text)
    assert text.rstrip().endswith("OK")


def test_validate_unknown_field(tmp_path, assert_input_error):
    data = campus()
    data["topology"]["buildings"][0]["colour"] = "red"
    result = run("validate", write(tmp_path, data))
    assert_input_error(result, "topology.buildings.0.colour: Extra inputs are not permitted")


def test_validate_zero_capacity(tmp_path, assert_input_error):
    data = campus()
    data["topology"]["links"][0]["capacity_gbit_s"] = 0
    result = run("validate", write(tmp_path, data))
    assert_input_error(result, "topology.links.0.capacity_gbit_s: Input should be greater than 0")


def test_validate_reports_every_problem(tmp_path, assert_input_error):
    data = campus()
    data["topology"]["links"][0]["capacity_gbit_s"] = 0
    data["training"]["seq_len"] = -1
    data["bogus"] = 1
    result = run("validate", write(tmp_path, data))
    assert_input_error(result, "3 problems", "topology.links.0.capacity_gbit_s:", "training.seq_len:",
                       "bogus: Extra inputs are not permitted")


def test_validate_link_to_unknown_building(tmp_path, assert_input_error):
    data = campus()
    data["topology"]["links"][0]["b"] = "C"
    result = run("validate", write(tmp_path, data))
    assert_input_error(result, "topology: links[0] names unknown building 'C'")


def test_validate_disconnected_building(tmp_path, assert_input_error):
    data = campus()
    data["topology"]["buildings"].append({"name": "C", "gpus": 512, "gpu_type": "h100-sxm"})
    result = run("validate", write(tmp_path, data))
    assert_input_error(result, "topology: buildings are not all connected", "['C']")


def test_validate_malformed_json(tmp_path, assert_input_error):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "name": "x",\n  "training": {,}\n}\n')
    result = run("validate", path)
    assert_input_error(result, "broken.json", "malformed JSON at line 3, column")


def test_validate_bad_model_file_names_that_file(tmp_path, assert_input_error):
    model = json.loads(MODEL.read_text()) | {"layers": 0}
    (tmp_path / "bad-model.json").write_text(json.dumps(model))
    data = campus() | {"model": {"file": "bad-model.json"}}
    result = run("validate", write(tmp_path, data))
    assert_input_error(result, "bad-model.json", "layers: Input should be greater than 0")
    assert "instance.json" not in result.stderr


def test_validate_bad_hf_config_names_that_file(tmp_path, assert_input_error):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    data = campus() | {"model": {"hf_config": "config.json"}}
    result = run("validate", write(tmp_path, data))
    assert_input_error(result, "config.json")


# ---- schema ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "fields"), [((), {"model", "topology", "search"}),
                                              (("instance",), {"model", "topology"}),
                                              (("plan",), {"shape", "stages", "solve", "explanation"})])
def test_schema_prints_json_schema(args, fields):
    result = run("schema", *args)
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert fields <= set(schema["properties"])


def test_schema_unknown_kind_exits_2():
    assert run("schema", "bogus").exit_code == 2


# ---- verification: solve replays, evaluate, trace, plot ------------------------------------------------------

CAMPUS_LAYOUT = {
    "shape": {"tp": 4, "pp": 2, "dp": 512, "micro_batch": 1, "microbatches": 2}, "schedule": "1f1b",
    "dp_mode": "fsdp-no-reshard",
    "stages": [{"stage": 0, "layers": 40, "cells_per_building": {"A": 512}},
               {"stage": 1, "layers": 40, "cells_per_building": {"B": 512}}],
}


def test_solve_prints_verification_side_by_side(solved):
    result, out = solved
    text = result.stdout
    predicted = float(re.search(r"^MILP predicted: ([\d.]+) s$", text, re.M).group(1))
    verified = float(re.search(r"^Verifier: ([\d.]+) s$", text, re.M).group(1))
    match = re.search(r"^Difference: ([+-])([\d.]+) (ms|s) \(([+-][\d.]+) %\)$", text, re.M)
    assert match
    assert predicted == pytest.approx(float(re.search(r"^Iteration time: ([\d.]+) s$", text, re.M).group(1)))
    assert float(match.group(4)) == pytest.approx((verified - predicted) / predicted * 100, abs=0.2)
    for label in ("compute", "pipeline bubble", "pipeline sends (exposed)", "DP synchronisation (exposed)",
                  "TP/CP collectives (exposed)", "EP all-to-all (exposed)", "optimizer step"):
        assert label in text
    plan = Plan.model_validate_json(out.read_text())
    assert plan.verification is not None and plan.verification.iteration_s == pytest.approx(verified, abs=1e-3)


def test_solve_reports_cluster_use_and_carries_it_in_the_plan(solved):
    result, out = solved
    plan = Plan.model_validate_json(out.read_text())
    usage = plan.usage
    assert usage is not None and usage.used_gpus == plan.shape.gpus and usage.gpus == 4096
    assert f"GPUs used: {usage.used_gpus:,} of 4,096" in result.stdout
    assert "HBM per GPU (activations in flight + states)" in result.stdout
    held = sorted((s.stage, name) for s in plan.stages for name in s.cells_per_building)
    assert sorted((m.stage, m.building) for m in usage.memory) == held
    assert all(0 < m.used_gib <= m.usable_gib for m in usage.memory)  # the MILP's memory rows hold
    assert usage.infeasible == []


def test_solve_no_verify_skips_replay(tmp_path):
    result = run("solve", DP_OUT, "--no-verify", "-o", tmp_path / "p.json")
    assert result.exit_code == 0, result.output
    assert "Verifier" not in result.stdout
    assert Plan.model_validate_json((tmp_path / "p.json").read_text()).verification is None


def test_evaluate_layout_without_optimiser_output(tmp_path):
    layout = write(tmp_path, CAMPUS_LAYOUT, "layout.json")
    trace, plot = tmp_path / "trace.json", tmp_path / "timeline.png"
    result = run("evaluate", CAMPUS, layout, "--trace", trace, "--plot", plot)
    assert result.exit_code == 0, result.output
    verified = float(re.search(r"^Verifier: ([\d.]+) s$", result.stdout, re.M).group(1))
    # A layout has no optimiser output, so the MILP prices it with every decision fixed, beside the replay.
    instance = load_instance(CAMPUS)
    placed = resolve(instance, Layout.model_validate(CAMPUS_LAYOUT)).placed()
    price = price_layout(instance, placed)
    assert f"MILP predicted: {price:.3f} s" in result.stdout
    assert re.search(r"^Difference: [+-][\d.]+ m?s \([+-][\d.]+ %\)$", result.stdout, re.M)
    assert abs(verified - price) <= TOLERANCE * price
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"p0 x512 rank 0 (A)", "p0 x512 rank 1 (B)", "link A->B", "link B->A"} <= names
    assert {"forward", "backward", "send", "dp", "idle", "optimizer"} <= {e.get("cat") for e in events}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_single_building_layout_prices_published_style_run(tmp_path):
    bare = {"shape": {"tp": 8, "pp": 4, "dp": 64, "micro_batch": 1, "microbatches": 16},
            "schedule": "interleaved", "interleave": 2, "dp_mode": "fsdp"}
    result = run("evaluate", CAMPUS, write(tmp_path, bare, "bare.json"))
    assert result.exit_code == 0, result.output
    assert "all stages in building A, layers per stage [20, 20, 20, 20]" in result.stdout


def test_evaluate_custom_schedule_csv(tmp_path):
    from scaleacross_milp.costmodel.actions import build_actions, write_csv
    from scaleacross_milp.spec.search import Schedule

    write_csv(build_actions(Schedule.zb_h1, 2, 2), tmp_path / "custom.csv")
    layout = {k: v for k, v in CAMPUS_LAYOUT.items() if k != "schedule"} | {"schedule_csv": "custom.csv"}
    result = run("evaluate", CAMPUS, write(tmp_path, layout, "layout.json"))
    assert result.exit_code == 0, result.output
    assert "schedule custom (custom.csv)" in result.stdout
    assert "MILP predicted" not in result.stdout  # the MILP prices named schedules only


def test_evaluate_schedule_csv_with_missing_action_exits_2(tmp_path, assert_input_error):
    (tmp_path / "broken.csv").write_text("0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n")
    layout = {k: v for k, v in CAMPUS_LAYOUT.items() if k != "schedule"} | {"schedule_csv": "broken.csv"}
    assert_input_error(run("evaluate", CAMPUS, write(tmp_path, layout, "layout.json")),
                       "broken.csv: line 1: action 0B1 (or 0I1 and 0W1) is missing")


@pytest.mark.parametrize(("change", "needle"), [
    (lambda d: d["stages"][0]["cells_per_building"].update(A=600), "stages[0]: 600 cells"),
    (lambda d: d["stages"][1]["cells_per_building"].update(B=256, A=256),
     "building A is over capacity: 3,072 GPUs placed, it has 2,048"),
    (lambda d: d["stages"][1].update(cells_per_building={"C": 512}), "unknown building 'C'"),
    (lambda d: d["shape"].update(dp=256), "dp x micro_batch x microbatches = 512 sequences"),
])
def test_evaluate_mismatched_plan_exits_2(tmp_path, change, needle, assert_input_error):
    data = json.loads(json.dumps(CAMPUS_LAYOUT))
    change(data)
    assert_input_error(run("evaluate", CAMPUS, write(tmp_path, data, "layout.json")), needle)


def test_evaluate_malformed_layout_names_fields(tmp_path, assert_input_error):
    data = CAMPUS_LAYOUT | {"dp_mode": "zero3", "colour": 1}
    assert_input_error(run("evaluate", CAMPUS, write(tmp_path, data, "layout.json")), "2 problems", "dp_mode:",
                       "colour: Extra inputs are not permitted")


def test_evaluate_refuses_to_overwrite_trace(tmp_path, assert_input_error):
    trace = tmp_path / "trace.json"
    trace.write_text("keep")
    result = run("evaluate", CAMPUS, write(tmp_path, CAMPUS_LAYOUT, "layout.json"), "--trace", trace)
    assert_input_error(result, "exists", "--force")
    assert trace.read_text() == "keep"


# ---- evaluate checks what solve checks; what a plan leaves unused --------------------------------------------


def small(tmp_path: Path, gpus: int, batch: int, **training) -> Path:
    """Llama 3 8B on one building of `gpus` H100s (tests/conftest.py's small instance, as a file)."""
    data = {"name": "small", "model": {"file": str(ROOT / "models" / "llama3-8b.json")},
            "training": {"seq_len": 8192, "global_batch_sequences": batch, "recompute": "selective", **training},
            "gpu_types": {"h100": H100}, "topology": {"buildings": [{"name": "A", "gpus": gpus, "gpu_type": "h100"}]},
            "search": {"time_limit_s": 20}}
    return write(tmp_path, data, "small.json")


def bare_layout(tmp_path: Path, tp: int, pp: int, dp: int, microbatches: int) -> Path:
    layout = {"shape": {"tp": tp, "pp": pp, "dp": dp, "micro_batch": 1, "microbatches": microbatches},
              "schedule": "1f1b", "dp_mode": "ddp"}
    return write(tmp_path, layout, "layout.json")


def test_evaluate_refuses_a_layout_over_memory_with_the_binding_figure(tmp_path, assert_input_error):
    """TP 1 under DDP holds all of Llama 3 8B's states on each GPU (tests/verify/test_layout.py's hand count)."""
    instance, layout = small(tmp_path, 64, 32, recompute="full"), bare_layout(tmp_path, 1, 1, 32, 1)
    result = run("evaluate", instance, layout)
    assert_input_error(result, "stages[0] in A: 142.5 GiB needed per GPU > 73.2 GiB usable (h100)",
                       "--allow-infeasible")
    assert "Verifier" not in result.stdout


def test_evaluate_allow_infeasible_prices_it_and_marks_it(tmp_path):
    instance, layout = small(tmp_path, 64, 32, recompute="full"), bare_layout(tmp_path, 1, 1, 32, 1)
    result = run("evaluate", instance, layout, "--allow-infeasible")
    assert result.exit_code == 0, result.output
    assert re.search(r"^Verifier: [\d.]+ (s|ms)$", result.stdout, re.M)
    assert "INFEASIBLE on this hardware, priced anyway: stages[0] in A: 142.5 GiB needed per GPU" in result.stdout


def test_evaluate_refuses_tp_beyond_the_nvlink_domain(tmp_path, assert_input_error):
    result = run("evaluate", small(tmp_path, 64, 32), bare_layout(tmp_path, 16, 1, 2, 16))
    assert_input_error(result, "stages[0] in A: TP 16 is wider than the NVLink domain of 8 GPUs (h100)")


def test_evaluate_says_what_a_batch_that_does_not_divide_leaves_idle(tmp_path):
    """509 sequences (prime) on 256 GPUs: TP 8 x PP 4 runs DP 1 on 32 GPUs; 512 = 8 x 64 would use all 256."""
    result = run("evaluate", small(tmp_path, 256, 509), bare_layout(tmp_path, 8, 4, 1, 509))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "GPUs used: 32 of 256 (12.5 %)" in text
    assert "Idle: 224 GPUs in A (batch): the batch does not divide" in text
    assert "Cheapest change: global batch 512 sequences (DP 8 x micro-batch 1 x 64 microbatches) lets this shape " \
           "use 256 GPUs instead of 32" in text
    assert text.index("Verifier:") < text.index("GPUs used:")


# ---- internal errors: one line, exit 3, whatever command fails -------------------------------------------------


def fails(*_args, **_kwargs):
    raise RuntimeError("boom\nsecond line")


@pytest.mark.parametrize("command", ["solve", "evaluate", "validate", "schema", "calibrate"])
def test_unexpected_exception_exits_3_with_one_line(tmp_path, monkeypatch, command):
    from scaleacross_milp.calibration import assemble
    from scaleacross_milp.verify import verifier

    layout = write(tmp_path, CAMPUS_LAYOUT, "layout.json")
    log = tmp_path / "nccl.log"
    log.write_text("")
    patches = {"solve": (solve_module, "solve_instance"), "evaluate": (verifier, "verify"),
               "validate": (cli, "instance_lines"), "schema": (cli.typer, "echo"),
               "calibrate": (assemble, "profile_from_logs")}
    arguments = {"solve": [CAMPUS], "evaluate": [CAMPUS, layout], "validate": [CAMPUS], "schema": [],
                 "calibrate": [log]}
    monkeypatch.setattr(*patches[command], fails)
    result = run(command, *arguments[command])
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    assert result.stderr.splitlines() == ["error: internal error: RuntimeError: boom second line (please report)"]


# ---- bad input a new user might give: exit 2, one line naming the file and field, never a traceback -----------


def test_validate_unreadable_encodings_exit_2_naming_the_file(tmp_path, assert_input_error):
    deep, latin = tmp_path / "deep.json", tmp_path / "latin.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    latin.write_bytes(json.dumps(campus() | {"description": "caf\u00e9"}, ensure_ascii=False).encode("latin-1"))
    assert_input_error(run("validate", deep), f"{deep}: nested")
    assert_input_error(run("validate", latin), f"{latin}: not UTF-8 text (byte 0xe9 on line 1)")


@pytest.mark.parametrize(("change", "line"), [
    (lambda d: d["topology"]["links"][0].update(capacity_gbit_s="3200"),
     "topology.links.0.capacity_gbit_s: Input should be a valid number, not the string '3200'"),
    (lambda d: d["topology"]["buildings"][1].update(gpus=10**30), "topology.buildings.1.gpus:"),
    (lambda d: d["topology"]["buildings"][1].update(pod_gpus=4096), "topology.buildings.1: pod_gpus (4096)"),
    (lambda d: d["topology"]["links"].append(dict(d["topology"]["links"][0])),
     "topology: links[1] joins A and B again"),
    (lambda d: d["search"].update(dp_modes=["zero-1"]),
     "search.dp_modes.0: Input should be 'ddp', 'fsdp', 'fsdp-no-reshard', 'hsdp' or 'zero1'"),
    (lambda d: d["training"].update(overlap_param_gathers=True),
     "training.overlap_param_gathers: Extra inputs are not permitted"),
])
def test_validate_odd_values_exit_2_with_one_line(tmp_path, change, line, assert_input_error):
    data = campus()
    change(data)
    path = write(tmp_path, data)
    result = run("validate", path)
    assert_input_error(result, f"error: {path}: {line}")
    assert len(result.stderr.splitlines()) == 1


def test_validate_infinite_capacity_and_duplicate_key(tmp_path, assert_input_error):
    text = json.dumps(campus())
    infinite, dupe = tmp_path / "inf.json", tmp_path / "dupe.json"
    infinite.write_text(text.replace('"capacity_gbit_s": 25600', '"capacity_gbit_s": Infinity'))
    dupe.write_text(text.replace('"name": "A"', '"name": "A", "name": "C"'))
    assert_input_error(run("validate", infinite), "topology.links.0.capacity_gbit_s: Input should be a finite number")
    assert_input_error(run("validate", dupe), f"{dupe}: topology.buildings.0: duplicate key 'name'")


def test_validate_bad_inline_model_is_one_line(tmp_path, assert_input_error):
    data = campus() | {"model": json.loads(MODEL.read_text()) | {"layers": 0}}
    path = write(tmp_path, data)
    result = run("validate", path)
    assert_input_error(result, f"error: {path}: model.layers: Input should be greater than 0")
    assert len(result.stderr.splitlines()) == 1


def test_validate_broken_profile_names_the_profile_file(tmp_path, assert_input_error):
    (tmp_path / "profile.json").write_bytes("caf\u00e9".encode("latin-1"))
    path = write(tmp_path, campus() | {"collective_profile": "profile.json"})
    result = run("validate", path)
    assert_input_error(result, f"{path}: {tmp_path / 'profile.json'}: not UTF-8 text")
    assert "llama3-70b" not in result.stderr


def test_evaluate_binary_plan_exits_2_naming_it(tmp_path, assert_input_error):
    plan = tmp_path / "plan.json"
    plan.write_bytes(bytes(range(256)))
    assert_input_error(run("evaluate", CAMPUS, plan), f"{plan}: binary data")


def test_evaluate_another_instances_plan_prints_nothing_before_the_error(solved, assert_input_error):
    _, out = solved
    result = run("evaluate", ROOT / "instances" / "dp-out-2b-far-llama3-8b.json", out)
    assert_input_error(result, "campus-2b-llama3-70b", "dp-out-2b-far-llama3-8b")
    assert result.stdout == ""


@pytest.mark.parametrize("option", ["-o", "--trace", "--plot"])
def test_solve_checks_every_output_path_before_solving(tmp_path, monkeypatch, option, assert_input_error):
    def never(*_args, **_kwargs):
        raise AssertionError("solved before checking the output paths")

    monkeypatch.setattr(solve_module, "solve_instance", never)
    missing = tmp_path / "missing" / "out.json"
    assert_input_error(run("solve", CAMPUS, option, missing), f"{missing}: directory {missing.parent} does not exist")
    assert_input_error(run("solve", CAMPUS, option, tmp_path, "--force"), str(tmp_path), "is a directory")


def test_evaluate_checks_output_paths_before_replaying(tmp_path, assert_input_error):
    layout = write(tmp_path, CAMPUS_LAYOUT, "layout.json")
    missing = tmp_path / "missing" / "trace.json"
    result = run("evaluate", CAMPUS, layout, "--trace", missing)
    assert_input_error(result, f"{missing}: directory {missing.parent} does not exist")
    assert result.stdout == ""
    assert_input_error(run("evaluate", CAMPUS, layout, "--plot", tmp_path, "--force"), str(tmp_path), "is a directory")
    assert_input_error(run("evaluate", CAMPUS, layout, "--trace", layout, "--force"),
                       f"{layout} is an input of this command")


def test_solve_refuses_one_path_for_two_outputs(tmp_path, assert_input_error):
    same = tmp_path / "out.json"
    assert_input_error(run("solve", CAMPUS, "-o", same, "--trace", same), f"{same} is given for two outputs")


@pytest.mark.parametrize(("modes", "searched"), [(["zero1", "fsdp-no-reshard"], "zero1, fsdp-no-reshard"),
                                               (None, "ddp, fsdp, fsdp-no-reshard, hsdp, zero1")])
def test_validate_accepts_zero1_and_overlap_param_gather(tmp_path, modes, searched):
    # left out, the DP modes of a job gathering its parameters behind the forward include zero1
    data = campus()
    data["search"].pop("dp_modes", None)
    if modes:
        data["search"]["dp_modes"] = modes
    data["training"].update(overlap_grad_reduce=True, overlap_param_gather=True)
    result = run("validate", write(tmp_path, data))
    assert result.exit_code == 0, result.output
    assert f"DP modes {searched};" in result.stdout


def test_evaluate_refuses_a_zero1_layout_whose_whole_weights_and_gradients_do_not_fit(tmp_path, assert_input_error):
    # the campus layout fits under fsdp-no-reshard (gradients sharded over DP 512); zero1 keeps Llama 3 70B's 4 B
    # gradients whole: (4 - 4 / 512) B more per parameter, 34.2 GB over stage 0's 40 layers of 213,913,600 per GPU
    layout = write(tmp_path, CAMPUS_LAYOUT | {"dp_mode": "zero1"}, "layout.json")
    assert_input_error(run("evaluate", CAMPUS, layout), "stages[0] in A:", "GiB needed per GPU > 73.2 GiB usable")
    priced = run("evaluate", CAMPUS, layout, "--allow-infeasible")
    assert priced.exit_code == 0, priced.output
    assert "DP zero1." in priced.stdout and "INFEASIBLE" in priced.stdout
