"""Discrete-event replay of one training iteration over the distinct pipeline patterns.

The iteration is a graph of operations; an operation starts when all its predecessors have finished:
  compute stream of each rank   the schedule's actions in order (F, I, W, B), each send's local cost after
                                the action producing it; then the optimizer step once DP sync is done (under
                                overlap_moe_expert_parallel_comm the warm-up forwards and cool-down backwards,
                                outside the merged pairs, take their hidden EP all-to-alls on top: StageWork.op_s)
  data dependencies             F(s, i) needs the activation of F(s-1, i); I/B(s, i) the gradient of
                                I/B(s+1, i) (F(S-1, i) on the last stage); W(s, i) needs I(s, i)
  transfers                     a send to another building is a fluid flow (verify.network) of pipelines x
                                b s h beta bytes that arrives after max(local cost, flow time + route latency);
                                a rank's sends to one peer run in order (one NCCL stream per rank pair), each
                                starting once the previous one has arrived, so a rank that produces sends faster
                                than the link carries them queues them rather than sharing the link between them
  comm stream of each rank      FSDP/HSDP all-gathers, prefetched: issued once the action two before the one
                                that needs it has finished, so each is in flight during the action before its
                                own (the second action's, once the first one's gathers are in: it runs during
                                the first action, not beside that action's gathers before it; a backward's
                                parameters are not fetched before the forward that frees them) (zero1 under
                                overlap_param_gather: before each
                                chunk's first F, which waits for StageWork.gather_wait_s of it; without it, the
                                rank's whole all-gather after its optimizer step); the DP reduction of each
                                chunk, layer by layer as its weight gradients become ready (comm finishes at
                                max(c0 + n d, t0 + max_i((i+1) delta + (n-i) d)), delta = window / n layers,
                                the window being the op that finalises the gradients (t0 its start)) when the
                                reduction overlaps (Workload.overlap_grad_reduce), queued behind the next op's
                                gathers (issued before it, at the end of the op before the finalising one; one NCCL
                                stream runs collectives in the order they are issued), else every chunk's reduction
                                after the rank's last op (window 0)
  across buildings              when a stage's cells sit in several buildings, the chunk's reduction joins all
                                patterns and then moves (G x_s + Q x_t) / D gradient copies s -> t (ring over
                                the B holders, 2 (B-1) latency steps); an all-gather moves, per op, the share of
                                each cell's shard group held in other buildings (none under HSDP when every
                                shard group of D / r cells stays in one building); zero1's parameter gather,
                                when it runs after the step, moves with the reduction (G = beta / g) ahead of
                                the optimizer step (step and gather run one after the other either way)
A heap orders finishing times; the fluid network reports flow completions between them.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from itertools import permutations

from scaleacross_milp.costmodel.actions import Action, unpaired_ops
from scaleacross_milp.costmodel.dp import exchange_connections
from scaleacross_milp.costmodel.network import route_queue_pairs
from scaleacross_milp.gcpause import paused_cycle_collection
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.topology import Topology
from scaleacross_milp.verify.network import Fabric, FluidNetwork
from scaleacross_milp.verify.workload import StageWork, Workload

FIXED, XFER, LAYERED = 0, 1, 2


@dataclass(frozen=True)
class Level:
    """Which effects a replay includes (the breakdown replays add them one by one)."""

    sends: bool = True
    dp_sync: bool = True
    all_gathers: bool = True
    optimizer: bool = True
    steady_transfers: bool = True
    """False: a cross-building send moves its bytes only for the first microbatch forward and the last one
    backward (the fill and drain the MILP prices); the others take their latency and local cost only."""


FULL = Level()


@dataclass
class Record:
    """One operation as it ran: for traces, plots and the breakdown."""

    track: str
    name: str
    category: str
    start: float
    finish: float


@dataclass
class Transfer:
    src: str
    dst: str
    nbytes: float
    subflows: int
    cap: float
    latency: float
    kind: str


@dataclass
class _Graph:
    kind: list[int] = field(default_factory=list)
    duration: list[float] = field(default_factory=list)
    preds: list[list[int]] = field(default_factory=list)
    meta: list[tuple[str, str, str]] = field(default_factory=list)
    transfer: dict[int, Transfer] = field(default_factory=dict)
    layered: dict[int, tuple[int, int | None, int, float, float]] = field(default_factory=dict)
    """LAYERED node -> (op producing the gradients, previous comm node, layers, seconds per layer, window)."""

    def add(self, kind: int, duration: float, track: str, name: str, category: str, preds=()) -> int:
        self.kind.append(kind)
        self.duration.append(duration)
        self.preds.append([p for p in preds if p is not None])
        self.meta.append((track, name, category))
        return len(self.kind) - 1


@dataclass
class ReplayResult:
    makespan_s: float
    records: list[Record]
    busiest_compute_s: float
    busiest_tp_cp_s: float
    busiest_ep_s: float
    busiest_track: str
    last_optimizer_s: float
    fabric: Fabric


def replay(workload: Workload, topology: Topology, level: Level = FULL) -> ReplayResult:
    """Run one iteration of every distinct pattern together on one network."""
    with paused_cycle_collection():
        network = FluidNetwork()
        fabric = Fabric(topology, workload.resolved.transports, network)
        builder = _Builder(workload, fabric, level)
        graph = builder.build()
        start, finish = _simulate(graph, network, fabric)
        records = [Record(*graph.meta[i], start[i], finish[i]) for i in range(len(graph.kind))]
    busiest = max(builder.compute_totals.items(), key=lambda item: item[1][0])
    optimizer = max((finish[i], graph.duration[i]) for i in builder.optimizer_nodes) if builder.optimizer_nodes \
        else (0.0, 0.0)
    return ReplayResult(max(finish, default=0.0), records, busiest[1][0], busiest[1][1], busiest[1][2], busiest[0],
                        optimizer[1], fabric)


class _Builder:
    def __init__(self, workload: Workload, fabric: Fabric, level: Level) -> None:
        self.w, self.fabric, self.level = workload, fabric, level
        self.r = workload.resolved
        self.g = _Graph()
        self.compute_totals: dict[str, tuple[float, float, float]] = {}
        self.optimizer_nodes: list[int] = []
        self.done: dict[tuple[int, int, str, int], int] = {}
        self.arrival: dict[tuple[int, str, int, int], int] = {}
        self.dp_done: dict[tuple[int, int], list[int]] = {}
        self.layered: dict[tuple[int, int], list[int]] = {}
        self.stream_end: dict[tuple[int, int], int] = {}
        self.pulls: dict[int, dict[tuple[str, str], float]] = {}
        self.channel: dict[tuple[int, int, int], int] = {}
        """(pattern, rank, peer rank) -> the last cross-building send on that channel (sends run in order)."""
        self.gather_channel: dict[tuple[int, int], tuple[int, ...]] = {}
        """(pattern, rank) -> the cross-building pulls of that rank's last all-gather: one communicator's
        collectives run in order, on the same connections (FSDP's all-gather stream), so a gather backed up behind a
        slow link waits for the one before it instead of adding subflows beside it."""

    def build(self) -> _Graph:
        for g in range(len(self.r.patterns)):
            for rank in range(self.r.actions.ranks):
                self._rank(g, rank)
        self._wire_data()
        if self.level.dp_sync:
            self._cross_building_sync()
        if self.level.optimizer:
            self._optimizers()
        return self.g

    # ---- per rank: compute stream, sends, comm stream -----------------------------------------------------
    def _track(self, g: int, rank: int) -> str:
        pattern = self.r.patterns[g]
        return f"p{g} x{pattern.pipelines} rank {rank} ({pattern.buildings[rank]})"

    def _subflows(self, src: str, dst: str, connections: int) -> tuple[int, int]:
        """(subflows, queue pairs per connection) of `connections` GPU connections src -> dst."""
        qp = route_queue_pairs(self.fabric.links[arc].link for arc in self.fabric.arcs[src, dst])
        return connections * qp, qp

    def _rank(self, g: int, rank: int) -> None:
        pattern, actions = self.r.patterns[g], self.r.actions
        building = pattern.buildings[rank]
        work = self.w.rank(building, rank)
        track, comm_track = self._track(g, rank), self._track(g, rank) + " comm"
        ops = actions.order[rank]
        unpaired = unpaired_ops(ops)
        last_backward = {a.stage: k for k, a in enumerate(ops) if a.kind in ("B", "W")}
        first_forward = {}
        for k, a in enumerate(ops):
            if a.kind == "F":
                first_forward.setdefault(a.stage, k)
        mode = self.r.variant.mode
        per_pass = mode in (DPMode.fsdp, DPMode.hsdp)
        at_first = mode is not DPMode.ddp and not self.w.params_at_end
        stream, comm = None, None
        compute_nodes: list[int] = []
        totals = [0.0, 0.0, 0.0]
        tail: list[int] = []
        first_gathers: tuple[int, ...] = ()
        finalised: tuple[int, StageWork, int, float] | None = None  # a chunk's reduction not yet queued (`_reduce`)
        for k, a in enumerate(ops):
            stage = work.stages[a.stage]
            gathers = []
            if self.level.all_gathers and (stage.all_gather_s > 0 or self._pull(rank)) and (
                    (per_pass and a.kind in ("F", "I", "B")) or (at_first and first_forward.get(a.stage) == k)):
                issue = (compute_nodes[k - 2],) if k >= 2 else first_gathers
                if stage.all_gather_s > 0:
                    comm = self.g.add(FIXED, stage.gather_wait_s, comm_track, f"all-gather {a.stage}", "dp",
                                      (comm, *issue))
                    gathers.append(comm)
                    if stage.all_gather_s > stage.gather_wait_s:
                        comm = self.g.add(FIXED, stage.all_gather_s - stage.gather_wait_s, comm_track,
                                          f"all-gather {a.stage} (behind the forward)", "dp", (comm,))
                gathers += self._cross_gathers(g, rank, a, issue)
            if finalised:  # behind this op's gathers: they were issued at the end of the op before the finalising one
                comm = self._reduce(rank, *finalised, comm, comm_track)
                tail.append(comm)
                finalised = None
            if k == 0:
                first_gathers = tuple(gathers)
            duration = stage.op_s(a.kind, k not in unpaired)
            tp_cp, ep = stage.comm_s(a.kind, k not in unpaired)
            totals = [totals[0] + duration - tp_cp - ep, totals[1] + tp_cp, totals[2] + ep]
            node = self.g.add(FIXED, duration, track, str(a), _category(a.kind), (stream, *gathers))
            compute_nodes.append(node)
            self.done[g, a.stage, a.kind, a.microbatch] = node
            stream = self._sends(g, rank, a, node, work.send_s, track)
            if self.level.dp_sync and last_backward.get(a.stage) == k and self.w.overlap_grad_reduce:
                finalised = (a.stage, stage, node, stage.op_s(a.kind))
        if finalised:
            tail.append(comm := self._reduce(rank, *finalised, comm, comm_track))
        if self.level.dp_sync and not self.w.overlap_grad_reduce:
            for chunk in sorted(last_backward, key=last_backward.get):
                comm = self._reduce(rank, chunk, work.stages[chunk], compute_nodes[-1], 0.0, comm, comm_track)
                tail.append(comm)
        self.compute_totals[track] = (totals[0], totals[1], totals[2])
        self.dp_done[g, rank] = tail
        self.stream_end[g, rank] = stream

    def _reduce(self, rank: int, chunk: int, work: StageWork, op: int, window: float, previous: int | None,
                track: str) -> int:
        """The comm-stream node reducing `chunk`'s gradients (`work`) after `previous`, layer by layer over the last
        `window` seconds of op `op` (window 0: all of it after `op`)."""
        node = self.g.add(LAYERED, 0.0, track, f"reduce {chunk}", "dp", (op, previous))
        self.g.layered[node] = (op, previous, work.layers, work.dp_s / max(1, work.layers), window)
        self.layered.setdefault((rank, chunk), []).append(node)
        return node

    def _sends(self, g: int, rank: int, a: Action, node: int, send_s: float, track: str) -> int:
        """Add the sends action `a` produces; returns the node that ends the rank's stream so far."""
        actions, pattern = self.r.actions, self.r.patterns[g]
        if a.kind == "F" and a.stage < actions.stages - 1:
            peer, direction = a.stage + 1, "fwd"
        elif a.kind in ("I", "B") and a.stage > 0:
            peer, direction = a.stage - 1, "bwd"
        else:
            return node
        dst_rank = actions.rank_of[peer]
        key = (g, direction, a.stage, a.microbatch)
        if dst_rank == rank or not self.level.sends:
            self.arrival[key] = node
            return node
        occupy = self.g.add(FIXED, send_s, track, f"send {direction} {a.stage}->{peer}", "send", (node,))
        src, dst = pattern.buildings[rank], pattern.buildings[dst_rank]
        if src == dst:
            self.arrival[key] = occupy
            return occupy
        shape, latency = self.r.layout.shape, self.fabric.latency_s[src, dst]
        name = f"{direction} {a.stage}->{peer} mb{a.microbatch}"
        fill_or_drain = a.microbatch == (0 if direction == "fwd" else actions.microbatches - 1)
        if not self.level.steady_transfers and not fill_or_drain:
            self.arrival[key] = self.g.add(FIXED, max(send_s, latency), f"link {src}->{dst}", name, "send", (node,))
            return occupy
        subflows, qp = self._subflows(src, dst, pattern.pipelines * shape.tp * shape.cp)
        nic = self.w.rank(src, rank).nic_byte_s
        transfer = Transfer(src, dst, pattern.pipelines * self.w.p2p_bytes, subflows, nic / qp, latency, "pp")
        xfer = self.g.add(XFER, send_s, f"link {src}->{dst}", name, "send",
                          (node, self.channel.get((g, rank, dst_rank))))
        self.channel[g, rank, dst_rank] = xfer
        self.g.transfer[xfer] = transfer
        self.arrival[key] = xfer
        return occupy

    def _pull(self, rank: int) -> dict[tuple[str, str], float]:
        """`shard_pull` of `rank`'s cells (cached): empty when they sit in one building or every shard group does."""
        if rank not in self.pulls:
            cells = self.r.cells(rank)
            self.pulls[rank] = shard_pull(cells, sum(cells.values()) // self.r.variant.replicas) if len(
                cells) > 1 else {}
        return self.pulls[rank]

    def _cross_gathers(self, g: int, rank: int, a: Action, preds) -> list[int]:
        """All-gather traffic this pattern's cells of `rank` pull from other buildings before action `a`: the
        building's share `shard_pull` of a parameter copy, split over its patterns by their cells; after `preds` and
        the rank's previous all-gather (`gather_channel`)."""
        pull = self._pull(rank)
        if not pull:
            return []
        cells = self.r.cells(rank)
        pattern, shape = self.r.patterns[g], self.r.layout.shape
        dst = pattern.buildings[rank]
        mine = pattern.pipelines / shape.ep
        stage = self.w.rank(dst, rank).stages[a.stage]
        nodes = []
        for src in cells:
            if src == dst or (src, dst) not in pull:
                continue
            nbytes = stage.grad_bytes_per_cell * self.w.gather_ratio * pull[src, dst] * mine / cells[dst]
            share = exchange_connections(cells[src], cells[dst]) * mine / cells[dst]
            subflows, qp = self._subflows(src, dst, max(1, round(share)) * shape.cell_gpus)
            transfer = Transfer(src, dst, nbytes, subflows, self.w.rank(dst, rank).nic_byte_s / qp,
                                self.fabric.latency_s[src, dst], "dp")
            node = self.g.add(XFER, 0.0, f"link {src}->{dst}", f"all-gather {a.stage} mb{a.microbatch}", "dp",
                              (*preds, *self.gather_channel.get((g, rank), ())))
            self.g.transfer[node] = transfer
            nodes.append(node)
        if nodes:
            self.gather_channel[g, rank] = tuple(nodes)
        return nodes

    # ---- data dependencies across ranks --------------------------------------------------------------------
    def _wire_data(self) -> None:
        last = self.r.actions.stages - 1
        for (g, stage, kind, mb), node in self.done.items():
            if kind == "F" and stage > 0:
                self.g.preds[node].append(self.arrival[g, "fwd", stage - 1, mb])
            elif kind in ("I", "B"):
                source = self.done[g, stage, "F", mb] if stage == last else self.arrival[g, "bwd", stage + 1, mb]
                self.g.preds[node].append(source)
            elif kind == "W":
                self.g.preds[node].append(self.done[g, stage, "I", mb])

    # ---- DP across buildings, optimizer ------------------------------------------------------------------
    def _cross_building_sync(self) -> None:
        shape = self.r.layout.shape
        mode = self.r.variant.mode
        if mode in (DPMode.ddp, DPMode.hsdp):
            phases = (1.0, 1.0)
        else:  # parameters gathered before the ops (`_cross_gathers`), or zero1's after the step, here
            phases = (self.w.gather_ratio if self.w.params_at_end else 0.0, 1.0)
        for (rank, stage), layered in self.layered.items():
            cells = self.r.cells(rank)
            if len(cells) < 2:
                continue
            total, holders = sum(cells.values()), len(cells)
            join = self.g.add(FIXED, 0.0, f"stage {rank} DP group", f"join {stage}", "dp", layered)
            ring_latency = 2 * (holders - 1) * max(self.fabric.latency_s[s, t] for s, t in permutations(cells, 2))
            grad = self.w.rank(next(iter(cells)), rank).stages[stage].grad_bytes_per_cell
            ends = []
            for s, t in permutations(cells, 2):
                nbytes = grad * (phases[0] * cells[s] + phases[1] * cells[t]) / total
                subflows, qp = self._subflows(s, t, exchange_connections(cells[s], cells[t]) * shape.cell_gpus)
                transfer = Transfer(s, t, nbytes, subflows, self.w.rank(s, rank).nic_byte_s / qp, ring_latency, "dp")
                node = self.g.add(XFER, 0.0, f"link {s}->{t}", f"DP sync stage {stage}", "dp", (join,))
                self.g.transfer[node] = transfer
                ends.append(node)
            for g, pattern in enumerate(self.r.patterns):
                if rank < len(pattern.buildings):
                    self.dp_done[g, rank] = self.dp_done[g, rank] + ends

    def _optimizers(self) -> None:
        """Each rank's optimizer step once its sends and DP sync are done; then, when the parameters are gathered
        at the end (zero1 without overlap_param_gather), every chunk's all-gather on the comm stream."""
        for (g, rank), stream in self.stream_end.items():
            work = self.w.rank(self.r.patterns[g].buildings[rank], rank)
            preds = [stream, *self.dp_done[g, rank]]
            node = self.g.add(FIXED, work.optimizer_s, self._track(g, rank), "optimizer", "optimizer", preds)
            self.optimizer_nodes.append(node)
            gather = sum(stage.all_gather_s for stage in work.stages.values())
            if self.w.params_at_end and self.level.all_gathers and gather > 0:
                self.g.add(FIXED, gather, self._track(g, rank) + " comm", "all-gather parameters", "dp", (node,))


def shard_pull(cells: dict[str, int], group: int) -> dict[tuple[str, str], float]:
    """(src, dst) -> share of one parameter copy building dst pulls from src per all-gather (hierarchical: once
    per building): sum over the shard groups G holding cells in both of cells_src(G) / group, the stage's cells
    laid out building by building (sorted names) in consecutive groups of `group` cells. One group (FSDP) gives
    cells_src / total; HSDP groups that each stay in one building give no pair at all."""
    owners = [name for name in sorted(cells) for _ in range(cells[name])]
    pull: dict[tuple[str, str], float] = {}
    for first in range(0, len(owners), group):
        held: dict[str, int] = {}
        for name in owners[first:first + group]:
            held[name] = held.get(name, 0) + 1
        for src, dst in permutations(held, 2):
            pull[src, dst] = pull.get((src, dst), 0.0) + held[src] / group
    return pull


def _category(kind: str) -> str:
    return {"F": "forward", "I": "backward-input", "W": "backward-weight", "B": "backward"}[kind]


def _simulate(graph: _Graph, network: FluidNetwork, fabric: Fabric) -> tuple[list[float], list[float]]:
    n = len(graph.kind)
    succ: list[list[int]] = [[] for _ in range(n)]
    waiting = [0] * n
    for node, preds in enumerate(graph.preds):
        for p in set(preds):
            succ[p].append(node)
            waiting[node] += 1
    start, finish = [math.nan] * n, [math.nan] * n
    heap: list[tuple[float, int]] = []
    flow_node: dict[int, int] = {}

    def begin(node: int, t: float) -> None:
        start[node] = t
        kind = graph.kind[node]
        if kind == XFER:
            tr = graph.transfer[node]
            fabric.record(tr.src, tr.dst, tr.nbytes, tr.kind)
            flow_node[node] = node
            classes = fabric.classes(tr.src, tr.dst, tr.subflows)
            network.add_flow(node, classes, tr.nbytes / tr.subflows, tr.cap)
        elif kind == LAYERED:
            op, prev, layers, d, window = graph.layered[node]
            op_start = finish[op] - window
            delta = window / layers
            comm_free = finish[prev] if prev is not None else -math.inf
            done = max(comm_free + layers * d, op_start + (layers * delta + d if delta >= d else delta + layers * d))
            heapq.heappush(heap, (max(t, done), node))
        else:
            heapq.heappush(heap, (t + graph.duration[node], node))

    for node in range(n):
        if waiting[node] == 0:
            begin(node, 0.0)
    while heap or network.pending:
        t_heap = heap[0][0] if heap else math.inf
        t_net = network.next_completion()
        if t_net < t_heap:
            for flow in network.advance(t_net):
                node = flow_node.pop(flow)
                tr = graph.transfer[node]
                heapq.heappush(heap, (max(start[node] + graph.duration[node], t_net + tr.latency), node))
            continue
        if math.isinf(t_heap):
            raise RuntimeError("replay stalled: flows without capacity")
        t, node = heapq.heappop(heap)
        for flow in network.advance(t):
            done = flow_node.pop(flow)
            tr = graph.transfer[done]
            heapq.heappush(heap, (max(start[done] + graph.duration[done], t + tr.latency), done))
        finish[node] = t
        for s in succ[node]:
            waiting[s] -= 1
            if waiting[s] == 0:
                begin(s, t)
    stuck = [graph.meta[i] for i in range(n) if math.isnan(finish[i])]
    if stuck:
        raise DeadlockError(f"the schedule deadlocks: {len(stuck)} operations never become ready, first: "
                            f"{stuck[0][1]} on {stuck[0][0]}")
    return start, finish


class DeadlockError(ValueError):
    """The action order cannot run: some operation waits on one that waits on it."""
