"""Candidate shapes (TP, CP, EP, PP, DP, micro-batch) enumerated outside the MILP.

A shape is kept when its degrees divide what they split (heads by TP, experts by EP, DP replicas by EP, the
global batch by DP x micro-batch), its TP x CP group fits the smallest NVLink domain in use (the cost model prices
a CP group that spans nodes at the fabric tier, and `evaluate` accepts such layouts, as Llama 3 405B ran CP 16 over
TP 8 nodes; the search leaves them out, which keeps screening to the shapes that usually win), and the stage cells
fit the buildings.
Memory and lower-bound pruning happen in `bounds`.
"""

from __future__ import annotations

from functools import lru_cache

from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape

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
    batch = training.batch_sequences

    tps = search.tp_degrees or _powers_of_two(nvlink)
    cps = search.cp_degrees or [1] + [
        c for c in _powers_of_two(16)[1:] if training.seq_len // c >= MIN_TOKENS_PER_CP_RANK]
    experts = model.moe.experts if model.moe else 1
    eps = search.ep_degrees or [e for e in _powers_of_two(experts) if experts % e == 0]

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
                        if batch % micro_batch:
                            continue
                        for dp in _divisors(batch // micro_batch):
                            if dp % ep or tp * cp * pp * dp > total_gpus:
                                continue
                            shapes.append(
                                Shape(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, micro_batch=micro_batch,
                                      microbatches=batch // (micro_batch * dp))
                            )
    return shapes
