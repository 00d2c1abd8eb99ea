"""What a plan leaves unused and why, on small real instances (Llama 3 8B, seq 8192), with hand-computed figures."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from scaleacross_milp.report.summary import render_usage
from scaleacross_milp.report.usage import plan_usage
from scaleacross_milp.spec.plan import IdleCause, Layout, Plan, Usage
from scaleacross_milp.verify.layout import check
from tests.conftest import H100

SEARCH = {"time_limit_s": 20, "rel_gap": 0.01}
PARAMS = 32 * (41_951_232 + 176_160_768) + 128_256 * 4096 + 128_256 * 4096 + 4096
"""Llama 3 8B: 32 layers of attention + FFN, embedding, untied head with the final norm (8,030,261,248)."""


@pytest.fixture
def tiny(small_instance):
    """64 H100s in building A (or `buildings`), a global batch of 32 sequences."""

    def make(buildings=None, links=None, **training):
        return small_instance(buildings, links, gpus=64, batch=32, search_defaults=SEARCH, **training)

    return make


def bare(tp: int, pp: int, dp: int, microbatches: int, dp_mode: str = "ddp") -> Layout:
    return Layout.model_validate({"shape": {"tp": tp, "pp": pp, "dp": dp, "micro_batch": 1,
                                            "microbatches": microbatches}, "schedule": "1f1b", "dp_mode": dp_mode})


def usage_of(instance, layout: Layout, iteration_s: float | None = None) -> Usage:
    return plan_usage(instance, check(instance, layout), iteration_s)


def two(b_type: str = "h100") -> list[dict]:
    return [{"name": "A", "gpus": 64, "gpu_type": "h100"}, {"name": "B", "gpus": 64, "gpu_type": b_type}]


def scaled(factor: float) -> dict:
    """An H100 slowed down `factor` times in every rate."""
    return H100 | {"peak_dense_tflops": {"bf16": 989 / factor}, "hbm_tbyte_s": 3.35 / factor,
                   "nvlink_gbyte_s": 370 / factor, "nic_gbit_s": 400 / factor}


LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 100, "distance_km": 1000, "paths": 1}]


def test_batch_that_does_not_divide_leaves_gpus_idle_and_names_the_batch_that_does(small_instance):
    """509 sequences is prime: DP 1 only. TP 8 x PP 4 = 32 GPUs per replica, 256 GPUs hold DP 8; the multiples
    of 8 nearest 509 are 504 and 512, 512 is nearer."""
    instance = small_instance(gpus=256, batch=509, search_defaults=SEARCH)
    usage = usage_of(instance, bare(tp=8, pp=4, dp=1, microbatches=509))
    assert (usage.gpus, usage.used_gpus) == (256, 32)
    [idle] = usage.idle
    assert (idle.cause, idle.buildings, idle.gpus) == (IdleCause.batch, ["A"], 224)
    assert "DP x micro-batch must divide the global batch of 509 sequences" in idle.detail
    # rounding 509 to the nearest multiple of 8 runs 512: |512 - 509| / 509 = 0.59 %, a tolerance of 0.6 % admits it
    assert usage.suggestions == ["global batch 512 sequences (DP 8 x micro-batch 1 x 64 microbatches) lets this "
                                 "shape use 256 GPUs instead of 32",
                                 "training.batch_rounding 'nearest' with batch_tolerance >= 0.6 % lets DP 8 run 512 "
                                 "sequences for the requested 509 (+0.6 %), using 256 GPUs"]


def test_whole_cluster_used_leaves_nothing_idle(tiny):
    usage = usage_of(tiny(), bare(tp=8, pp=2, dp=4, microbatches=8))
    assert (usage.used_gpus, usage.idle, usage.suggestions) == (64, [], [])
    assert [(m.stage, m.building) for m in usage.memory] == [(0, "A"), (1, "A")]
    assert all(m.free_gib == pytest.approx(m.usable_gib - m.used_gib) and m.free_gib > 0 for m in usage.memory)


def test_unused_building_behind_a_thin_link_gets_the_gradient_figure(tiny):
    """DP 16 divides 32 sequences, but B is 1,000 km away (4.9 ms + 0.01 ms) over 100 Gbit/s on one path: one
    gradient copy (8,030,261,248 parameters x 4 bytes = 32.1 GB) takes 32.1 GB / 12.5 GB/s = 2.570 s."""
    usage = usage_of(tiny(buildings=two(), links=LINK), bare(tp=8, pp=1, dp=8, microbatches=4), iteration_s=1.5)
    [idle] = usage.idle
    assert (idle.cause, idle.buildings, idle.gpus) == (IdleCause.link, ["B"], 64)
    seconds = PARAMS * 4 / 12.5e9
    assert "A -> B (4.91 ms one way), bottleneck A-B 100 Gbit/s" in idle.detail
    assert f"{PARAMS * 4 / 1e9:,.1f} GB of gradients each way per iteration, {seconds:.3f} s at best against a " \
           "1.500 s iteration" in idle.detail
    assert f"{seconds:.3f}" == "2.570"
    assert "evaluate a layout with DP 16" in usage.suggestions[0] and "2 microbatches" in usage.suggestions[0]


@pytest.mark.parametrize(("factor", "cause"), [(4.0, IdleCause.compute), (1.5, IdleCause.link)])
def test_slower_gpus_stay_idle_when_their_replicas_would_lag(tiny, factor, cause):
    """DP 8 -> 16 halves the microbatches per pipeline (4 -> 2): a type 4x slower computes 2 x 4t > 4t, one 1.5x
    slower 2 x 1.5t < 4t (then only the link can explain it)."""
    instance = tiny(buildings=two("slow"), links=LINK, gpu_types={"slow": scaled(factor)})
    [idle] = usage_of(instance, bare(tp=8, pp=1, dp=8, microbatches=4)).idle
    assert (idle.cause, idle.buildings) == (cause, ["B"])
    if cause is IdleCause.compute:
        assert idle.detail.startswith("DP 16 leaves every pipeline 2 microbatches; a layer takes")


ZERO1_GIB = (32 * (2 * 8192 * 4096 / 8 + 27_264_000 * 7.5) + 131_334_656 * 7.5 + 8192 * 128_256 / 8 * 6) / 2**30
"""TP 8, DP 8, full recompute under zero1: weights and gradients whole (2 + 4 B per parameter), the 12 B of optimizer
states over 8 ranks (1.5 B): 32 layers of 27,264,000 parameters per GPU and their 2 s h / 8 B of activations, the
embedding and head (131,334,656 per GPU) and the logits (b s V / 8 x 6 B)."""
FSDP_GIB = (32 * (2 * 8192 * 4096 / 8 + 27_264_000 * 18 / 8) + 131_334_656 * 18 / 8 + 8192 * 128_256 / 8 * 6
            + 218_112_000) / 2**30
"""FSDP over 8 ranks holds 1/8 of the states plus one layer's unsharded buffers (218,112,000 / 8 params x 8 B)."""


