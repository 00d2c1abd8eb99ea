"""Candidate shapes (TP, CP, EP, PP, DP, micro-batch) enumerated outside the MILP.

A shape is kept when its degrees divide what they split (heads by TP, experts by EP, DP replicas by EP), the
batch rounding rule gives DP x micro-batch a microbatch count (`Training.rounded_microbatches`: under `exact`
DP x micro-batch divides the global batch, otherwise m = floor / ceil / nearest of B / (DP x micro-batch) within
`batch_tolerance`; the shape then runs its own batch, `Shape.batch_sequences`), its TP x CP group fits the
smallest NVLink domain in use (the cost model prices a CP group that spans nodes at the fabric tier, and
`evaluate` accepts such layouts, as Llama 3 405B ran CP 16 over TP 8 nodes; the search leaves them out, which
keeps screening to the shapes that usually win), and the stage cells fit the buildings.
Memory and lower-bound pruning happen in `bounds`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.training import Training

if TYPE_CHECKING:
    from scaleacross_milp.milp.context import ShapeContext

MIN_TOKENS_PER_CP_RANK = 4096
"""Default CP degrees above 1 keep at least this many tokens of a sequence on each rank (below it CP only adds
traffic); CP 1 is always a candidate."""


def _powers_of_two(limit: int) -> list[int]:
    return [2**i for i in range(limit.bit_length()) if 2**i <= limit]


@lru_cache(maxsize=256)
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def pipeline_degrees(instance: Instance) -> list[int]:
    search, layers = instance.search, instance.model_spec.layers
    if search.pp_degrees is not None:
        return sorted(p for p in set(search.pp_degrees) if p <= layers)
    limit = min(search.max_pp, layers)
    return sorted(set(_powers_of_two(limit)) | {d for d in _divisors(layers) if d <= limit})


def enumerate_shapes(instance: Instance) -> list[Shape]:
    model, search, training = instance.model_spec, instance.search, instance.training
    buildings = instance.topology.buildings
    total_gpus = sum(b.gpus for b in buildings)
    largest_building = max(b.gpus for b in buildings)
    nvlink = min(instance.gpu_types[b.gpu_type].nvlink_domain_gpus for b in buildings)

    tps = search.tp_degrees or _powers_of_two(nvlink)
    cps = search.cp_degrees or [1] + [
        c for c in _powers_of_two(16)[1:] if training.seq_len // c >= MIN_TOKENS_PER_CP_RANK]
    experts = model.moe.experts if model.moe else 1
    eps = search.ep_degrees or [e for e in _powers_of_two(experts) if experts % e == 0]

    runs = {b: dp_degrees(training, b, total_gpus) for b in search.micro_batch_sizes}
    shapes = []
    for tp in tps:
        if model.heads % tp or tp > nvlink:
            continue
        for cp in cps:
            if training.seq_len % cp or tp * cp > nvlink:
                continue
            for ep in eps:
                if experts % ep or tp * cp * ep > largest_building:
                    continue
                for pp in pipeline_degrees(instance):
                    for micro_batch in search.micro_batch_sizes:
                        for dp, m in runs[micro_batch]:
                            if dp % ep or tp * cp * pp * dp > total_gpus:
                                continue
                            shapes.append(Shape(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, micro_batch=micro_batch,
                                                microbatches=m))
    return shapes


def dp_degrees(training: Training, micro_batch: int, most: int) -> list[tuple[int, int]]:
    """(DP, m) with DP <= `most` and m = training.rounded_microbatches(DP x micro_batch) kept; as m >= 1,
    DP x micro_batch <= training.largest_batch_sequences."""
    top = min(most, training.largest_batch_sequences // micro_batch)
    pairs = ((dp, training.rounded_microbatches(dp * micro_batch)) for dp in range(1, top + 1))
    return [(dp, m) for dp, m in pairs if m is not None]


def per_requested(ctx: ShapeContext) -> float:
    """B_requested / B_run of the context's shape (`Shape.batch_factor`): its iteration time T times this is the
    time per requested batch, which the search compares across shapes (T alone within one shape's MILP)."""
    return ctx.shape.batch_factor(ctx.instance.training.batch_sequences)
