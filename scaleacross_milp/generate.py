"""Seeded generator of realistic planning instances (issue 12): what users write, not what was tuned to solve.

`generate(seed, size)` returns an instance JSON dict (model inlined, so the file solves from anywhere) that passes
the instance contract; `generate_instance` returns the validated `Instance`. For one (seed, size) the result is
always the same (a private `random.Random(seed)` drives every choice).

What varies, per instance:
  buildings   2-16 (2-4 in `small`) of unequal sizes (multiples of `unit` GPUs, at least two sizes differ), grouped
              into campuses (sites) and sites into regions; pods with 1-15x oversubscription above them
  GPU types   A100 80GB, H100 SXM, B200 (HGX): datasheet numbers below; 60 % of instances mix 2-3 types
  links       campus (0.3-5 km, fat), metro (10-80 km) and continental (300-3,000 km, thin), with thin
              (100-400 Gb/s), oversubscribed-building and lossy (1e-5..1e-3) cases; 1-64 ECMP paths, 1-16
              queue pairs, and the transports the ends support (ECMP go-back-N / selective repeat, spraying)
  model       a dense or MoE model of `models/` whose training state (18 bytes per parameter) takes at most
              MAX_STATE_SHARE of the cluster's HBM
  batch       a multiple of the cluster's nodes (`batch_divides`: DP over every node is possible) or not
              (an odd multiple of a power of two, or a prime)
  training    sequence length 2,048 / 4,096 / 8,192, recompute none / selective / full

`design(point)` / `design_instance(point)` build an instance from explicit benchmark parameters instead (DesignPoint:
model, buildings, distance, cross-building oversubscription, loss, GPU mix, GPUs), the rest drawn as above from the
point's seed (the speedup and optimality benchmarks).

Sizes (`Size`): small 64-512 GPUs and models up to 100B parameters (quick; the pytest property subset), medium
64-4,096 GPUs (the property suite), large 4,096-262,144 GPUs over up to 16 buildings (later scaling benchmarks).

GPU datasheets (dense tensor-core peaks, no sparsity):
  a100-80gb, h100-80gb  scaleacross_milp.fidelity.hardware.GPU_TYPES (sources there).
  b200  NVIDIA HGX B200 datasheet (8 GPUs): FP16/BF16 36 PFLOP/s and FP8 72 PFLOP/s with sparsity, i.e.
        2,250 / 4,500 TFLOP/s dense per GPU; 1,440 GB HBM3e (180 GB per GPU) at 64 TB/s (8 TB/s per GPU);
        NVLink 5 1.8 TB/s per GPU (900 GB/s each way), of which ring collectives are taken to reach 80 %
        (720 GB/s: H100's 370 of 450 and A100's 230 of 300 are 77-82 %); DGX B200: one 400 Gb/s ConnectX-7
        per GPU.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path

from scaleacross_milp.costmodel.memory import total_params
from scaleacross_milp.fidelity.hardware import GB_IN_GIB, GPU_TYPES
from scaleacross_milp.spec.hardware import GPUType
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.topology import Link

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
NODE_GPUS = 8
"""GPUs per NVLink domain (HGX A100 / H100 / B200) and the smallest unit of a building."""

B200 = GPUType(peak_dense_tflops={"bf16": 2250, "fp8": 4500}, hbm_gib=180 * GB_IN_GIB, hbm_tbyte_s=8.0,
               nvlink_gbyte_s=720, nic_gbit_s=400)
"""NVIDIA HGX B200, per GPU (module docstring)."""
GPU_CHOICES: dict[str, GPUType] = {"a100-80gb": GPU_TYPES["a100-80gb"], "h100-80gb": GPU_TYPES["h100-80gb"],
                                   "b200": B200}

STATE_BYTES_PER_PARAM = 18.0
"""bf16 weights 2 + fp32 gradients 4 + Adam 12 (the Training defaults)."""
MAX_STATE_SHARE = 0.4
"""A model is a candidate when its training state fits in this share of the cluster's usable HBM (the rest is
activations and buffers); beyond it most instances would be infeasible."""

CAMPUS_KM, METRO_KM, CONTINENTAL_KM = (0.3, 5.0), (10.0, 80.0), (300.0, 3000.0)
THIN_GBIT_S = (100, 200, 400)
LOSS_RATES = (1e-5, 1e-4, 1e-3)
PATHS = (1, 2, 4, 8, 16, 32, 64)
QUEUE_PAIRS = (1, 1, 2, 4, 16)
OVERSUBSCRIPTION = (1.0, 2.0, 3.0, 4.0, 7.0, 15.0)
"""Llama 3's 1:7 above 3,072-GPU pods, Alibaba HPN's 15:1 at its core (DESIGN.md section 2)."""


class Size(str, Enum):
    small = "small"
    medium = "medium"
    large = "large"


@dataclass(frozen=True)
class SizeRange:
    """GPUs in the whole cluster (log-uniform), most buildings, capacity scale of links, solve time limit."""

    min_gpus: int
    max_gpus: int
    max_buildings: int
    link_scale: int
    time_limit_s: float
    max_params: float = math.inf


SIZES = {
    Size.small: SizeRange(64, 512, 4, 1, 10.0, max_params=100e9),
    Size.medium: SizeRange(64, 4096, 16, 1, 30.0),
    Size.large: SizeRange(4096, 262_144, 16, 8, 60.0),
}

LINK_CLASSES: dict[str, tuple[tuple[float, float], tuple[int, ...]]] = {
    "campus": (CAMPUS_KM, (3200, 6400, 12800, 25600, 51200)),
    "metro": (METRO_KM, (800, 1600, 3200, 6400, 12800, 25600)),
    "continental": (CONTINENTAL_KM, (400, 800, 1600, 3200, 6400)),
}
"""Distance range (km) and capacities (Gb/s per direction, before the size's link_scale) of each link class."""


@cache
def model_specs() -> dict[str, dict]:
    """The bundled models (models/*.json) by name."""
    return {path.stem: json.loads(path.read_text()) for path in sorted(MODELS_DIR.glob("*.json"))}


@cache
def model_params() -> dict[str, float]:
    """Parameters of each bundled model (costmodel.memory.total_params)."""
    return {name: total_params(ModelSpec.model_validate(spec)) for name, spec in model_specs().items()}


def link_class(link: Link) -> str:
    """campus / metro / continental from the link's one-way latency (fiber 4.9 us/km)."""
    km = link.one_way_latency_s / 4.9e-6
    return "campus" if km <= CAMPUS_KM[1] * 2 else "metro" if km <= METRO_KM[1] * 2 else "continental"


def batch_divides(instance: Instance) -> bool:
    """Whether the global batch is a multiple of the cluster's nodes (8-GPU NVLink domains): only then can every
    GPU run data-parallel with one cell per node."""
    nodes = sum(b.gpus for b in instance.topology.buildings) // NODE_GPUS
    return instance.training.batch_sequences % nodes == 0


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _building_sizes(rng: random.Random, total: int, count: int, bounds: SizeRange) -> list[int]:
    """`count` unequal sizes, multiples of a unit (8 GPUs, coarser for large clusters), summing to about
    `total` and within the size's GPU range: shares drawn log-normally, each building at least one unit."""
    unit = NODE_GPUS * max(1, 2 ** int(math.log2(max(1, total // (64 * count)))))
    weights = [rng.lognormvariate(0.0, 0.6) for _ in range(count)]
    sizes = [max(1, round(total * w / sum(weights) / unit)) * unit for w in weights]
    if len(set(sizes)) == 1:
        sizes[0] += unit
    while sum(sizes) < bounds.min_gpus:
        sizes[sizes.index(min(sizes))] += unit
    while sum(sizes) > bounds.max_gpus:
        sizes[sizes.index(max(sizes))] -= unit
    return sizes


def _pod(rng: random.Random, gpus: int) -> dict:
    """Pods with full bisection inside, oversubscribed above (or one non-blocking fabric)."""
    if gpus < 4 * NODE_GPUS or rng.random() < 0.4:
        return {}
    pod = 2 ** rng.randint(int(math.log2(NODE_GPUS)) + 1, int(math.log2(gpus)))
    return {"pod_gpus": pod, "oversubscription": rng.choice(OVERSUBSCRIPTION)}


def _link(rng: random.Random, a: str, b: str, kind: str, scale: int) -> dict:
    """One link of a class; thin (20 %) and lossy (25 %, more often when long) variants."""
    (near, far), capacities = LINK_CLASSES[kind]
    capacity = rng.choice(capacities) * scale
    if rng.random() < 0.2:
        capacity = rng.choice(THIN_GBIT_S)
    lossy = rng.random() < (0.4 if kind == "continental" else 0.2)
    transports = rng.choice([["ecmp_go_back_n"], ["ecmp_go_back_n", "spray_selective_repeat"],
                             ["ecmp_go_back_n", "ecmp_selective_repeat"], ["spray_selective_repeat"],
                             ["ecmp_selective_repeat", "spray_selective_repeat"]])
    return {"a": a, "b": b, "capacity_gbit_s": capacity, "distance_km": round(_log_uniform(rng, near, far), 1),
            "loss_rate": rng.choice(LOSS_RATES) if lossy else 0.0, "paths": rng.choice(PATHS),
            "queue_pairs_per_connection": rng.choice(QUEUE_PAIRS), "transports": transports}


def _sites(rng: random.Random, count: int) -> list[int]:
    """Site of each building: 1-4 campuses, every site non-empty."""
    sites = rng.randint(1, min(4, count))
    assignment = list(range(sites)) + [rng.randrange(sites) for _ in range(count - sites)]
    return sorted(assignment)


def _topology(rng: random.Random, sizes: list[int], gpu_types: list[str], scale: int) -> dict:
    """Buildings by site (each of `gpu_types` used at least once when there are enough buildings); inside a site
    a chain plus maybe a chord (campus); sites joined by a spanning tree plus maybe one extra link (dropped when it
    would join two buildings already linked), metro inside a region and continental across regions."""
    site_of = _sites(rng, len(sizes))
    sites = sorted(set(site_of))
    region_of_site = {s: rng.choice(["r0", "r1"]) if s else "r0" for s in sites}
    kinds = [gpu_types[i] if i < len(gpu_types) else rng.choice(gpu_types) for i in range(len(sizes))]
    rng.shuffle(kinds)
    buildings = [{"name": f"s{site}-b{i}", "gpus": gpus, "gpu_type": kind, "region": region_of_site[site],
                  **_pod(rng, gpus)}
                 for i, (site, gpus, kind) in enumerate(zip(site_of, sizes, kinds, strict=True))]
    members = {s: [b["name"] for b, site in zip(buildings, site_of, strict=True) if site == s] for s in sites}
    links = []
    for names in members.values():
        links += [_link(rng, a, b, "campus", scale) for a, b in zip(names, names[1:], strict=False)]
        if len(names) > 2 and rng.random() < 0.5:
            links.append(_link(rng, names[0], names[-1], "campus", scale))
    pairs = [(rng.choice(sites[:i]), s) for i, s in enumerate(sites) if i]
    if len(sites) > 2 and rng.random() < 0.5:
        pairs.append((sites[0], sites[-1]))
    linked = set()
    for s, t in pairs:
        kind = "metro" if region_of_site[s] == region_of_site[t] else "continental"
        a, b = rng.choice(members[s]), rng.choice(members[t])
        link = _link(rng, a, b, kind, scale)  # drawn either way: the seed's later draws stay the same
        if frozenset((a, b)) not in linked:
            linked.add(frozenset((a, b)))
            links.append(link)
    return {"buildings": buildings, "links": links}


def _model(rng: random.Random, hbm_bytes: float, max_params: float) -> dict:
    """A dense or an MoE model (equally likely when both kinds fit) of at most `max_params` parameters whose state
    fits MAX_STATE_SHARE of HBM."""
    params = model_params()
    fitting = {name: spec for name, spec in model_specs().items() if params[name] <= max_params
               and params[name] * STATE_BYTES_PER_PARAM <= MAX_STATE_SHARE * hbm_bytes}
    by_kind = [[spec for spec in fitting.values() if (spec.get("moe") is not None) == moe] for moe in (False, True)]
    return rng.choice(rng.choice([kind for kind in by_kind if kind]))


def _next_prime(n: int) -> int:
    """The smallest prime >= n (trial division)."""
    while n < 2 or any(n % d == 0 for d in range(2, math.isqrt(n) + 1)):
        n += 1
    return n


def _batch(rng: random.Random, nodes: int) -> int:
    """Sequences per step: nodes x 2^j (divides the cluster) or, half the time, a nearby odd multiple of a power
    of two or a prime that is not a multiple of the nodes."""
    target = nodes * 2 ** rng.randint(0, 2)
    if rng.random() < 0.5:
        return target
    odd = rng.choice([3, 5, 7, 9, 11, 13, 15])
    batch = odd * 2 ** max(0, round(math.log2(target / odd)))
    if batch % nodes == 0 or rng.random() < 0.2:
        batch = _next_prime(rng.randint(max(2, target // 2), 2 * target))
        batch = batch if batch % nodes else _next_prime(batch + 1)
    return batch


def generate(seed: int, size: Size | str = Size.medium) -> dict:
    """An instance JSON dict for `seed` (module docstring for what varies)."""
    size = Size(size)
    bounds = SIZES[size]
    rng = random.Random(f"{size.value}-{seed}")
    total = round(_log_uniform(rng, bounds.min_gpus, bounds.max_gpus))
    count = rng.randint(2, min(bounds.max_buildings, max(2, total // NODE_GPUS)))
    sizes = _building_sizes(rng, total, count, bounds)
    names = sorted(GPU_CHOICES)
    mixed = rng.random() < 0.6
    kinds = rng.sample(names, rng.randint(2, 3)) if mixed else [rng.choice(names)]
    topology = _topology(rng, sizes, kinds, bounds.link_scale)
    used = sorted({b["gpu_type"] for b in topology["buildings"]})
    hbm = sum(b["gpus"] * GPU_CHOICES[b["gpu_type"]].hbm_gib * 2**30 * GPU_CHOICES[b["gpu_type"]].usable_hbm_fraction
              for b in topology["buildings"])
    model = _model(rng, hbm, bounds.max_params)
    gpus = sum(b["gpus"] for b in topology["buildings"])
    seq_len = rng.choice([2048, 4096, 4096, 8192, 8192])
    batch = _batch(rng, gpus // NODE_GPUS)
    recompute = rng.choice(["none", "selective", "selective", "selective", "full"])
    links = ", ".join(f"{link['a']}-{link['b']} {link['capacity_gbit_s']:g} Gb/s {link['distance_km']:g} km"
                      + (f" loss {link['loss_rate']:g}" if link["loss_rate"] else "") for link in topology["links"])
    return {
        "name": f"gen-{size.value}-{seed}",
        "description": f"generated (seed {seed}, {size.value}): {model['name']} on {gpus:,} GPUs in {count} "
                       f"buildings ({', '.join(used)}); batch {batch} x {seq_len}; links: {links}",
        "model": model,
        "training": {"seq_len": seq_len, "global_batch_sequences": batch, "precision": "bf16",
                     "recompute": recompute},
        "gpu_types": {name: GPU_CHOICES[name].model_dump(mode="json") for name in used},
        "topology": topology,
        "search": {"time_limit_s": bounds.time_limit_s},
    }


def generate_instance(seed: int, size: Size | str = Size.medium) -> Instance:
    """`generate`, validated against the instance contract."""
    return Instance.model_validate(generate(seed, size))


DESIGN_GPU = "h100-80gb"
"""The GPU type of uniform design points; mixed points draw 2-3 of GPU_CHOICES."""
DESIGN_SEQ_LEN = 4096


@dataclass(frozen=True)
class DesignPoint:
    """One point of a benchmark's design space: the parameters asked for, the rest drawn from `seed`.

    `oversubscription` is cross-building: every link carries c = min(G_a n_a, G_b n_b) / oversubscription Gb/s,
    G the GPUs and n the NIC Gb/s per GPU of its two ends (1:1 lets every GPU of the smaller end send at line rate).
    Buildings of unequal sizes sum to `gpus` (a power of two, at least 8 per building), joined in a chain
    b0 - b1 - ... (buildings along one fiber route), each link `distance_km` long with `loss_rate`."""

    model: str
    buildings: int
    distance_km: float
    oversubscription: float
    loss_rate: float
    mixed: bool
    gpus: int
    seed: int = 0
    sequences_per_node: int = 2

    @property
    def label(self) -> str:
        return (f"{self.model} {self.buildings}b {self.gpus} GPUs {self.distance_km:g} km 1:{self.oversubscription:g} "
                f"loss {self.loss_rate:g} {'mixed' if self.mixed else 'uniform'} s{self.seed}")


def _design_kind(km: float) -> str:
    """The link class whose distance range reaches `km` (campus / metro / continental)."""
    return "campus" if km <= CAMPUS_KM[1] else "metro" if km <= METRO_KM[1] else "continental"


def design(point: DesignPoint) -> dict:
    """An instance JSON dict with exactly `point`'s model, buildings, GPUs, distance, cross-building
    oversubscription, loss and GPU mix (DesignPoint); building sizes (`_building_sizes`), pods (`_pod`) and each
    link's paths, queue pairs and transports (`_link`) are drawn as `generate` draws them."""
    if point.gpus & (point.gpus - 1) or point.gpus < NODE_GPUS * point.buildings:
        raise ValueError(f"design point: {point.gpus} GPUs is not a power of two >= {NODE_GPUS} per building")
    rng = random.Random(f"design-{point.seed}")
    sizes = _building_sizes(rng, point.gpus, point.buildings, SizeRange(point.gpus, point.gpus, point.buildings, 1, 0))
    names = sorted(GPU_CHOICES)
    kinds = rng.sample(names, rng.randint(2, 3)) if point.mixed else [DESIGN_GPU]
    buildings = [{"name": f"b{i}", "gpus": gpus, "gpu_type": kinds[i % len(kinds)], "region": "r0",
                  **_pod(rng, gpus)} for i, gpus in enumerate(sizes)]
    links = []
    for a, b in zip(buildings, buildings[1:], strict=False):
        link = _link(rng, a["name"], b["name"], _design_kind(point.distance_km), 1)
        ends = min(end["gpus"] * GPU_CHOICES[end["gpu_type"]].nic_gbit_s for end in (a, b))
        links.append({**link, "capacity_gbit_s": ends / point.oversubscription, "distance_km": point.distance_km,
                      "loss_rate": point.loss_rate})
    used = sorted({b["gpu_type"] for b in buildings})
    batch = point.sequences_per_node * point.gpus // NODE_GPUS
    return {
        "name": f"design-{point.model}-{point.buildings}b-{point.distance_km:g}km-os{point.oversubscription:g}-"
                f"loss{point.loss_rate:g}-{'mixed' if point.mixed else 'uniform'}-s{point.seed}",
        "description": f"design point: {point.label}; buildings {sizes} ({', '.join(used)})",
        "model": model_specs()[point.model],
        "training": {"seq_len": DESIGN_SEQ_LEN, "global_batch_sequences": batch, "precision": "bf16",
                     "recompute": "selective"},
        "gpu_types": {name: GPU_CHOICES[name].model_dump(mode="json") for name in used},
        "topology": {"buildings": buildings, "links": links},
    }


def design_instance(point: DesignPoint) -> Instance:
    """`design`, validated against the instance contract."""
    return Instance.model_validate(design(point))
