"""zero1 (Megatron's distributed optimizer) in the cost model: its memory, its DP collectives and when they run."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scaleacross_milp.costmodel.comm import AlphaBetaModel
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.dp import (
    IntraDPSync,
    bucketed_gather_wait_s,
    dp_cross_phases,
    grad_reduce_overlaps,
    params_gathered_at_end,
    params_gathered_bucketwise,
    start_gather_terms,
)
from scaleacross_milp.costmodel.memory import fsdp_transient_bytes, layer_state_bytes, state_bytes
from scaleacross_milp.spec.hardware import GPUType
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode, SearchOptions
from scaleacross_milp.spec.topology import Building
from scaleacross_milp.spec.training import Training

ZERO1 = DPVariant(DPMode.zero1)
H100 = GPUType(peak_dense_tflops={"bf16": 989}, hbm_gib=80, hbm_tbyte_s=3.35, nvlink_gbyte_s=370, nic_gbit_s=400)


def _training(**options) -> Training:
    return Training(seq_len=8192, global_batch_sequences=64, **options)


def test_zero1_keeps_weights_and_gradients_whole_and_shards_the_optimizer_states():
    # 8e6 dense and 16e6 expert parameters at TP 2, EP 2, DP 8: 4e6 of each per GPU; the optimizer's 12 B per
    # parameter over the DP group (8) for dense, over DP / EP (4) for experts; weights 2 B and gradients 4 B whole.
    shape = Shape(tp=2, ep=2, pp=1, dp=8, micro_batch=1, microbatches=8)
    training = _training()
    assert state_bytes(8e6, 16e6, shape, training, ZERO1) == pytest.approx(8e6 * 6 + (4e6 / 8 + 4e6 / 4) * 12)
    assert state_bytes(8e6, 16e6, shape, training, DPVariant(DPMode.ddp)) == pytest.approx(8e6 * 18)
    assert state_bytes(8e6, 16e6, shape, training, DPVariant(DPMode.fsdp_no_reshard)) == pytest.approx(
        8e6 * 2 + (4e6 / 8 + 4e6 / 4) * 16)


def test_a_llama3_8b_layer_at_tp8_dp8_holds_7_5_bytes_per_parameter_under_zero1(llama8b):
    # 218,112,000 parameters per layer, 27,264,000 per GPU at TP 8: 2 + 4 + 12 / 8 = 7.5 B each, no FSDP buffers
    shape = Shape(tp=8, pp=1, dp=8, micro_batch=1, microbatches=4)
    training = _training()
    assert layer_state_bytes(llama8b, shape, training, ZERO1) == pytest.approx(27_264_000 * 7.5)
    assert fsdp_transient_bytes(llama8b, shape, training, ZERO1) == 0.0


def test_zero1_reduce_scatters_each_chunk_buffer_as_one_collective():
    # TP 8, PP 2, DP 16 in a 256-GPU hall: a 16-rank fabric ring, one rank per node; one reduce-scatter per chunk.
    comm = AlphaBetaModel.from_gpu(H100)
    shape = Shape(tp=8, pp=2, dp=16, micro_batch=1, microbatches=8)
    hall = Building(name="a", gpus=256, gpu_type="h100")
    sync = IntraDPSync(comm, shape, hall, ZERO1, 1e8, 0.0, 8)
    assert not sync.per_layer_units
    assert sync.stage_s(10) == pytest.approx(comm.time_s("reduce_scatter", "fabric", 16, 1e9, 1))
    assert sync.stage_s(10, chunks=2) == pytest.approx(2 * comm.time_s("reduce_scatter", "fabric", 16, 5e8, 1))
    ddp = IntraDPSync(comm, shape, hall, DPVariant(DPMode.ddp), 1e8, 0.0, 8)
    assert sync.stage_s(10) < 0.6 * ddp.stage_s(10)  # (n-1)/n of the bytes against an all-reduce's 2(n-1)/n


@pytest.mark.parametrize(("grad", "gather", "at_end", "bucketwise", "gathered_before"), [
    ({}, {}, True, False, False),
    ({"overlap_grad_reduce": True}, {}, True, False, False),
    ({"overlap_grad_reduce": True}, {"overlap_param_gather": True}, False, True, True),
])
def test_zero1_times_its_reduction_like_ddp_and_its_gather_by_overlap_param_gather(grad, gather, at_end,
                                                                                   bucketwise, gathered_before):
    training = _training(**grad, **gather)
    assert grad_reduce_overlaps(training, ZERO1) == bool(grad)
    assert params_gathered_at_end(training, ZERO1) is at_end
    assert params_gathered_bucketwise(training, ZERO1) is bucketwise
    phases = dp_cross_phases(ZERO1, 8, 4.0, 2.0, training.overlap_param_gather)
    # across buildings one reduce-scatter of gradients and one all-gather of bf16 parameters: 1 + 2 / 4 copies
    assert (phases.gather_phases, phases.gather_bytes_per_grad_byte, phases.reduce_phases) == (1, 0.5, 1)
    assert phases.params_before_ops is gathered_before and phases.end_gather_phases == (0 if gathered_before else 1)
    for mode in (DPMode.ddp, DPMode.fsdp, DPMode.fsdp_no_reshard):
        assert not params_gathered_at_end(training, DPVariant(mode))


@pytest.mark.parametrize(("a", "f", "wait"), [(1.0, 3.0, 1.0), (3.0, 1.0, 3.0 + 4 * 2.0), (2.0, 2.0, 2.0)])
def test_bucketed_gather_waits_for_the_first_bucket_and_what_the_stream_falls_behind(a, f, wait):
    # five layers: a gather shorter than the forward hides all but the first; a longer one falls behind by a - f
    # per later layer: a + 4 max(0, a - f)
    assert bucketed_gather_wait_s([a] * 5, [f] * 5) == pytest.approx(wait)
    per_layer, per_stage = start_gather_terms(_training(overlap_param_gather=True), ZERO1, a, f)
    assert 5 * per_layer + per_stage == pytest.approx(wait)
    assert start_gather_terms(_training(), ZERO1, a, f) == (a, 0.0)  # gathered after the step: all of it
    assert start_gather_terms(_training(overlap_param_gather=True), DPVariant(DPMode.fsdp_no_reshard), a, f) == (
        a, 0.0)


def test_uneven_buckets_wait_for_the_largest_shortfall():
    # gathers 1, 4, 1 behind forwards 2, 2, 2: bucket 2 is ready at 5, its forward could start at 2: waits 3
    assert bucketed_gather_wait_s([1.0, 4.0, 1.0], [2.0, 2.0, 2.0]) == pytest.approx(3.0)


def test_the_contract_names_zero1_and_refuses_a_typo():
    assert SearchOptions(dp_modes=["zero1"]).dp_modes == [DPMode.zero1]
    with pytest.raises(ValidationError, match="'zero1'"):
        SearchOptions(dp_modes=["zero-1"])
    assert not _training().overlap_param_gather


@pytest.mark.parametrize(("training", "search", "modes"), [
    ({}, {}, ["ddp", "fsdp", "fsdp-no-reshard", "hsdp"]),
    ({"overlap_param_gather": True}, {}, ["ddp", "fsdp", "fsdp-no-reshard", "hsdp", "zero1"]),
    ({}, {"dp_modes": ["zero1"]}, ["zero1"]),
    ({"overlap_param_gather": True}, {"dp_modes": ["ddp"]}, ["ddp"]),
])
def test_zero1_is_searched_by_default_only_for_a_job_gathering_parameters_behind_the_forward(
        small_instance, training, search, modes):
    instance = small_instance(None, None, search, gpus=64, batch=32, search_defaults={}, **training)
    assert [mode.value for mode in instance.search.dp_modes] == modes
