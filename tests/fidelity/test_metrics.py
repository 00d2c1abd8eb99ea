"""Each published metric from an iteration time, against hand-computed values."""

from __future__ import annotations

import pytest

from scaleacross_milp.fidelity.convert import to_instance
from scaleacross_milp.fidelity.metrics import hardware_flops_per_iteration, metric_value


def test_hw_tflops_is_narayanans_formula_with_full_recompute(megatron_76b):
    instance = to_instance(megatron_76b)
    B, s, l, h, V = 1792, 2048, 60, 10240, 51200  # noqa: E741, N806
    paper = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert hardware_flops_per_iteration(instance) == pytest.approx(paper, rel=1e-12)
    assert metric_value("hw_tflops_per_gpu", instance, 1024, 20.0) == pytest.approx(paper / (20.0 * 1024 * 1e12))


def test_model_tflops_is_palms_6n_plus_12lhs(llama3_long):
    instance = to_instance(llama3_long)
    l, h, f, d, g, V, s = 126, 16384, 53248, 128, 8, 128256, 131072  # noqa: E741, N806
    matmul_params = l * (h * (2 * h + 2 * g * d) + 3 * h * f) + h * V  # layers' matmuls + LM head
    per_token = 6 * matmul_params + 12 * l * h * s
    tokens = 128 * s
    assert metric_value("model_tflops_per_gpu", instance, 16384, 10.0) == pytest.approx(
        per_token * tokens / (10.0 * 16384 * 1e12), rel=1e-12)


def test_tokens_per_gpu_and_iteration_time(llama3_long):
    instance = to_instance(llama3_long)
    assert metric_value("tokens_per_s_per_gpu", instance, 16384, 8.0) == pytest.approx(128 * 131072 / (8 * 16384))
    assert metric_value("iteration_time_s", instance, 16384, 8.0) == 8.0
    with pytest.raises(ValueError, match="unknown metric"):
        metric_value("mfu", instance, 16384, 8.0)
