"""The shared CSV reads as published and rows on both sides of the tune / held-out split stay close.

Tolerances: 5 % on a tuned row and on four held-out rows (Korthikanti's GPT-3 175B, Llama 3 405B on 8,192 GPUs,
torchtitan's 128-GPU eager and compiled runs); benchmarks/fidelity.py prints every row."""

from __future__ import annotations

import pytest

from scaleacross_milp.fidelity.hardware import GPU_TYPES
from scaleacross_milp.fidelity.predict import predict


def test_every_row_is_read(published):
    assert len(published) == 24
    assert {row.metric for row in published} == {"hw_tflops_per_gpu", "iteration_time_s", "model_tflops_per_gpu",
                                                 "tokens_per_s_per_gpu"}
    assert [row.vp for row in published if row.source == "llama3_2024_t4"] == [None] * 3
    assert sum(row.tuned for row in published) == 11


@pytest.mark.parametrize(("source", "model", "gpus", "recompute", "note"), [
    ("narayanan2021_t1", "gpt-145b", 1536, "full", ""),
    ("korthikanti2022_t5", "gpt-175b", 64, "selective+sequence-parallel", ""),
    ("llama3_2024_t4", "llama3-405b", 8192, "none", ""),
    ("torchtitan_h100_202412", "llama3-8b", 128, "selective", "eager"),
    ("torchtitan_h100_202412", "llama3-8b", 128, "selective", "torch.compile"),
])
def test_prediction_within_five_percent(published, source, model, gpus, recompute, note):
    [row] = [r for r in published
             if (r.source, r.model, r.gpus, r.recompute) == (source, model, gpus, recompute) and note in r.notes]
    prediction = predict(row)
    assert abs(prediction.error) < 0.05, f"{row.source} {row.model}: {prediction.predicted:.4g} vs {row.value:g}"


def test_a_faster_gpu_type_predicts_more_throughput(published):
    # benchmarks/fit_h100_500w.py bisects on the 500 W H100's peak, which needs the prediction to grow with it.
    [row] = [r for r in published if r.source.startswith("torchtitan") and r.tuned]
    fitted = predict(row)
    faster = predict(row, GPU_TYPES[row.gpu].model_copy(update={"peak_dense_tflops": {"bf16": 989, "fp16": 989}}))
    assert faster.verification.iteration_s < fitted.verification.iteration_s
    assert faster.predicted > fitted.predicted
