"""The published metrics from an iteration time t (seconds) on n GPUs, global batch B sequences of s tokens:

  iteration_time_s       t
  tokens_per_s_per_gpu   B s / (t n)
  hw_tflops_per_gpu      hardware FLOPs / (t n 1e12): every matmul FLOP executed incl. recomputation, the attention
                         core over the whole s x s square; for GPT this is Narayanan et al. 2021's
                         96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with full recompute
  model_tflops_per_gpu   model FLOPs / (t n 1e12): 3 x the forward FLOPs without recompute (PaLM's MFU numerator,
                         which Llama 3 cites: 6 N + 12 l h s per token with N the matmul parameters incl. the head)
"""

from __future__ import annotations

from scaleacross_milp.costmodel import compute
from scaleacross_milp.spec.instance import Instance


def hardware_flops_per_iteration(instance: Instance) -> float:
    """(layers x one layer's FLOPs with the run's recompute + the LM head's) per sequence x batch sequences."""
    model, training = instance.model_spec, instance.training
    layer = compute.average_layer_flops(model, 1, training.seq_len, training.recompute)
    head = compute.lm_head_flops(model, 1, training.seq_len)
    return (model.layers * layer.total + head.total) * training.batch_sequences


def metric_value(metric: str, instance: Instance, gpus: int, iteration_s: float) -> float:
    """The metric named as in the CSV's `metric` column (formulas in the module docstring)."""
    training = instance.training
    if metric == "iteration_time_s":
        return iteration_s
    if metric == "tokens_per_s_per_gpu":
        return training.batch_sequences * training.seq_len / (iteration_s * gpus)
    if metric == "hw_tflops_per_gpu":
        return hardware_flops_per_iteration(instance) / (iteration_s * gpus * 1e12)
    if metric == "model_tflops_per_gpu":
        flops = compute.model_flops_per_iteration(instance.model_spec, training.seq_len, training.batch_sequences)
        return flops / (iteration_s * gpus * 1e12)
    raise ValueError(f"unknown metric '{metric}'")
