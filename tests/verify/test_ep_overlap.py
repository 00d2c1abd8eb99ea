"""Training.overlap_moe_expert_parallel_comm (Megatron-core's batch-level EP overlap): the merged steady-state pairs
hide their EP all-to-alls, the warm-up and cool-down ops expose them, and the MILP prices both as the replay runs
them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from scaleacross_milp import cli
from scaleacross_milp.costmodel.actions import build_actions, unpaired_ops
from scaleacross_milp.costmodel.costs import OpTimes
from scaleacross_milp.costmodel.schedule import ScheduleOption, searched_options
from scaleacross_milp.milp.price import price_layout
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout, Shape
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.verify.layout import resolve
from scaleacross_milp.verify.verifier import verify
from scaleacross_milp.verify.workload import build_workload

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def mixtral(small_instance):
    """Mixtral 8x7B on one building of 128 H100s, 512 sequences of 4,096 tokens."""
    def make(overlap: bool, **training) -> Instance:
        base = small_instance(gpus=128, batch=512, search_defaults={}, seq_len=4096,
                              overlap_moe_expert_parallel_comm=overlap, **training)
        data = base.model_dump(mode="json", exclude_none=True)
        data["model"] = json.loads((ROOT / "models" / "mixtral-8x7b.json").read_text())
        return Instance.model_validate(data)
    return make


def interleaved(tp: int, ep: int, pp: int, v: int, mode: DPMode = DPMode.ddp) -> Layout:
    dp = 128 // (tp * pp)
    return Layout(shape={"tp": tp, "ep": ep, "pp": pp, "dp": dp, "micro_batch": 1, "microbatches": 512 // dp},
                  schedule=Schedule.interleaved if pp > 1 else Schedule.one_f_one_b, interleave=v, dp_mode=mode)


def resolved_layout(instance: Instance, layout: Layout) -> Layout:
    """`layout` with the stages and pipelines `resolve` places (what `price_layout` needs)."""
    placed = resolve(instance, layout)
    return Layout.model_validate({**layout.model_dump(mode="json", exclude_none=True),
                                  "stages": [stage.model_dump(mode="json") for stage in placed.stages],
                                  "pipelines": [{"buildings": list(route.buildings), "pipelines": route.pipelines}
                                                for route in placed.patterns]})


def test_the_warm_up_forwards_and_cool_down_backwards_are_the_unpaired_ops():
    # Rank 0 of 4 with 2 chunks: 2 (p - 1) + (v - 1) p = 10 warm-up forwards, one more with the pairs merged (as
    # Megatron-core runs them), then pairs F(k + 11), B(k).
    order = build_actions(Schedule.interleaved, 4, 8, 2, merged=True).order[0]
    assert unpaired_ops(order) == set(range(11)) | set(range(len(order) - 11, len(order)))
    assert [order[k].kind for k in (11, 12)] == ["F", "B"] and order[12].microbatch == 0
    single = build_actions(Schedule.one_f_one_b, 1, 4).order[0]  # F0 B0 F1 B1 ...: F0 and the last B
    assert unpaired_ops(single) == {0, len(single) - 1}


@pytest.mark.parametrize(("p", "v"), [(2, 2), (3, 3), (4, 2), (4, 4), (8, 2), (2, 4), (1, 1)])
def test_unpaired_ops_add_what_unpaired_pairs_says_to_the_makespan(makespan, p, v):
    # Every chunk's F, I, W take 3, 4, 2 s in a pair; outside one F takes a more, the backward c more. Replaying
    # the order, the makespan grows by p v chunk pairs' a + c (p microbatches of a rank), which the MILP prices.
    schedule = Schedule.interleaved if v > 1 else Schedule.one_f_one_b
    actions = build_actions(schedule, p, 4 * p, v, merged=True)
    a, c = 0.5, 0.7
    extra = makespan(actions, 3.0, 4.0, 2.0, OpTimes(a, c, 0.0)) - makespan(actions, 3.0, 4.0, 2.0)
    assert extra == pytest.approx(ScheduleOption(schedule, v, merged=True).unpaired_pairs(p) * v * (a + c))


def test_the_overlap_hides_the_all_to_alls_of_the_merged_pairs(mixtral):
    layout = interleaved(1, 16, 4, 2)
    works = {on: build_workload(mixtral(on), resolve(mixtral(on), layout)).rank("A", 0).stages[0]
             for on in (False, True)}
    off, on = works[False], works[True]
    assert off.ep_hidden.total_s == 0 and 0 < on.ep_hidden.total_s <= on.ep.forward_s + on.ep.backward_input_s
    assert on.op_s("F") == pytest.approx(off.op_s("F") - on.ep_hidden.forward_s)
    assert on.op_s("F", paired=False) == pytest.approx(off.op_s("F"))
    assert verify(mixtral(True), layout)[0].iteration_s < verify(mixtral(False), layout)[0].iteration_s


@pytest.mark.parametrize(("tp", "ep", "pp", "v"), [(1, 16, 4, 2), (2, 8, 4, 2), (1, 8, 4, 4), (1, 16, 1, 1)])
def test_the_milp_prices_the_overlap_as_the_replay_runs_it(mixtral, tp, ep, pp, v):
    instance = mixtral(True)
    layout = resolved_layout(instance, interleaved(tp, ep, pp, v, DPMode.ddp if pp > 1 else DPMode.fsdp))
    replayed = verify(instance, layout)[0].iteration_s
    assert price_layout(instance, layout) == pytest.approx(replayed, rel=0.01)


def test_only_merged_interleaving_is_searched_for_pipelines_with_expert_parallelism(mixtral):
    instance = mixtral(True)
    expert = Shape(tp=1, ep=8, pp=4, dp=32, micro_batch=1, microbatches=16)
    dense = expert.model_copy(update={"ep": 1})
    options = searched_options(instance, expert)
    assert {o.schedule for o in options} == {Schedule.interleaved} and all(o.merged for o in options)
    # the extra warm-up forward holds one more chunk of activations: 1 / v of a microbatch through the stage
    assert options[0].inflight_microbatches(4, 0, 16) == pytest.approx(
        ScheduleOption(Schedule.interleaved, options[0].chunks).inflight_microbatches(4, 0, 16) + 1 / options[0].chunks)
    assert {o.schedule for o in searched_options(instance, dense)} == {o.schedule for o in searched_options(
        mixtral(False), dense)}


def test_a_pipeline_with_expert_parallelism_under_1f1b_is_refused(mixtral):
    layout = interleaved(1, 8, 4, 1).model_copy(update={"schedule": Schedule.one_f_one_b, "interleave": 1})
    with pytest.raises(InputError, match="overlap_moe_expert_parallel_comm needs the interleaved schedule"):
        resolve(mixtral(True), layout)


def test_the_overlap_with_full_recompute_is_refused(mixtral):
    with pytest.raises(ValidationError, match="overlap_moe_expert_parallel_comm does not run with full recompute"):
        mixtral(True, recompute="full")


def test_the_cli_evaluates_the_overlap_and_refuses_1f1b_with_the_field_named(mixtral, tmp_path):
    instance = tmp_path / "instance.json"
    instance.write_text(mixtral(True).model_dump_json(exclude_none=True))
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(interleaved(1, 16, 4, 2).model_dump_json(exclude_none=True))
    bad.write_text(interleaved(1, 16, 4, 2).model_copy(update={"schedule": Schedule.one_f_one_b, "interleave": 1})
                   .model_dump_json(exclude_none=True))
    runner = CliRunner()
    result = runner.invoke(cli.app, ["evaluate", str(instance), str(good)])
    assert result.exit_code == 0, result.output
    assert f"Verifier: {verify(mixtral(True), interleaved(1, 16, 4, 2))[0].iteration_s:.3f} s" in result.output
    result = runner.invoke(cli.app, ["evaluate", str(instance), str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "schedule: 1f1b with PP 4 and EP 16" in result.output
