"""Layouts checked against their instance: clear errors naming the field, single-building defaults, chaining,
and what the hardware cannot run (memory, NVLink domain, building capacity) with its binding figure."""

from __future__ import annotations

import pytest

from scaleacross_milp.costmodel.actions import build_actions
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.search import Schedule
from scaleacross_milp.verify.layout import GIB, InfeasibleLayout, check, inflight_microbatches, resolve

TWO = [{"name": "A", "gpus": 32, "gpu_type": "h100"}, {"name": "B", "gpus": 32, "gpu_type": "h100"}]
LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 10}]


def layout(**overrides) -> Layout:
    data = {"shape": {"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "microbatches": 8}, "schedule": "1f1b",
            "dp_mode": "ddp",
            "stages": [{"stage": 0, "layers": 16, "cells_per_building": {"A": 2, "B": 2}},
                       {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]}
    return Layout.model_validate(data | overrides)


def test_stages_are_chained_within_buildings(tiny):
    resolved = resolve(tiny(buildings=TWO, links=LINK), layout())
    assert [(p.buildings, p.pipelines) for p in resolved.patterns] == [(("A", "A"), 2), (("B", "B"), 2)]


def test_no_placement_puts_everything_in_the_first_building_that_fits(tiny):
    bare = Layout.model_validate({"shape": {"tp": 8, "pp": 4, "dp": 1, "micro_batch": 1, "microbatches": 32},
                                  "schedule": "interleaved", "interleave": 2, "dp_mode": "fsdp"})
    resolved = resolve(tiny(), bare)
    assert [s.layers for s in resolved.stages] == [8, 8, 8, 8]
    assert resolved.patterns[0].buildings == ("A",) * 4
    assert "all stages in building A" in resolved.notes[0]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"stages": [{"stage": 0, "layers": 16, "cells_per_building": {"A": 2, "C": 2}},
                 {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]},
     "stages[0].cells_per_building: unknown building 'C'"),
    ({"stages": [{"stage": 0, "layers": 16, "cells_per_building": {"A": 3, "B": 2}},
                 {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]},
     "stages[0]: 5 cells (40 GPUs), the shape needs dp/ep = 4 cells"),
    ({"stages": [{"stage": 0, "layers": 16, "cells_per_building": {"A": 4}},
                 {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]},
     "building A is over capacity: 48 GPUs placed, it has 32"),
    ({"stages": [{"stage": 0, "layers": 15, "cells_per_building": {"A": 2, "B": 2}},
                 {"stage": 1, "layers": 16, "cells_per_building": {"A": 2, "B": 2}}]},
     "stages: layers add up to 31, the model has 32"),
    ({"pipelines": [{"buildings": ["A", "B"], "pipelines": 4}]},
     "pipelines: stage 0 is in {'A': 4} by the routes but in {'A': 2, 'B': 2}"),
    ({"shape": {"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "microbatches": 4}},
     "dp x micro_batch x microbatches = 16 sequences, but the instance's global batch is 32"),
    ({"instance": "other"}, "instance: the layout is for 'other', not 'tiny'"),
    ({"transports": {"A-C": "ecmp_go_back_n"}}, "transports: unknown link 'A-C'"),
    ({"transports": {"A-B": "spray_selective_repeat"}}, "'spray_selective_repeat' is not among the link's"),
    ({"dp_mode": "hsdp", "hsdp_replicas": 3}, "hsdp_replicas: HSDP needs replica groups r >= 2 dividing"),
])
def test_mismatched_layout_is_named(tiny, overrides, message):
    with pytest.raises(InputError, match=None) as error:
        check(tiny(buildings=TWO, links=LINK), layout(**overrides))
    assert message in str(error.value)


# Llama 3 8B by hand (costmodel/memory.py's formulas): per layer 4096 (2*32*128 + 2*8*128) + 2*4096 = 41,951,232
# attention + 3*4096*14336 = 176,160,768 FFN parameters; embedding 128,256*4096, the (untied) head that + 4096.
LAYER, EMBEDDING = 41_951_232 + 176_160_768, 128_256 * 4096
STATE = 2 + 4 + 12  # bf16 weight + fp32 gradient + Adam bytes per parameter under DDP


def bare(tp: int, dp: int, microbatches: int, dp_mode: str = "ddp") -> Layout:
    return Layout.model_validate({"shape": {"tp": tp, "pp": 1, "dp": dp, "micro_batch": 1,
                                            "microbatches": microbatches}, "schedule": "1f1b", "dp_mode": dp_mode})


def test_memory_per_stage_matches_the_hand_count(tiny):
    """TP 8, one stage, DDP, full recompute, one microbatch in flight: 32 layers x (2 s b h / t activations +
    params / t x 18) + embedding and head states + b s V / t x 6 logits."""
    resolved = resolve(tiny(recompute="full"), bare(tp=8, dp=8, microbatches=4))
    layers = 32 * (2 * 8192 * 4096 / 8 + LAYER / 8 * STATE)
    fixed = (2 * EMBEDDING + 4096) / 8 * STATE + 8192 * 128_256 / 8 * 6
    [row] = resolved.memory
    assert (row.stage, row.building, row.gpu_type) == (0, "A", "h100")
    assert row.used_gib == pytest.approx((layers + fixed) / GIB)  # 17.8 GiB
    assert row.usable_gib == pytest.approx(79.6 * 0.92)
    assert resolved.infeasible == ()


def test_layout_over_memory_is_refused_with_the_binding_figure(tiny):
    """TP 1 holds every parameter on each GPU: 142.5 GiB > 73.2 GiB usable on an H100 (79.6 GiB x 0.92)."""
    instance = tiny(recompute="full")
    needed = (32 * (2 * 8192 * 4096 + LAYER * STATE) + (2 * EMBEDDING + 4096) * STATE + 8192 * 128_256 * 6) / GIB
    message = f"stages[0] in A: {needed:.1f} GiB needed per GPU > 73.2 GiB usable (h100)"
    with pytest.raises(InfeasibleLayout) as error:
        check(instance, bare(tp=1, dp=32, microbatches=1))
    assert error.value.problems == [message] and message == "stages[0] in A: 142.5 GiB needed per GPU > 73.2 " \
        "GiB usable (h100)"
    allowed = check(instance, bare(tp=1, dp=32, microbatches=1), allow_infeasible=True)
    assert allowed.infeasible == (message,)


def test_fsdp_shards_what_ddp_cannot_hold(tiny):
    """The same TP 1 job under FSDP over 32 ranks holds 1/32 of the states: it fits."""
    assert check(tiny(recompute="full"), bare(tp=1, dp=32, microbatches=1, dp_mode="fsdp")).infeasible == ()


def test_tp_beyond_the_nvlink_domain_is_refused(tiny):
    with pytest.raises(InfeasibleLayout, match=r"stages\[0\] in A: TP 16 is wider than the NVLink domain of 8 GPUs "
                                                r"\(h100\)"):
        check(tiny(), bare(tp=16, dp=2, microbatches=16))


def test_custom_order_holds_what_the_named_schedule_counts():
    """Interleaved v = 2 on p = 4 (Megatron-LM's order): rank r holds (2 (p - r - 1) + (v - 1) p + 1) / v
    microbatches, counted from the actions as chunk forwards not yet backward."""
    actions = build_actions(Schedule.interleaved, 4, 8, 2)
    assert inflight_microbatches(None, actions) == [5.5, 4.5, 3.5, 2.5]
    assert inflight_microbatches(Schedule.interleaved, actions) == [5.5, 4.5, 3.5, 2.5]


def prime(small_instance, rounding: str, tolerance: float = 0.05):
    """509 sequences (prime) on 256 H100s."""
    return small_instance(gpus=256, batch=509, search_defaults={}, batch_rounding=rounding,
                          batch_tolerance=tolerance)


def rounded(dp: int, microbatches: int) -> Layout:
    return Layout.model_validate({"shape": {"tp": 8, "pp": 4, "dp": dp, "micro_batch": 1,
                                            "microbatches": microbatches}, "schedule": "1f1b", "dp_mode": "ddp"})


@pytest.mark.parametrize(("rounding", "dp", "microbatches"), [
    ("down", 8, 63), ("up", 8, 64), ("nearest", 8, 64), ("exact", 1, 509)])
def test_layout_running_the_rounded_batch_is_accepted(small_instance, rounding, dp, microbatches):
    resolved = check(prime(small_instance, rounding), rounded(dp, microbatches))
    assert resolved.layout.shape.batch_sequences == dp * microbatches


@pytest.mark.parametrize(("rounding", "tolerance", "dp", "microbatches", "message"), [
    # 8 x 63 = 504 is the rounded-down batch, not the rounded-up one (512)
    ("up", 0.05, 8, 63, "dp x micro_batch x microbatches = 504 sequences, but the instance's global batch is 509; "
                        "with dp x micro_batch = 8, training.batch_rounding 'up' within batch_tolerance 5.0 % allows "
                        "512 sequences (64 microbatches)"),
    # under exact nothing but 509 = 1 x 509 runs; 8 divides neither
    ("exact", 0.05, 8, 64, "training.batch_rounding 'exact' allows no batch (multiples of 8 nearest: 504 (-1.0 %), "
                           "512 (+0.6 %))"),
    # 5 / 509 = 0.98 % beyond 0.5 %
    ("down", 0.005, 8, 63, "training.batch_rounding 'down' within batch_tolerance 0.5 % allows no batch"),
])
def test_layout_outside_the_rounding_rule_is_refused_with_the_allowed_batches(small_instance, rounding, tolerance, dp,
                                                                              microbatches, message):
    with pytest.raises(InputError) as error:
        check(prime(small_instance, rounding, tolerance), rounded(dp, microbatches))
    assert str(error.value).startswith("shape.microbatches: ")
    assert message in str(error.value)
