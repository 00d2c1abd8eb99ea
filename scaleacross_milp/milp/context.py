"""Everything one shape's MILP needs, precomputed from the instance and the cost model (plain numbers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from scaleacross_milp.calibration.piecewise import Breakpoints, breakpoints
from scaleacross_milp.costmodel.build import InstanceTables, build_shape_costs, usable_hbm_bytes
from scaleacross_milp.costmodel.costs import DPVariant, GPUCosts, ShapeCosts
from scaleacross_milp.costmodel.layer_kinds import MoEMemory, MoEPattern, kind_costs, moe_memory, moe_pattern
from scaleacross_milp.costmodel.memory import ShapeMemory
from scaleacross_milp.costmodel.network import (
    PriceLine,
    fastest_nic_byte_s,
    link_efficiency,
    nic_floor,
    price_lines,
)
from scaleacross_milp.costmodel.schedule import ScheduleOption, searched_options
from scaleacross_milp.milp.routes import RouteTable
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.topology import Transport


@dataclass(frozen=True)
class KindExcess:
    """What one MoE layer beyond the average share (`moe`) and one dense layer beyond it (`dense`) add to a per-layer
    quantity (`ShapeContext.kind_excess`; at most one of them is not 0), priced by the MILP's moe_excess and
    dense_excess (`formulation.layer_kinds`)."""

    moe: float = 0.0
    dense: float = 0.0

    @property
    def most(self) -> float:
        """The most one layer of either kind adds (for big-M constants)."""
        return max(self.moe, self.dense)

    def __mul__(self, factor: float) -> KindExcess:
        return KindExcess(self.moe * factor, self.dense * factor)

    __rmul__ = __mul__

    def __truediv__(self, divisor: float) -> KindExcess:
        return KindExcess(self.moe / divisor, self.dense / divisor)

    def __bool__(self) -> bool:
        return bool(self.moe or self.dense)


def dp_variants(modes: list[DPMode], cells_per_stage: int, buildings: int) -> list[DPVariant]:
    """DP variants for a shape: HSDP with r replica groups for every r in 2..buildings dividing the cells
    per stage (r = 1 would be FSDP); the other modes (DDP, FSDP, fsdp-no-reshard, zero1) once."""
    variants = []
    for mode in modes:
        if mode is DPMode.hsdp:
            variants += [DPVariant(mode, r) for r in range(2, buildings + 1) if cells_per_stage % r == 0]
        else:
            variants.append(DPVariant(mode))
    return variants


Pair = tuple[ScheduleOption, DPVariant]


@lru_cache(maxsize=4096)
def inflight_table(options: tuple[ScheduleOption, ...], pp: int, microbatches: int) -> np.ndarray:
    """inflight[o, j]: microbatches of activations stage j holds at its peak under option o
    (`ScheduleOption.inflight_microbatches`); shared by every shape with the same p and m (read only)."""
    table = np.array([[o.inflight_microbatches(pp, j, microbatches) for j in range(pp)] for o in options], ndmin=2)
    table.flags.writeable = False
    return table


def stage_memory_table(memory: ShapeMemory | ShapeCosts, shape: Shape, options: list[ScheduleOption],
                       variants: list[DPVariant]) -> tuple[np.ndarray, np.ndarray]:
    """(fixed[o, v, j], per_layer[o, v, j]): bytes one GPU of stage j needs whatever its layers, and per layer it
    holds, under option o and variant v: fixed = transient_v + embedding states_v (stage 0) + LM-head states_v and
    logits (on o's head stage, the rank of its last virtual stage), per_layer = activations x in-flight_o,j +
    layer states_v."""
    p = shape.pp
    stages = np.arange(p)
    head = np.array([o.stage_map(p)[-1] for o in options])
    transient = np.array([memory.stage_fixed_bytes.get(v, 0.0) for v in variants])
    first = np.array([memory.first_stage_fixed_bytes[v] for v in variants])
    last = np.array([memory.last_stage_fixed_bytes[v] for v in variants])
    fixed = (transient[None, :, None] + first[None, :, None] * (stages == 0)[None, None, :]
             + last[None, :, None] * (stages[None, :] == head[:, None])[:, None, :])
    inflight = inflight_table(tuple(options), p, shape.microbatches)
    states = np.array([memory.layer_state_bytes[v] for v in variants])
    per_layer = memory.activation_bytes_per_layer * inflight[:, None, :] + states[None, :, None]
    return fixed, per_layer


def stage_room_table(memory: ShapeMemory | ShapeCosts, hbm_bytes: float | np.ndarray, shape: Shape,
                     options: list[ScheduleOption], variants: list[DPVariant],
                     moe: MoEMemory | None = None) -> np.ndarray:
    """room[o, v, j]: layers stage j can hold within `hbm_bytes` under option o and variant v (`stage_memory_table`:
    fixed F and average per-layer bytes P): floor(max(hbm - F, 0) / P); for a model that mixes kinds (`moe`), at
    most the most n with F + n P + (e(n) - s n) x <= hbm, x what an MoE layer holds beyond a dense one and e(n) the MoE
    layers the memory rows count in n layers (`formulation.layer_kinds`): c ceil(n / (c k)) for c chunks per rank,
    and ceil((n - a) / k) past the first MoE layer a on stage 0 under one chunk (`moe_rooms`). Both are necessary:
    the rows charge F + n P + max(0, e(n) - s n) x. `hbm_bytes` may be an array of shape (T, 1, 1, 1): one table per
    HBM size."""
    fixed, per_layer = stage_memory_table(memory, shape, options, variants)
    free = np.maximum(hbm_bytes - fixed, 0.0)
    average = np.floor(free / per_layer)
    if moe is None:
        return average
    extra = (moe.activation_bytes * inflight_table(tuple(options), shape.pp, shape.microbatches)[:, None, :]
             + np.array([moe.state_bytes[v] for v in variants])[None, :, None])
    dense = per_layer - moe.pattern.share * extra
    if (dense <= 0).any():  # the closed form needs each layer to add bytes; the average alone stays necessary
        return average
    chunks = np.array([option.layer_granularity for option in options], dtype=float)[:, None, None]
    lead = np.zeros((len(options), 1, shape.pp))
    if moe.pattern.first is not None:
        lead[chunks[:, 0, 0] == 1, 0, 0] = moe.pattern.first
    return np.minimum(average, moe_rooms(free, dense, extra, chunks, chunks * moe.pattern.interval, lead))


def moe_rooms(free: np.ndarray, dense: np.ndarray, extra: np.ndarray, chunks: np.ndarray, window: np.ndarray,
              lead: np.ndarray) -> np.ndarray:
    """The most n (elementwise) with n dense + e(n) extra <= free, where the first `lead` layers hold no MoE layer
    and past them every `window` layers started hold `chunks` MoE layers, e(n) = chunks ceil((n - lead) / window):
    lead layers, then whole windows of window dense + chunks extra bytes, then r < window more layers once a new
    window's chunks extra fit."""
    past = free - lead * dense
    whole = np.floor(np.maximum(past, 0.0) / (window * dense + chunks * extra))
    left = past - whole * (window * dense + chunks * extra) - chunks * extra
    part = np.clip(np.floor(left / dense), 0, window - 1)
    return np.where(past < 0, np.floor(free / dense), lead + whole * window + part)


def attainable(options: list[ScheduleOption], layers: int, pp: int) -> list[ScheduleOption]:
    """Schedule options whose layer granularity g can be met: L a multiple of g and at least g layers per stage."""
    return [o for o in options if layers % o.layer_granularity == 0 and layers >= o.layer_granularity * pp]


HBMTier = tuple[float, int]
"""(usable HBM bytes h_t, K_t): the most stages whose D cells can all sit on GPUs with at least h_t usable HBM."""


def hbm_tiers(instance: Instance, buildings: list[str], shape: Shape) -> list[HBMTier]:
    """One `HBMTier` per distinct usable HBM among `buildings`, largest first: K_t = floor(sum over buildings k with
    HBM_k >= h_t of floor(gpus_k / cell GPUs) / D). A stage needs what its GPUs hold in every building it uses."""
    cells: dict[float, int] = {}
    for name in buildings:
        building = instance.topology.building(name)
        hbm = usable_hbm_bytes(instance.gpu_types[building.gpu_type])
        cells[hbm] = cells.get(hbm, 0) + building.gpus // shape.cell_gpus
    tiers, held = [], 0
    for hbm in sorted(cells, reverse=True):
        held += cells[hbm]
        tiers.append((hbm, held // shape.cells_per_stage))
    return tiers


def admissible(memory: ShapeMemory | ShapeCosts, tiers: list[HBMTier], shape: Shape, layers: int,
               options: list[ScheduleOption], variants: list[DPVariant], moe: MoEMemory | None = None) -> list[Pair]:
    """(option, variant) pairs that can hold the model on the buildings' HBM (`hbm_tiers`, largest first): o's layer
    granularity attainable (`attainable`), and with r_t[j] = min(layers stage j holds within h_t
    (`stage_room_table`, with each MoE layer's bytes as the memory rows count them when `moe` is given),
    L - p + 1):
        r_1[j] >= 1 for every stage and sum_j r_1[j] >= L                       (every stage on the largest HBM)
        for each tier t with K_t < p: some set S of at most K_t stages, holding every stage with r_{t+1}[j] < 1,
        has sum_{j in S} r_1[j] + sum_{j not in S} r_{t+1}[j] >= L             (at most K_t stages above h_{t+1})
    Each is necessary: a stage outside the K_t whose cells all have HBM >= h_t holds at most r_{t+1}[j] layers. With
    two HBM sizes they are exact over the per-stage rooms. In option-major order."""
    options = attainable(options, layers, shape.pp)
    if not options or not variants:
        return []
    most = layers - shape.pp + 1
    short = [stages for _, stages in tiers if stages < shape.pp]  # K_t < p: a prefix, as K_t grows with t
    if len(short) == len(tiers):  # the buildings do not hold p stages
        return []
    hbm = np.array([hbm for hbm, _ in tiers[:len(short) + 1]])
    rooms = np.minimum(stage_room_table(memory, hbm[:, None, None, None], shape, options, variants, moe), most)
    top = rooms[0]
    fits = (top.min(axis=2) >= 1) & (top.sum(axis=2) >= layers)
    for stages, lower in zip(short, rooms[1:], strict=True):
        gain, must = top - lower, lower < 1
        ranked = np.take_along_axis(gain, np.argsort(np.where(must, -np.inf, -gain), axis=2), axis=2)
        fits &= (must.sum(axis=2) <= stages) & (lower.sum(axis=2) + ranked[..., :stages].sum(axis=2) >= layers)
    return [(options[o], variants[v]) for o, v in zip(*np.nonzero(fits), strict=True)]


@dataclass(frozen=True)
class ShapeContext:
    instance: Instance
    shape: Shape
    costs: ShapeCosts
    routes: RouteTable
    options: list[ScheduleOption]
    variants: list[DPVariant]
    screened_pairs: tuple[Pair, ...] | None = None
    """The admissible pairs, when the screen has found them (`pairs` otherwise finds them on first use)."""

    @cached_property
    def pairs(self) -> list[Pair]:
        """The shape's admissible (schedule option, DP variant) pairs (`admissible` on its buildings' `hbm_tiers`),
        found once."""
        if self.screened_pairs is not None:
            return list(self.screened_pairs)
        return self.held_pairs(self.buildings, [(o, v) for o in self.options for v in self.variants])

    def held_pairs(self, buildings: list[str], pairs: list[Pair]) -> list[Pair]:
        """Those of `pairs` that `buildings` alone can hold in memory (`admissible` on their `hbm_tiers`, each MoE
        layer counted as the memory rows count it): a restriction to buildings of smaller HBM may hold none, and its
        model would be infeasible. In the order of `pairs`."""
        held = set(admissible(self.costs, hbm_tiers(self.instance, buildings, self.shape), self.shape,
                              self.instance.model_spec.layers, list(dict.fromkeys(o for o, _ in pairs)),
                              list(dict.fromkeys(v for _, v in pairs)), self.moe_memory))
        return [pair for pair in pairs if pair in held]

    @property
    def hbm_bytes(self) -> float:
        """The largest usable HBM over the shape's GPU types."""
        return max(gpu.hbm_usable_bytes for gpu in self.costs.per_class.values())

    @property
    def buildings(self) -> list[str]:
        return self.routes.buildings

    def gpu(self, building: str) -> GPUCosts:
        return self.building_costs[building]

    @cached_property
    def building_costs(self) -> dict[str, GPUCosts]:
        """The cost table of each building (`ShapeCosts.building`)."""
        return {b.name: self.costs.building(b.name) for b in self.instance.topology.buildings}

    @cached_property
    def price_groups(self) -> dict[str, list[str]]:
        """The shape's buildings grouped by the cost table they share (buildings that price the shape alike, DP terms
        included, share one: `costmodel.build.build_shape_costs`), each group keyed by its first building."""
        groups: dict[int, list[str]] = {}
        for k in self.buildings:
            groups.setdefault(id(self.gpu(k)), []).append(k)
        return {group[0]: group for group in groups.values()}

    @cached_property
    def price_group(self) -> dict[str, str]:
        """Each of the shape's buildings' `price_groups` key."""
        return {k: key for key, group in self.price_groups.items() for k in group}

    def max_cells(self, building: str) -> int:
        """Stage cells that fit in a building, capped by the cells one stage needs."""
        return min(self.shape.cells_per_stage, self.instance.topology.building(building).gpus // self.shape.cell_gpus)

    @cached_property
    def fastest_nic_byte_s(self) -> float:
        """`costmodel.network.fastest_nic_byte_s` over the instance's buildings: the widest window a connection can
        open, the subflow cap of every link's prices."""
        return fastest_nic_byte_s(self.instance.gpu_types[b.gpu_type] for b in self.instance.topology.buildings)

    @cached_property
    def price_lines(self) -> dict[tuple[int, Transport, int], tuple[PriceLine, ...]]:
        """The lines of `costmodel.network.price_lines` for each link under each transport and each queue-pair class
        q crossing it (`RouteTable.link_queue_pairs`): n crossing units of u seconds each (at bare capacity) take at
        most min_k (a_k u + b_k n u), for any n up to p D units of g = cell GPUs x q subflows (each capped at the
        fastest NIC's share per queue pair for the go-back-N window). The MILP picks a line per arc and class
        (`traffic.line_rows`), so a link costs what the units that cross it take, whether one unit crosses a thin
        ECMP link (few subflows: collisions) or many. Only the links some route between the shape's buildings uses
        (`RouteTable.used_links`): no load crosses the others, and a restriction to one building of a 131,072-GPU
        instance spent 0.5 s pricing its 15 links."""
        shape = self.shape
        nic = self.fastest_nic_byte_s
        links = self.routes.links
        return {
            (i, transport, q): price_lines(links[i], transport, shape.cell_gpus * q, shape.cells_per_stage * shape.pp,
                                           nic / q)
            for i, classes in self.routes.link_queue_pairs.items()
            for transport in links[i].transports
            for q in classes
        }

    @cached_property
    def nic_floors(self) -> dict[tuple[int, Transport, int], float]:
        """`costmodel.network.nic_floor` of a crossing unit (one cell's GPUs, each of its q queue pairs at the fastest
        NIC's share) on each used link under each transport and queue-pair class, where it is above the class's
        lone-unit price line (b_0): there the unit's NICs, not the link, bound its time (`traffic.line_rows`)."""
        nic = self.fastest_nic_byte_s
        links = self.routes.links
        floors = {(i, t, q): nic_floor(links[i], t, self.shape.cell_gpus * q, nic / q) for i, t, q in self.price_lines}
        return {key: floor for key, floor in floors.items() if floor > self.price_lines[key][0].slope}

    @cached_property
    def efficiency(self) -> dict[tuple[int, Transport], float]:
        """The best fraction of each link's capacity under each transport: link_efficiency at p D units (the most
        subflows that can cross it; efficiency grows with them) of its class with the most queue pairs (the link's
        own where no route crosses it). A GB takes at least 1 / (c efficiency) s."""
        nic = self.fastest_nic_byte_s
        units = self.shape.cells_per_stage * self.shape.pp * self.shape.cell_gpus
        classes = self.routes.link_queue_pairs
        return {
            (i, transport): link_efficiency(link, transport, units * q, nic / q)
            for i, link in enumerate(self.routes.links)
            for q in [max(classes.get(i, (link.queue_pairs_per_connection,)))]
            for transport in link.transports
        }

    @cached_property
    def seconds_per_gb(self) -> dict[tuple[int, Transport], float]:
        """The most seconds one GB can take on link i (one direction) under each transport: the steepest slope of its
        classes' first price lines, a lone unit's (no intercept), b_0 / c. Every price line's minimum is at most
        b_0 L / c. Links no route uses carry nothing and have none (`price_lines`)."""
        slowest: dict[tuple[int, Transport], float] = {}
        for (i, transport, _), lines in self.price_lines.items():
            seconds = lines[0].slope * 1e9 / self.routes.links[i].capacity_byte_s
            slowest[i, transport] = max(slowest.get((i, transport), 0.0), seconds)
        return slowest

    @cached_property
    def op_shares(self) -> tuple[float, float, float]:
        """(F, I, W) / C: one layer's forward, input-gradient and weight-gradient shares of its time (the first
        building's type)."""
        return self.layer_shares(self.buildings[0])

    def layer_shares(self, building: str) -> tuple[float, float, float]:
        """(F, I, W) / C of one layer on `building`'s GPU type."""
        layer = self.gpu(building).layer
        return tuple(t / layer.total_s for t in (layer.forward_s, layer.backward_input_s, layer.backward_weight_s))

    def path_multiples(self, ops: tuple[tuple[int, int, int], ...], chunks: int = 1,
                       shares: list[tuple[float, float, float]] | None = None) -> list[float]:
        """Per rank j, the multiple of Cst[j] a path's (F, I, W) ops on j take: each op its share of its stage's time
        per microbatch (shares[j], `op_shares` by default), over `chunks` chunks per rank."""
        return [sum(n * f for n, f in zip(counts, shares[j] if shares else self.op_shares, strict=True)) / chunks
                for j, counts in enumerate(ops)]

    def bubble_rows(self, option: ScheduleOption) -> list[tuple[list[float], int, float]]:
        """(a_j per stage j, r, g) of each of `option`'s rank paths' rows bubble >= sum_{j != r} a_j Cst[j] - g cycle
        (formulation.pipeline's bubble_path; `ScheduleOption.rank_paths`): a_j the path's ops on rank j as a
        multiple of Cst[j] (ops at `op_shares` of their stage's time), r the rank it runs most ops on, whose ops at
        the cycle's pace make the path m cycle + sum_{j != r} a_j Cst[j] - g cycle, g = m - a_r. None but under
        ZB-H1."""
        rows = []
        for path in option.rank_paths(self.shape.pp, self.shape.microbatches):
            stage = self.path_multiples(path)
            busiest = int(np.argmax(stage))
            rows.append((stage, busiest, self.shape.microbatches - stage[busiest]))
        return rows

    def bubble_lines(self, option: ScheduleOption) -> tuple[tuple[float, float], ...]:
        """(sigma, gamma) with bubble >= sigma S - gamma c at every point of the MILP's bubble rows under `option`
        with S <= sum_j Cst[j] and Cst[j] <= c: bubble_bound's (beta_o, beta_o), or per rank path (`bubble_rows`)
        sigma = min_{j != r} a_j and gamma = sigma + g (as sum_{j != r} Cst[j] >= S - c)."""
        rows = self.bubble_rows(option)
        if not rows:
            beta = option.bubble_coefficient(self.gpu(self.buildings[0]).layer)
            return ((beta, beta),)
        lines = {(sigma := min(a for j, a in enumerate(stage) if j != busiest), sigma + slack)
                 for stage, busiest, slack in rows}
        return tuple(sorted((sigma, gamma) for sigma, gamma in lines  # less of S and more of c than another: below it
                            if not any(s >= sigma and g <= gamma and (s, g) != (sigma, gamma) for s, g in lines)))

    def first_stage_floor_s(self, option: ScheduleOption, first_s: np.ndarray, total_s: float) -> np.ndarray:
        """The least longest rank path (`bubble_rows`: Tpipe >= sum_j a_j Cst[j] at cycle >= Cst[r]) at stage 0's
        time >= `first_s` (each entry) and stage times summing to >= `total_s`: per path, a_0 Cst[0] +
        min_{j > 0} a_j (S - Cst[0]), least at Cst[0] = first_s when a_0 is the larger, else at S; 0 without rank
        paths. (The bounds enumerate stage 0's whole layers, which the stage times' sum alone cannot see: a stage 0
        far the slowest runs its steady state while the others fill.)"""
        lines = [(stage[0], min(stage[1:])) for stage, _, _ in self.bubble_rows(option)]
        if not lines:
            return np.zeros_like(first_s)
        return np.max([alpha * first_s + beta * (total_s - first_s) if alpha >= beta else np.full_like(
            first_s, alpha * total_s) for alpha, beta in lines], axis=0)

    def drain_leads(self, option: ScheduleOption) -> dict[int, tuple[float, float, float]] | None:
        """Rank j's (a, b, k) of `ScheduleOption.drain_lead` for every j > 0 when `option` prices each later stage's
        DP reduction from its own rank's end (`formulation.iteration.add_drain_leads`), else None (one stage, or an
        option whose ranks end their reductions as rank 0 does)."""
        layer, p = self.gpu(self.buildings[0]).layer, self.shape.pp
        leads = {j: option.drain_lead(layer, j) for j in range(1, p)}
        return leads if p > 1 and None not in leads.values() else None

    def head_stage(self, option: ScheduleOption) -> int:
        """The stage (rank) running the LM head and loss, i.e. the last virtual stage: rank 0 under a V-shaped
        stage map (ZB-V puts virtual stage 2p - 1 on rank 0, as torch's ScheduleZBVZeroBubble does), else p - 1."""
        return option.stage_map(self.shape.pp)[-1]

    def head_options(self, j: int | None) -> list[int]:
        """Indices of the schedule options whose LM head runs on stage j (every option when j is None)."""
        return [o for o, option in enumerate(self.options) if j is None or self.head_stage(option) == j]

    def stage_time_terms(self, j: int, k: str) -> tuple[float, float]:
        """(the most seconds per layer, the largest fixed seconds over the shape's options) of stage j in building k
        for one microbatch, for big-M constants: the average layer and, for a model with both kinds of layer, the
        most a layer of either kind beyond its average share adds (`formulation.layer_kinds`)."""
        kind = self.kind_layer_s(k).most if self.moe_pattern else 0.0
        return self.gpu(k).layer.total_s + kind, max(self.stage_fixed_s(j, k, o) for o in self.options)

    def dp_sync_excess_s(self, building: str, variant: DPVariant, chunks: int) -> KindExcess:
        """What each layer of either kind beyond its average share adds to a stage's intra-building DP sync in
        `building` under `variant` with `chunks` chunks per rank: from (f_MoE(n) - f_dense(n)) / n at the average
        stage's n = L / p layers
        (`costmodel.dp.IntraDPSync.stage_s` on each kind's table: per layer exactly where the variant reduces layer
        by layer, the slope of one collective at that size where it reduces a chunk's buffer)."""
        n = self.instance.model_spec.layers / self.shape.pp
        return self.kind_excess(lambda costs: costs.building(building).dp_intra[variant].stage_s(n, chunks)) / n

    def kind_layer_s(self, k: str) -> KindExcess:
        """Seconds per microbatch a layer of either kind beyond its average share adds in building k (`kind_excess`)."""
        return self.kind_excess(lambda costs: costs.building(k).layer.total_s)

    def stage_sends(self, j: int, option: ScheduleOption) -> int:
        """Sends stage (rank) j makes per microbatch under `option`, each occupying it for one intra-building send:
        the forward of each of its virtual stages but the last and the backward of each but virtual stage 0, when
        the neighbouring virtual stage runs on another rank (`ScheduleOption.stage_map`). 1F1B: 1 on the end ranks,
        2 between; ZB-V: 2 on the end ranks, 4 between."""
        rank = option.stage_map(self.shape.pp)
        last = len(rank) - 1
        return sum((s < last and rank[s + 1] != j) + (s > 0 and rank[s - 1] != j)
                   for s in range(len(rank)) if rank[s] == j)

    @cached_property
    def stage_fixed_table(self) -> np.ndarray:
        """fixed[o, j, k]: seconds of stage j in building k per microbatch under option o (`self.options`,
        `self.buildings` order) beyond its layers: its intra-building sends (`stage_sends`), the embedding on stage 0
        and the LM head and loss on `head_stage`."""
        gpus = [self.gpu(k) for k in self.buildings]
        send = np.array([gpu.p2p_intra_s for gpu in gpus])
        table = np.zeros((len(self.options), self.shape.pp, len(gpus)))
        for o, option in enumerate(self.options):
            table[o] = np.array([self.stage_sends(j, option) for j in range(self.shape.pp)])[:, None] * send
            table[o, 0] += [gpu.first_stage_extra.total_s for gpu in gpus]
            table[o, self.head_stage(option)] += [gpu.last_stage_extra.total_s for gpu in gpus]
        return table

    @cached_property
    def layer_time_classes(self) -> list[tuple[float, np.ndarray, int]]:
        """(tau, where, cells) per distinct layer time tau over the shape's buildings, fastest first: the positions in
        `buildings` of those whose GPUs take tau per layer, and the stage cells they hold."""
        taus = np.array([self.gpu(k).layer.total_s for k in self.buildings])
        cells = np.array([self.instance.topology.building(k).gpus // self.shape.cell_gpus for k in self.buildings])
        return [(float(tau), np.flatnonzero(taus == tau), int(cells[taus == tau].sum())) for tau in np.unique(taus)]

    @cached_property
    def building_index(self) -> dict[str, int]:
        """Position of each building in `buildings` (the tables' building axis)."""
        return {k: i for i, k in enumerate(self.buildings)}

    @cached_property
    def stage_fixed_floor_table(self) -> dict[int | None, np.ndarray]:
        """floor[head][j, k]: `stage_fixed_table` least over the options running the LM head on stage `head` (over
        every option for None), one array per head stage the options use; the bounds read it for every stage and
        building many times per shape."""
        heads = {None, *(self.head_stage(option) for option in self.options)}
        return {head: self.stage_fixed_table[self.head_options(head)].min(axis=0) for head in heads}

    def stage_fixed_s(self, j: int, k: str, option: ScheduleOption) -> float:
        """Fixed seconds of stage j in building k per microbatch under `option` (`stage_fixed_table`)."""
        return float(self.stage_fixed_table[self.options.index(option), j, self.building_index[k]])

    def stage_fixed_floor_s(self, j: int, k: str, head: int | None = None) -> float:
        """The least fixed seconds of stage j in building k over the shape's schedule options (those running the
        LM head on stage `head`, when given; `stage_fixed_floor_table`)."""
        return float(self.stage_fixed_floor_table[head][j, self.building_index[k]])

    @property
    def chunk_counts(self) -> list[int]:
        """Model chunks per rank over the schedule options (1, interleaving's v, 2 for ZB-V)."""
        return sorted({o.chunks for o in self.options})

    @cached_property
    def sharpened_bounds(self) -> dict[Pair, float]:
        """`bounds.sharpened_bound_s` of each (schedule option, DP variant) pair, found once (the search sharpens a
        shape's bound and each pair's, and its MILP states them as rows)."""
        return {}

    @cached_property
    def bound_tables(self) -> dict[tuple, object]:
        """Tables the bounds find once per shape (`bounds._speed_groups`, `bounds.cycle_floors_s`), by what they
        depend on."""
        return {}

    @cached_property
    def _dp_sync_curves(self) -> dict[tuple[str, DPVariant, int], Breakpoints]:
        return {}

    def dp_sync_curve(self, building: str, variant: DPVariant, chunks: int) -> Breakpoints:
        """Breakpoints of a stage's exposed intra-building DP time in `building` over its layers n
        (`IntraDPSync.stage_s` with `chunks` model chunks per rank), at integers 1..L-p+1 with chords within 1 %
        (exact at the breakpoints): the MILP's piecewise-linear term and what its bounds read. Built on first use,
        once per price group; one curve for every chunk count when the variant reduces per layer."""
        sync = self.gpu(building).dp_intra[variant]
        key = (self.price_group[building], variant, 1 if sync.per_layer_units else chunks)
        if key not in self._dp_sync_curves:
            most = max(2, self.instance.model_spec.layers - self.shape.pp + 1)
            self._dp_sync_curves[key] = breakpoints(lambda n: sync.stage_s(n, key[2]), 1, most, integer=True)
        return self._dp_sync_curves[key]

    @cached_property
    def _dp_sync_floors(self) -> dict[tuple[DPVariant, int], np.ndarray]:
        return {}

    def dp_sync_floor_s(self, variant: DPVariant, chunks: int, layers: np.ndarray) -> np.ndarray:
        """The least the MILP's dpi can be when some stage holds at least `layers` layers (integers, each entry) on
        building of the shape: min over the `price_groups` and over integers n >= layers of the interpolant (a
        table over 1..L-p+1, built on first use)."""
        most = self.instance.model_spec.layers - self.shape.pp + 1
        if (variant, chunks) not in self._dp_sync_floors:
            counts = np.arange(1, most + 1)
            syncs = [self.gpu(group).dp_intra[variant] for group in self.price_groups]
            if syncs[0].per_layer_units:  # n t(d, e), linear: its curve is its chord, the least slope the least
                values = counts * min(sync.layer_s for sync in syncs)
            else:
                values = np.min([np.interp(counts, curve.x, curve.y) for group in self.price_groups
                                 for curve in [self.dp_sync_curve(group, variant, chunks)]], axis=0)
            self._dp_sync_floors[variant, chunks] = np.minimum.accumulate(values[::-1])[::-1]
        return self._dp_sync_floors[variant, chunks][np.clip(np.asarray(layers, dtype=int), 1, most) - 1]

    @property
    def homogeneous(self) -> bool:
        return len({self.instance.topology.building(b).gpu_type for b in self.buildings}) == 1

    @cached_property
    def moe_pattern(self) -> MoEPattern | None:
        """The model's MoE placement when it mixes dense and MoE layers (`costmodel.layer_kinds`), else None."""
        return moe_pattern(self.instance.model_spec)

    @cached_property
    def moe_memory(self) -> MoEMemory | None:
        """What an MoE layer holds beyond a dense one (`costmodel.layer_kinds.moe_memory`), for the memory screen."""
        return moe_memory(self.instance.model_spec, self.shape, self.instance.training, self.variants)

    @cached_property
    def kind_tables(self) -> tuple[ShapeCosts, ShapeCosts] | None:
        """(dense, MoE) cost tables of the shape when the model mixes kinds (`costmodel.layer_kinds.kind_costs`),
        built on first use."""
        return kind_costs(self.instance, self.shape, self.variants) if self.moe_pattern else None

    def kind_excess(self, value: Callable[[ShapeCosts], float]) -> KindExcess:
        """What one layer of either kind held beyond its average share adds to the per-layer quantity `value` reads
        from a cost table: an MoE layer max(0, value(MoE table) - value(dense table)), a dense one max(0,
        value(dense table) - value(MoE table)); nothing for a model with one kind of layer."""
        if self.kind_tables is None:
            return KindExcess()
        dense, moe = self.kind_tables
        return KindExcess(max(0.0, value(moe) - value(dense)), max(0.0, value(dense) - value(moe)))


def shape_options(instance: Instance, shape: Shape, buildings: int) -> tuple[list[ScheduleOption], list[DPVariant]]:
    """The schedule options and DP variants the instance allows for a shape."""
    search = instance.search
    return (searched_options(instance, shape),
            dp_variants(search.dp_modes, shape.cells_per_stage, buildings))


def shape_context(instance: Instance, shape: Shape, routes: RouteTable, tables: InstanceTables | None = None,
                  choices: tuple[list[ScheduleOption], list[DPVariant]] | None = None,
                  pairs: list[Pair] | None = None) -> ShapeContext:
    """Price a shape: its schedule options and DP variants (`choices`, default all `shape_options`), their cost
    table (from the instance's shared `tables` when given) and, when known, its admissible pairs."""
    options, variants = choices or shape_options(instance, shape, len(routes.buildings))
    costs = build_shape_costs(instance, shape, variants, tables)
    return ShapeContext(instance, shape, costs, routes, options, variants, None if pairs is None else tuple(pairs))
