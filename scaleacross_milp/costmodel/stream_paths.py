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
OP_S = 12e-6
"""Seconds per op of a graph run (`_longest_paths`, its transfers and backtracking included) on 2 cores: what
`pending_s` predicts (p = 32: a ZB-H1 graph of 69 microbatches, 6,624 ops, runs in 0.08-0.11 s)."""


def _graph_paths(schedule: Schedule, p: int, m: int, v: int, merged: bool) -> list[list[StreamPath]]:
    """`_longest_paths` of the schedule's full graph, kept in _GRAPHS."""
    key = (schedule, p, m, v, merged)
    if key not in _GRAPHS:
        _GRAPHS[key] = _longest_paths(build_actions(schedule, p, m, v, merged))
    return _GRAPHS[key]


def _graphs(schedule: Schedule, p: int, m: int) -> list[int]:
    """The microbatch counts of the graphs `stream_paths` runs (none for a large interleaved schedule)."""
    if schedule is Schedule.interleaved:
        return [] if p * m > INTERLEAVED_OPS else [m]
    shorter = m - 2 * max(0, (m - steady_after(p)) // 2)
    return [shorter] if shorter == m else [shorter, shorter - 2, shorter - 4]


def pending_s(schedule: Schedule, p: int, m: int, v: int, merged: bool = False) -> float:
    """Predicted seconds `stream_paths` still needs for these arguments (0 once its graphs are kept)."""
    ops = {Schedule.zb_h1: 3, Schedule.zb_v: 6}.get(schedule, 2 * v)
    return sum(OP_S * ops * p * n for n in _graphs(schedule, p, m) if (schedule, p, n, v, merged) not in _GRAPHS)


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


def _longest_paths(actions: ScheduleActions) -> list[list[StreamPath]]:
    """Per boundary b, the longest path of each weight of WEIGHTS on b's transfers (every other transfer free), at
    the nominal op times (`_run`, one scenario per (b, X))."""
    ranks, weights = actions.ranks, len(WEIGHTS)
    extra = np.zeros((ranks, (ranks - 1) * weights))
    for b in range(ranks - 1):
        extra[b, b * weights:(b + 1) * weights] = WEIGHTS

    def nominal(rank: int, kind: str) -> float:
        return NOMINAL[kind] * (1 + TIE_BREAK * (rank + 1)) / actions.chunks

    found: list[list[StreamPath]] = [[] for _ in range(ranks - 1)]
    for k, (ops, crossings, _) in enumerate(_run(actions, nominal, extra)):
        found[k // weights].append(StreamPath(ops, crossings[k // weights]))
    return found


@dataclass(frozen=True)
class CriticalPath:
    """The longest path of a schedule's graph at given stage and transfer times: its length (s), op counts per rank
    (F, I, W) and transfers per boundary."""

    length_s: float
    ops: tuple[tuple[int, int, int], ...]
    crossings: tuple[int, ...]


CRITICAL_OPS = 20_000
"""The largest graph `critical_path` runs, counted as 3 p m v ops (F, I, W per chunk): p = 32, m = 69 ZB-H1 (6,624)
runs in 0.045 s on 2 cores, p = 16, m = 32 ZB-V in 0.03 s."""


def critical_path(schedule: Schedule, p: int, m: int, v: int, merged: bool, stage_s: list[float],
                  shares: tuple[float, float, float], transfer_s: list[float]) -> CriticalPath | None:
    """The longest path when rank j's F, I and W of one microbatch take shares x stage_s[j] (over v chunks) and a
    transfer across boundary b takes transfer_s[b]; None for a graph beyond CRITICAL_OPS (or an interleaved order
    beyond INTERLEAVED_OPS rank-microbatches: they are not cut)."""
    if schedule is Schedule.interleaved and p * m > INTERLEAVED_OPS or 3 * p * m * v > CRITICAL_OPS:
        return None
    actions = build_actions(schedule, p, m, v, merged)
    share = dict(zip(KINDS, shares, strict=True)) | {"B": shares[1] + shares[2]}

    def duration(rank: int, kind: str) -> float:
        return share[kind] * stage_s[rank] / v

    extra = np.array(list(transfer_s) + [0.0])[:, None]
    ops, crossings, length = _run(actions, duration, extra)[0]
    return CriticalPath(length, ops, crossings)


def _run(actions: ScheduleActions, duration: Callable[[int, str], float], extra: np.ndarray) -> list[tuple]:
    """Run the orders once with finish times as vectors over scenarios (columns of `extra`: each boundary's transfer
    time per scenario; `duration(rank, kind)` an op's time); backtrack each scenario's path (at a node with two
    predecessors, the later one: the rank's previous op or the data it waited for). Per scenario: (op counts per
    rank, transfers per boundary, length)."""
    ranks, scenarios = actions.ranks, extra.shape[1]
    zero = np.zeros(scenarios)
    finish: list[np.ndarray] = []
    preds: list[tuple[int, int]] = []
    info: list[tuple[int, str, int]] = []
    """Per node: (rank, kind, crossing); kind "X" for a transfer."""
    orders = [[(kind, duration(rank, kind), need, send) for kind, need, send in (_step(actions, rank, a) for a in ops)]
              for rank, ops in enumerate(actions.order)]
    arrival: dict[tuple[str, int, int], int] = {}
    channel: dict[tuple[int, int], int] = {}
    position, previous = [0] * ranks, [-1] * ranks
    left = sum(len(ops) for ops in orders)
    while left:
        progressed = False
        for rank, ops in enumerate(orders):
            while position[rank] < len(ops):
                kind, time_s, need, send = ops[position[rank]]
                waited = arrival.get(need, -2) if need is not None else -1
                if waited == -2:
                    break
                before = previous[rank]
                start = finish[before] if before >= 0 else zero
                if waited >= 0:
                    start = np.maximum(start, finish[waited])
                finish.append(start + time_s)
                preds.append((before, waited))
                info.append((rank, kind, -1))
                node = previous[rank] = len(finish) - 1
                if send is not None:
                    key, peer, crossing = send
                    if peer == rank:
                        arrival[key] = node
                    else:
                        busy = channel.get((rank, peer), -1)
                        start = finish[node] if busy < 0 else np.maximum(finish[node], finish[busy])
                        finish.append(start + extra[crossing] if crossing >= 0 else start)
                        preds.append((node, busy))
                        info.append((rank, "X", crossing))
                        channel[rank, peer] = arrival[key] = len(finish) - 1
                position[rank] += 1
                left -= 1
                progressed = True
        if not progressed:
            raise ValueError(f"schedule {actions.name} deadlocks")
    ops_nodes = [n for n, (_, kind, _) in enumerate(info) if kind != "X"]
    ends = np.stack([finish[n] for n in ops_nodes]).argmax(axis=0)
    paths = []
    for k in range(scenarios):
        counts = [[0, 0, 0] for _ in range(ranks)]
        crossings, node = [0] * (ranks - 1), ops_nodes[ends[k]]
        while node >= 0:
            rank, kind, crossing = info[node]
            if kind == "X":
                if crossing >= 0:
                    crossings[crossing] += 1
            else:
                for part in ("I", "W") if kind == "B" else (kind,):
                    counts[rank][KINDS.index(part)] += 1
            first, second = preds[node]
            node = second if second >= 0 and (first < 0 or finish[second][k] > finish[first][k]) else first
        paths.append((tuple(tuple(c) for c in counts), tuple(crossings), float(finish[ops_nodes[ends[k]]][k])))
    return paths


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