@pytest.mark.parametrize(("hbm_gib", "usable", "mode", "gib"), [(16, "14.7", "zero1", ZERO1_GIB),
                                                                 (8, "7.4", "fsdp", FSDP_GIB)])
def test_building_whose_gpus_cannot_hold_a_stage_is_idle_for_memory(tiny, hbm_gib, usable, mode, gib):
    """TP 8, DDP, full recompute: 17.8 GiB per GPU (tests/verify/test_layout.py's count) > the usable 92 % of HBM;
    the what-if is the first of zero1 (8.0 GiB) and FSDP (3.3 GiB) that fits."""
    instance = tiny(buildings=two("small"), links=LINK, gpu_types={"small": H100 | {"hbm_gib": hbm_gib}},
                    recompute="full")
    usage = usage_of(instance, bare(tp=8, pp=1, dp=8, microbatches=4))
    [idle] = usage.idle
    assert (idle.cause, idle.buildings) == (IdleCause.memory, ["B"])
    assert idle.detail == f"the plan's stages need 17.8 GiB per GPU at least, small offers {usable} GiB usable"
    assert usage.suggestions == [f"dp_mode {mode} would bring the least stage to {gib:.1f} GiB per GPU, within B's "
                                 f"{usable} GiB"]
    assert (f"{ZERO1_GIB:.1f}", f"{FSDP_GIB:.1f}") == ("8.0", "3.3")


def test_no_further_replica_fits_the_free_gpus(small_instance):
    """70 GPUs hold 8 cells of 8; DP 8 uses them all and 6 GPUs stay free (batch 32 would allow DP 16)."""
    usage = usage_of(small_instance(gpus=70, batch=32, search_defaults=SEARCH), bare(tp=8, pp=1, dp=8,
                                                                                     microbatches=4))
    [idle] = usage.idle
    assert (idle.cause, idle.gpus) == (IdleCause.cell, 6)
    assert "the buildings hold 8 whole cells, 8 in use" in idle.detail


