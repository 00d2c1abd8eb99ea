"""Paths of a pipeline schedule's dependency graph through one stage boundary: what a slow boundary costs.

The replay (`verify.replay`) runs each rank's ops in the schedule's order (`costmodel.actions`); a forward waits for
the previous virtual stage's activation, a backward (I or B) for the next stage's gradient, W for its I; a send
leaves after the op that produced it, and the sends from one rank to one peer cross one after another (one channel
per rank pair and direction). Any path through that graph bounds the makespan from below. With boundary b's
transfers weighted X (one microbatch's transfer plus latency) and every other transfer 0, the longest path for a
given X is a path of ops and b-transfers: its counts of each rank's F, I and W ops and of b-transfers make a linear
row, Tpipe >= sum_j (n_F[j] F + n_I[j] I + n_W[j] W) / (C v) Cst[j] + n_b (lat[b] + tx[b]), that holds whatever
the stage times are (the MILP's `stream_path` rows). Several X (WEIGHTS) give the paths that bind in each regime;
one pass over the graph runs every (boundary, X) at once. The longest path is convex piecewise linear in X, and the
rows are exact at these X only, below it between them.

For 1F1B, X large: p - 1 - b warm-up forwards cross b, then the gradients one after another, and while forwards
remain every two microbatches add one forward and one backward on ranks b and b + 1 (rank b's backward of
microbatch k precedes its forward of k + p - b; rank b + 1's forward of k + p - b precedes its backward of k + 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from scaleacross_milp.costmodel.actions import ScheduleActions, build_actions
from scaleacross_milp.spec.search import Schedule

WEIGHTS = (0.125, 0.25, 0.5, 2.0, 1000.0)
"""X, one b-transfer's time in units of a rank's nominal per-microbatch compute (F = I = W = 1/3 of it): fast to
slow boundaries. 1/8 and 1/4 (a long link's latency against a microbatch of a few tens of ms) joined 1/2, 2 and 1000
in session 20: on generated small seed 20 (ZB-V over a 2,754 km link, X about 0.27) the rows for 1/2 left the MILP
3.7 % below the replay, 0.0 % with them; ZB-H1 at p = 32 keeps 92 paths instead of 61, a few dozen rows in models of
tens of thousands."""
NOMINAL = {"F": 1 / 3 + 1e-7, "I": 1 / 3 + 2e-7, "W": 1 / 3, "B": 2 / 3 + 2e-7}
TIE_BREAK = 1e-5
"""Rank r's ops last (1 + TIE_BREAK (r + 1)) times, and F, I a little longer than W: equally long paths otherwise
tie, and the one kept would switch as microbatches are added."""
KINDS = ("F", "I", "W")
INTERLEAVED_OPS = 4096
"""Most p x m for which interleaved schedules get stream paths (the full graph is run)."""


@dataclass(frozen=True)
class StreamPath:
    """Op counts per rank (F, I, W; a full backward B counts once as I and once as W) and b-transfers on a path."""

    ops: tuple[tuple[int, int, int], ...]
    crossings: int


@lru_cache(maxsize=256)
def stream_paths(schedule: Schedule, p: int, m: int, v: int,
                 merged: bool = False) -> tuple[tuple[StreamPath, ...], ...]:
    """Per boundary b (between ranks b and b + 1), the distinct longest paths for the weights of WEIGHTS of
    `schedule` with p ranks, m microbatches and v chunks (`merged`: ScheduleOption.merged's order). Beyond
    `steady_after`(p) microbatches the paths are those of
    fewer microbatches with their steady state repeated: the counts grow by the same amount every two
    microbatches (tests/costmodel/test_stream_paths.py checks it against the full graph); a path whose growth
    differs between the last two steps (the longest path switched branch) is left out. Interleaved 1F1B does
    not repeat that way; it gets paths only up to INTERLEAVED_OPS rank-microbatches (none beyond)."""
    graphs = _graphs(schedule, p, m)
    if not graphs:
        return tuple(() for _ in range(p - 1))
    found, *runs = [_graph_paths(schedule, p, n, v, merged) for n in graphs]
    if runs:
        found = [[_extend(path, old, (m - graphs[0]) // 2) for path, old, older in zip(now, was, earlier, strict=True)
                  if _growth(path, old) == _growth(old, older)]
                 for now, was, earlier in zip(found, *runs, strict=True)]
    return tuple(tuple(sorted(set(found[b]), key=lambda path: path.crossings)) for b in range(p - 1))


_GRAPHS: dict[tuple[Schedule, int, int, int, bool], list[list[StreamPath]]] = {}
"""`_graph_paths` so far: shapes with the same PP and any microbatch count past `steady_after` share three graphs."""
OP_S = 10e-6
"""Seconds per op of a graph's first run (`_dependency_graph` and `_longest_paths`: the orders built and checked, the
graph, the run and the backtracking) on 2 cores: what `graphs_s` charges (p = 32 over 200 microbatches, the three
graphs of 64-68: ZB-H1, 19,000 ops, 0.20 s; ZB-V, 38,000 ops, 0.39 s)."""


def _graph_paths(schedule: Schedule, p: int, m: int, v: int, merged: bool) -> list[list[StreamPath]]:
    """`_longest_paths` of the schedule's full graph, kept in _GRAPHS."""
    key = (schedule, p, m, v, merged)
    if key not in _GRAPHS:
        _GRAPHS[key] = _longest_paths(_dependency_graph(*key), v)
    return _GRAPHS[key]


def _graphs(schedule: Schedule, p: int, m: int) -> list[int]:
    """The microbatch counts of the graphs `stream_paths` runs (none for a large interleaved schedule)."""
    if schedule is Schedule.interleaved:
        return [] if p * m > INTERLEAVED_OPS else [m]
    shorter = m - 2 * max(0, (m - steady_after(p)) // 2)
    return [shorter] if shorter == m else [shorter, shorter - 2, shorter - 4]


def graphs_s(schedule: Schedule, p: int, m: int, v: int) -> float:
    """Seconds `stream_paths` takes for these arguments on its first call (OP_S per op of each graph it runs),
    whether or not its graphs are kept already: the search's work clock charges it once per solve, so what an
    earlier solve in the same process left kept does not change the steps (`milp.work`)."""
    ops = {Schedule.zb_h1: 3, Schedule.zb_v: 6}.get(schedule, 2 * v)
    return sum(OP_S * ops * p * n for n in _graphs(schedule, p, m))


def steady_after(p: int) -> int:
    """Microbatches past which a schedule on p ranks repeats its longest paths every two microbatches (checked against
    the full graph for every schedule but interleaved's at p of 2 to 16; `tests/costmodel/test_stream_paths.py`
    keeps p 3 and 5)."""
    return 2 * p + 4


def _growth(path: StreamPath, shorter: StreamPath) -> tuple:
    """What `path` adds over `shorter`."""
    return path.crossings - shorter.crossings, tuple(
        n - o for now, was in zip(path.ops, shorter.ops, strict=True) for n, o in zip(now, was, strict=True))


def _extend(path: StreamPath, shorter: StreamPath, times: int) -> StreamPath:
    """`path` with its growth over `shorter` (two microbatches fewer) repeated `times` more."""
    ops = tuple(tuple(n + times * (n - o) for n, o in zip(now, was, strict=True))
                for now, was in zip(path.ops, shorter.ops, strict=True))
    return StreamPath(ops, path.crossings + times * (path.crossings - shorter.crossings))


def _crossing(actions: ScheduleActions, lower: int) -> int:
    """The boundary the transfer between virtual stages lower and lower + 1 crosses (-1: the wrap from rank p - 1 to
    rank 0 of a looped schedule, or none)."""
    p, rank_of = actions.ranks, actions.rank_of
    if rank_of[lower] == rank_of[lower + 1] or (lower % p == p - 1 and rank_of[lower] == p - 1):
        return -1
    return min(rank_of[lower], rank_of[lower + 1])


def _longest_paths(graph: _Graph, v: int) -> list[list[StreamPath]]:
    """Per boundary b, the longest path of each weight of WEIGHTS on b's transfers (every other transfer free), at
    the nominal op times (`_run`, one scenario per (b, X))."""
    ranks, weights = graph.ranks, len(WEIGHTS)
    extra = np.zeros((ranks, (ranks - 1) * weights))
    for b in range(ranks - 1):
        extra[b, b * weights:(b + 1) * weights] = WEIGHTS

    def nominal(rank: int, kind: str) -> float:
        return NOMINAL[kind] * (1 + TIE_BREAK * (rank + 1)) / v

    found: list[list[StreamPath]] = [[] for _ in range(ranks - 1)]
    for k, (ops, crossings, _) in enumerate(_run(graph, nominal, extra)):
        found[k // weights].append(StreamPath(ops, crossings[k // weights]))
    return found


@dataclass(frozen=True)
class CriticalPath:
    """The longest path of a schedule's graph at given stage and transfer times: its length (s), op counts per rank
    (F, I, W) and transfers per boundary."""

    length_s: float
    ops: tuple[tuple[int, int, int], ...]
    crossings: tuple[int, ...]


CRITICAL_OPS = 65_536
"""The largest graph `critical_path` runs, counted as 3 p m v ops (F, I, W per chunk): p = 32, m = 69 ZB-H1 (6,624)
runs in 0.04 s on 2 cores the first time and 0.005 s once its graph is kept (`_dependency_graph`), p = 32, m = 113
ZB-V (21,696) in 0.10 s and 0.02 s, p = 32, m = 300 ZB-V (57,600) in 0.48 s and 0.04 s. (At 20,000, generated medium
seed 14's ZB-V plan, p = 32, m = 113 over stages of 2 and 4 layers, went uncut and was priced 4.5 % below its replay,
0.2 % cut.)"""


def critical_path(schedule: Schedule, p: int, m: int, v: int, merged: bool, stage_s: list[float],
                  shares: list[tuple[float, float, float]], transfer_s: list[float]) -> CriticalPath | None:
    """The longest path when rank j's F, I and W of one microbatch take shares[j] x stage_s[j] (over v chunks) and a
    transfer across boundary b takes transfer_s[b]; None for a graph beyond CRITICAL_OPS (or an interleaved order
    beyond INTERLEAVED_OPS rank-microbatches: they are not cut)."""
    if schedule is Schedule.interleaved and p * m > INTERLEAVED_OPS or 3 * p * m * v > CRITICAL_OPS:
        return None
    share = [dict(zip(KINDS, rank, strict=True)) | {"B": rank[1] + rank[2]} for rank in shares]

    def duration(rank: int, kind: str) -> float:
        return share[rank][kind] * stage_s[rank] / v

    extra = np.array(list(transfer_s) + [0.0])[:, None]
    ops, crossings, length = _run(_dependency_graph(schedule, p, m, v, merged), duration, extra)[0]
    return CriticalPath(length, ops, crossings)


@dataclass(frozen=True)
class _Graph:
    """A schedule's dependency graph, which depends on its orders only (not on op or transfer times). Nodes are
    numbered in the order the replay would start them (rank by rank, each as far as its messages allow); an op node
    waits for its rank's previous op and the message it needs, a transfer node for the op that sends it and the
    channel's previous transfer (`_run`)."""

    ranks: int
    rank: np.ndarray
    kind: np.ndarray
    """Index into KINDS, 3 for a full backward B, -1 for a transfer."""
    crossing: np.ndarray
    """The boundary a transfer crosses (-1: none, or an op)."""
    first: np.ndarray
    """The rank's previous op (an op) or the sending op (a transfer); -1: none."""
    second: np.ndarray
    """The message waited for (an op) or the channel's previous transfer (a transfer); -1: none."""
    levels: tuple[np.ndarray, ...]
    """Nodes by depth (one more than their predecessors' greatest): a level's nodes wait for earlier levels only, so
    each level is computed at once over every scenario."""
    last: np.ndarray
    """Each rank's last op, in node order."""


@lru_cache(maxsize=16)
def _dependency_graph(schedule: Schedule, p: int, m: int, v: int, merged: bool) -> _Graph:
    """`_Graph` of the schedule's orders (`build_actions`; a ValueError when they deadlock)."""
    actions = build_actions(schedule, p, m, v, merged)
    ranks = actions.ranks
    orders = [[_step(actions, rank, a) for a in ops] for rank, ops in enumerate(actions.order)]
    rank_of: list[int] = []
    kind_of: list[int] = []
    crossing_of: list[int] = []
    preds: list[tuple[int, int]] = []
    arrival: dict[tuple[str, int, int], int] = {}
    channel: dict[tuple[int, int], int] = {}
    position, previous = [0] * ranks, [-1] * ranks
    left = sum(len(ops) for ops in orders)
    while left:
        progressed = False
        for rank, ops in enumerate(orders):
            while position[rank] < len(ops):
                kind, need, send = ops[position[rank]]
                waited = arrival.get(need, -2) if need is not None else -1
                if waited == -2:
                    break
                preds.append((previous[rank], waited))
                rank_of.append(rank)
                kind_of.append(3 if kind == "B" else KINDS.index(kind))
                crossing_of.append(-1)
                node = previous[rank] = len(preds) - 1
                if send is not None:
                    key, peer, crossing = send
                    if peer == rank:
                        arrival[key] = node
                    else:
                        preds.append((node, channel.get((rank, peer), -1)))
                        rank_of.append(rank)
                        kind_of.append(-1)
                        crossing_of.append(crossing)
                        channel[rank, peer] = arrival[key] = len(preds) - 1
                position[rank] += 1
                left -= 1
                progressed = True
        if not progressed:
            raise ValueError(f"schedule {actions.name} deadlocks")
    level = [0] * len(preds)
    for node, (first, second) in enumerate(preds):
        level[node] = 1 + max(level[first] if first >= 0 else -1, level[second] if second >= 0 else -1)
    by_level = np.argsort(np.array(level), kind="stable")
    bounds = np.searchsorted(np.array(level)[by_level], np.arange(max(level) + 2))
    pred = np.array(preds, dtype=np.int64)
    kinds = np.array(kind_of)
    levels = tuple(by_level[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    return _Graph(ranks, np.array(rank_of), kinds, np.array(crossing_of), pred[:, 0], pred[:, 1], levels,
                  np.sort(np.array([last for last in previous if last >= 0], dtype=np.int64)))


def _run(graph: _Graph, duration: Callable[[int, str], float], extra: np.ndarray) -> list[tuple]:
    """Finish times of every node of the schedule's graph (`_dependency_graph`) over scenarios (columns of `extra`:
    each boundary's transfer time per scenario; `duration(rank, kind)` an op's time), level by level; then each
    scenario's longest path, backtracked from the rank's last op that finishes last (the first such in node order;
    ops take positive times, so no earlier op of a rank finishes with its last): at a node with two predecessors,
    the second (the message, or the channel's previous transfer) when it finished strictly later, else the first.
    Per scenario: (op counts per rank, transfers per boundary, length)."""
    ranks, scenarios, nodes = graph.ranks, extra.shape[1], len(graph.rank)
    if not scenarios:  # one rank: no boundary to weigh
        return []
    names = (*KINDS, "B")
    per_op = np.array([[duration(rank, kind) for kind in names] for rank in range(ranks)])
    time_s = np.zeros((nodes, scenarios))
    is_op = graph.kind >= 0
    time_s[is_op] = per_op[graph.rank[is_op], graph.kind[is_op]][:, None]
    crossed = ~is_op & (graph.crossing >= 0)
    time_s[crossed] = extra[graph.crossing[crossed]]
    finish = np.zeros((nodes + 1, scenarios))  # row `nodes`: a missing predecessor, finished at 0
    first = np.where(graph.first >= 0, graph.first, nodes)
    second = np.where(graph.second >= 0, graph.second, nodes)
    later = np.zeros((nodes, scenarios), dtype=bool)  # the longest path to the node comes through its second
    only_second = (graph.second >= 0) & (graph.first < 0)
    for level in graph.levels:
        before, waited = finish[first[level]], finish[second[level]]
        finish[level] = np.maximum(before, waited) + time_s[level]
        later[level] = (waited > before) & (graph.second[level] >= 0)[:, None] | only_second[level][:, None]
    columns = np.arange(scenarios)
    ends = graph.last[finish[graph.last].argmax(axis=0)]
    lengths = finish[ends, columns]
    visits, at_nodes = [], []
    node = ends.copy()
    while (active := np.flatnonzero(node >= 0)).size:
        at = node[active]
        visits.append(active)
        at_nodes.append(at)
        node[active] = np.where(later[at, active], graph.second[at], graph.first[at])
    visit, at = np.concatenate(visits), np.concatenate(at_nodes)
    kind = graph.kind[at]
    op = kind >= 0
    counts = np.bincount((visit[op] * ranks + graph.rank[at[op]]) * 4 + kind[op],
                         minlength=scenarios * ranks * 4).reshape(scenarios, ranks, 4)
    counts = counts[..., :3] + counts[..., 3:] * np.array([0, 1, 1])  # a full backward counts as I and as W
    crossings = np.bincount(visit[~op] * ranks + graph.crossing[at[~op]] % ranks,
                            minlength=scenarios * ranks).reshape(scenarios, ranks)  # column ranks - 1: no boundary
    return [(tuple(map(tuple, counts[k].tolist())), tuple(crossings[k, :ranks - 1].tolist()), float(lengths[k]))
            for k in range(scenarios)]


def _step(actions: ScheduleActions, rank: int, a) -> tuple[str, tuple | None, tuple | None]:
    """(kind, the message op `a` waits for, (key, peer rank, boundary crossed or -1) of the message it sends) of
    rank `rank`'s op `a`."""
    last = actions.stages - 1
    need = (("fwd", a.stage - 1, a.microbatch) if a.kind == "F" and a.stage > 0 else
            ("bwd", a.stage + 1, a.microbatch) if a.kind in ("I", "B") and a.stage < last else None)
    if a.kind == "F" and a.stage < last:
        key, lower = ("fwd", a.stage, a.microbatch), a.stage
    elif a.kind in ("I", "B") and a.stage > 0:
        key, lower = ("bwd", a.stage, a.microbatch), a.stage - 1
    else:
        return a.kind, need, None
    peer = actions.rank_of[lower + 1 if lower == a.stage else lower]
    return a.kind, need, (key, peer, _crossing(actions, lower))
