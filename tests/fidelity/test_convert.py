"""A published row becomes the instance and layout it describes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scaleacross_milp.fidelity.convert import to_instance, to_layout
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.training import AttentionKernel, Kernels, Recompute


def test_megatron_row_is_an_interleaved_ddp_run_on_one_a100_building(megatron_76b):
    instance, layout = to_instance(megatron_76b), to_layout(megatron_76b)
    model, training = instance.model_spec, instance.training
    assert (model.layers, model.hidden, model.ffn_hidden, model.gated_ffn) == (60, 10240, 40960, False)
    assert training.recompute is Recompute.full and training.precision.value == "fp16"
    assert not training.sequence_parallel and training.attention is AttentionKernel.materialized
    [building] = instance.topology.buildings
    assert (building.gpus, building.gpu_type, building.oversubscription) == (1024, "a100-80gb", 1.0)
    assert instance.gpu_types["a100-80gb"].peak_dense_tflops["fp16"] == 312
    shape = layout.shape
    assert (shape.tp, shape.pp, shape.dp, shape.micro_batch, shape.microbatches) == (8, 4, 32, 2, 28)
    assert (layout.schedule, layout.interleave, layout.dp_mode) == (Schedule.interleaved, 3, DPMode.ddp)
    assert layout.stages is None  # single building: the verifier places it


def test_llama3_row_fills_blanks_with_the_documented_assumptions(llama3_long):
    instance, layout = to_instance(llama3_long), to_layout(llama3_long)
    training = instance.training
    assert training.sequence_parallel and training.attention is AttentionKernel.flash
    assert instance.model_spec.gated_ffn and instance.model_spec.kv_heads == 8
    [building] = instance.topology.buildings
    assert (building.pod_gpus, building.oversubscription) == (3072, 7.0)
    assert (layout.shape.cp, layout.shape.micro_batch, layout.shape.microbatches) == (16, 1, 16)
    assert (layout.schedule, layout.interleave, layout.dp_mode) == (Schedule.interleaved, 2, DPMode.fsdp_no_reshard)


def test_selective_with_sequence_parallel_and_no_pipeline(megatron_76b):
    row = replace(megatron_76b, source="korthikanti2022_t5", recompute="selective+sequence-parallel", pp=1, vp=1,
                dp=1, gpus=8, micro_batch=4, global_batch=4, dp_impl="none")
    training, layout = to_instance(row).training, to_layout(row)
    assert training.recompute is Recompute.selective and training.sequence_parallel
    assert (layout.schedule, layout.interleave, layout.shape.microbatches) == (Schedule.one_f_one_b, 1, 1)


def test_torchtitan_fsdp_is_resharding_fsdp_with_flash_attention(llama3_long):
    row = replace(llama3_long, source="torchtitan_h100_202412", gpu="h100-96gb-500w", tp=1, pp=1, cp=1, dp=8,
                gpus=8, vp=1, micro_batch=2, global_batch=16, dp_impl="fsdp", recompute="selective")
    instance, layout = to_instance(row), to_layout(row)
    assert layout.dp_mode is DPMode.fsdp and layout.shape.microbatches == 1
    assert instance.training.attention is AttentionKernel.flash
    assert instance.gpu_types["h100-96gb-500w"].hbm_tbyte_s == 2.4  # torchtitan docs/performance.md


@pytest.mark.parametrize(("source", "notes", "kernels"), [
    ("torchtitan_h100_202412", "400 Gb/s per GPU RDMA; eager", Kernels.eager),
    ("torchtitan_h100_202412", "Grand Teton H100", Kernels.eager),
    ("torchtitan_h100_202412", "with torch.compile", Kernels.fused),
    ("llama3_2024_t4", "BF16 MFU 41%", Kernels.fused),
    ("narayanan2021_t1", "", Kernels.fused),
])
def test_torchtitan_rows_run_eager_unless_compiled(llama3_long, source, notes, kernels):
    row = replace(llama3_long, source=source, notes=notes)
    assert to_instance(row).training.kernels is kernels
