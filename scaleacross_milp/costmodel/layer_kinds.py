"""Dense and MoE layers: which layers each pipeline stage holds, how many of them are MoE, and each kind's costs.

A rank's n layers are split into its c chunks of n / c layers each; virtual stage s takes the next n_rank(s) / c
layers in virtual-stage order (`chunk_layers`; the verifier replays exactly this). The cost tables price the average
layer, a share s of an MoE layer and 1 - s of a dense one; a stage holding more MoE layers than s n is dearer in
every term that follows its parameters (DP traffic, gathers, the optimizer step, memory) and its EP all-to-alls
(an MoE layer of Llama 4 Maverick holds 52x a dense layer's parameters: 16.3 G against 0.31 G, 13x per GPU at TP 2
EP 4). The MILP therefore prices each stage's MoE layers beyond s n (`milp.formulation.layer_kinds`), from each
kind's own cost table (`kind_costs`). `MoEPattern` says how many MoE layers w consecutive layers can hold at most,
and the first w.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from scaleacross_milp.costmodel import memory
from scaleacross_milp.costmodel.build import build_shape_costs
from scaleacross_milp.costmodel.costs import DPVariant, ShapeCosts
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.training import Training


def chunk_layers(layers_per_rank: Sequence[int], stage_map: Sequence[int]) -> list[range]:
    """The layer indices of each virtual stage s (on rank stage_map[s]), its rank's layers split evenly over the
    rank's chunks, in virtual-stage order."""
    chunks = len(stage_map) // len(layers_per_rank)
    sizes = [layers_per_rank[rank] // chunks for rank in stage_map]
    starts = [0, *itertools.accumulate(sizes)]
    return [range(start, start + size) for start, size in zip(starts, sizes, strict=False)]


def moe_layers_per_rank(model: ModelSpec, layers_per_rank: Sequence[int], stage_map: Sequence[int]) -> list[int]:
    """MoE layers each rank holds under `chunk_layers`."""
    moe = set(model.moe_layer_indices())
    counts = [0] * len(layers_per_rank)
    for rank, layers in zip(stage_map, chunk_layers(layers_per_rank, stage_map), strict=True):
        counts[rank] += sum(i in moe for i in layers)
    return counts


def mixes_layer_kinds(model: ModelSpec) -> bool:
    """True when the model has both dense and MoE layers (only then do its stages differ from the average)."""
    return model.moe is not None and len(model.moe_layer_indices()) not in (0, model.layers)


@dataclass(frozen=True)
class MoEPattern:
    """The MoE layers of a model with both kinds: at most one in any `interval` k consecutive layers (k the least
    gap between two), a `share` s of all layers; `first`, the first MoE layer's index when they are exactly every
    k-th from it to the end (DeepSeek-V3: 3, k = 1; Llama 4 Maverick: 1, k = 2), so that the first n layers hold
    max(0, ceil((n - first) / k)) of them; None otherwise."""

    interval: int
    share: float
    first: int | None = None


def moe_pattern(model: ModelSpec) -> MoEPattern | None:
    """The model's MoEPattern when it mixes kinds (w consecutive layers hold at most ceil(w / k) MoE layers);
    None for a model with one kind of layer."""
    if not mixes_layer_kinds(model):
        return None
    indices = model.moe_layer_indices()
    gap = min((b - a for a, b in itertools.pairwise(indices)), default=model.layers)
    periodic = indices == list(range(indices[0], model.layers, gap))
    return MoEPattern(gap, len(indices) / model.layers, indices[0] if periodic else None)


@dataclass(frozen=True)
class KindModels:
    """A model that mixes kinds: its MoEPattern, and the model with every layer dense and with every layer MoE."""

    pattern: MoEPattern
    dense: ModelSpec
    moe: ModelSpec


_KINDS: dict[int, tuple[ModelSpec, KindModels | None]] = {}
"""`kind_models` by the model object's identity (the object is held, so its id is not reused): screening asks per
shape, and the copies' parameter counts are then found once (`memory.model_params`)."""


def kind_models(model: ModelSpec) -> KindModels | None:
    """The model's `KindModels`, made once per model object; None for a model with one kind of layer."""
    seen = _KINDS.get(id(model))
    if seen is None or seen[0] is not model:
        if len(_KINDS) >= 64:
            _KINDS.clear()
        pattern = moe_pattern(model)
        kinds = None if pattern is None else KindModels(pattern, *(
            model.model_copy(update={"moe": model.moe.model_copy(update={"moe_layers": layers})})
            for layers in ([], list(range(model.layers)))))
        seen = _KINDS[id(model)] = (model, kinds)
    return seen[1]


def kind_costs(instance: Instance, shape: Shape, variants: list[DPVariant]) -> tuple[ShapeCosts, ShapeCosts]:
    """(dense, MoE): `shape` priced as if every layer were dense, and as if every layer were MoE (a model that mixes
    kinds)."""
    kinds = kind_models(instance.model_spec)
    return tuple(build_shape_costs(instance.model_copy(update={"model": spec}), shape, variants)
                 for spec in (kinds.dense, kinds.moe))


@dataclass(frozen=True)
class MoEMemory:
    """What one MoE layer holds per GPU beyond a dense one (each at least 0), for a model that mixes kinds: the
    memory rows charge a stage these per MoE layer beyond its average share (`milp.formulation.memory`)."""

    pattern: MoEPattern
    activation_bytes: float
    """Per layer and in-flight microbatch."""
    state_bytes: dict[DPVariant, float]


def moe_memory(model: ModelSpec, shape: Shape, training: Training, variants: list[DPVariant]) -> MoEMemory | None:
    """`MoEMemory` from each kind's per-layer bytes (`memory`: byte counts only, no time is priced); None for a model
    with one kind of layer."""
    kinds = kind_models(model)
    if kinds is None:
        return None
    dense, moe = kinds.dense, kinds.moe
    return MoEMemory(kinds.pattern, max(0.0, memory.average_activation_bytes(moe, shape, training)
                                  - memory.average_activation_bytes(dense, shape, training)),
                     {v: max(0.0, memory.layer_state_bytes(moe, shape, training, v)
                             - memory.layer_state_bytes(dense, shape, training, v)) for v in variants})


def stage_bytes_held(instance: Instance, costs: ShapeCosts, variant: DPVariant, layers_per_rank: Sequence[int],
                     stage_map: Sequence[int], inflight: Sequence[float]) -> list[float]:
    """Per-GPU bytes of each rank holding `layers_per_rank` (`memory.stage_bytes` at the average layer, the LM head
    on the rank of the last virtual stage), with its own MoE layers e for a model that mixes kinds: plus
    (e - s n) (b_MoE - b_dense), b = activations x in-flight + states per layer of each kind's table."""
    head = stage_map[-1]
    held = [memory.stage_bytes(costs, variant, j, n, inflight[j], head) for j, n in enumerate(layers_per_rank)]
    model = instance.model_spec
    if not mixes_layer_kinds(model):
        return held
    dense, moe = kind_costs(instance, costs.shape, [variant])
    share = len(model.moe_layer_indices()) / model.layers
    counts = moe_layers_per_rank(model, layers_per_rank, stage_map)

    def per_layer(table: ShapeCosts, j: int) -> float:
        return table.activation_bytes_per_layer * inflight[j] + table.layer_state_bytes[variant]

    return [bytes_ + (counts[j] - share * layers_per_rank[j]) * (per_layer(moe, j) - per_layer(dense, j))
            for j, bytes_ in enumerate(held)]