def test_infeasible_layout_is_carried_and_rendered(tiny):
    instance = tiny(recompute="full")
    usage = plan_usage(instance, check(instance, bare(tp=1, pp=1, dp=32, microbatches=1), allow_infeasible=True))
    assert usage.infeasible == ["stages[0] in A: 142.5 GiB needed per GPU > 73.2 GiB usable (h100)"]
    console = Console(record=True, width=200, file=io.StringIO())
    render_usage(usage, console)
    text = console.export_text()
    assert "INFEASIBLE on this hardware, priced anyway: stages[0] in A: 142.5 GiB needed per GPU" in text
    assert "GPUs used: 32 of 64 (50.0 %)" in text
    assert "142.5 GiB" in text and "-69.3 GiB" in text  # the memory table's free column: 73.2 - 142.5


def test_plan_json_carries_usage_and_older_plans_load(tiny):
    from tests.report.test_summary import plan_data

    usage = usage_of(tiny(), bare(tp=8, pp=2, dp=4, microbatches=8))
    plan = Plan.model_validate(plan_data() | {"usage": usage.model_dump(mode="json")})
    assert Plan.model_validate_json(plan.model_dump_json()).usage == usage
    assert Plan.model_validate(plan_data()).usage is None


def test_fast_building_idles_when_the_next_dp_also_needs_the_slow_one(tiny):
    """DP 8 -> 16 adds 8 cells of 8 GPUs: B (H100) holds 4, so C (4x slower) must hold the other 4 and sets the
    pace: 2 x 4t > 4t, so B idles for C's speed, not for its own link."""
    buildings = [{"name": "A", "gpus": 64, "gpu_type": "h100"}, {"name": "B", "gpus": 32, "gpu_type": "h100"},
                 {"name": "C", "gpus": 32, "gpu_type": "slow"}]
    links = [LINK[0], LINK[0] | {"b": "C"}]
    instance = tiny(buildings=buildings, links=links, gpu_types={"slow": scaled(4.0)})
    b, c = usage_of(instance, bare(tp=8, pp=1, dp=8, microbatches=4)).idle
    assert (b.cause, b.buildings, c.cause, c.buildings) == (IdleCause.compute, ["B"], IdleCause.compute, ["C"])
    assert b.detail.startswith("DP 16 (64 more GPUs for this shape, C's too) leaves every pipeline 2 microbatches")
    assert "on slow" in b.detail and "on slow" in c.detail


def test_rounded_batch_is_reported_with_its_change_and_tokens_per_second(small_instance):
    """509 sequences rounded down within 0.5 % (2.5 sequences): DP 4 x 127 = 508 runs (-0.2 %); DP 5..8 would run
    505, 504, 504, 504, beyond the tolerance, so 128 of 256 GPUs idle for the batch. At 2 s per iteration the
    batch run is 508 x 8192 / 2 = 2,080,768 tokens/s."""
    instance = small_instance(gpus=256, batch=509, search_defaults=SEARCH, batch_rounding="down",
                              batch_tolerance=0.005)
    usage = usage_of(instance, bare(tp=8, pp=4, dp=4, microbatches=127), iteration_s=2.0)
    batch = usage.batch
    assert (batch.requested_sequences, batch.run_sequences, batch.rounding.value) == (509, 508, "down")
    assert batch.change == pytest.approx(-1 / 509)
    assert batch.tokens_per_s == pytest.approx(2_080_768)
    [idle] = usage.idle
    assert (idle.cause, idle.gpus) == (IdleCause.batch, 128)
    assert idle.detail == ("the batch does not round: with micro-batch 1 no DP degree above 4 (up to the 8 the cluster "
                           "holds at 32 GPUs per replica) runs a batch within training.batch_tolerance 0.5 % of 509 "
                           "sequences under batch_rounding 'down'")
    assert usage.suggestions[1] == ("training.batch_rounding 'nearest' with batch_tolerance >= 0.6 % lets DP 8 run 512 "
                                    "sequences for the requested 509 (+0.6 %), using 256 GPUs")
    console = Console(record=True, width=250, file=io.StringIO())
    render_usage(usage, console)
    assert ("Batch: 508 sequences run (requested 509, -0.2 %, rounded down under batch_rounding 'down'), "
            "2,080,768 tokens/s on the batch run") in console.export_text()


def test_requested_batch_run_as_is_says_so(tiny):
    usage = usage_of(tiny(), bare(tp=8, pp=2, dp=4, microbatches=8))
    assert (usage.batch.run_sequences, usage.batch.change, usage.batch.tokens_per_s) == (32, 0.0, None)
    console = Console(record=True, width=200, file=io.StringIO())
    render_usage(usage, console)
    assert "Batch: 32 sequences run (as requested)" in console.export_text()
