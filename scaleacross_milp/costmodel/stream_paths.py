"""Paths of a pipeline schedule's dependency graph through one stage boundary: what a slow boundary costs.

The replay (`verify.replay`) runs each rank's ops in the schedule's order (`costmodel.actions`); a forward waits for
the previous virtual stage's activation, a backward (I or B) for the next stage's gradient, W for its I; a send
leaves after the op that produced it, and the sends from one rank to one peer cross one after another (one channel
per rank pair and direction). Any path through that graph bounds the makespan from below. With boundary b's
transfers weighted X (one microbatch's transfer plus latency) and every other transfer 0, the longest path for a
given X is a path of ops and b-transfers: its counts of each rank's F, I and W ops and of b-transfers make a linear
row, Tpipe >= sum_j (n_F[j] F + n_I[j] I + n_W[j] W) / (C v) Cst[j] + n_b (lat[b] + tx[b]), that holds whatever
the stage times are (the MILP's `stream_path` rows). Several X (a fast, a comparable and a slow boundary) give the
paths that bind in each regime; one pass over the graph runs every (boundary, X) at once.

For 1F1B, X large: p - 1 - b warm-up forwards cross b, then the gradients one after another, and while forwards
remain every two microbatches add one forward and one backward on ranks b and b + 1 (rank b's backward of
microbatch k precedes its forward of k + p - b; rank b + 1's forward of k + p - b precedes its backward of k + 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from scaleacross_milp.costmodel.actions import ScheduleActions, build_actions
from scaleacross_milp.spec.search import Schedule

WEIGHTS = (0.5, 2.0, 1000.0)
"""X, one b-transfer's time in units of a rank's nominal per-microbatch compute (F = I = W = 1/3 of it)."""
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
def stream_paths(schedule: Schedule, p: int, m: int, v: int) -> tuple[tuple[StreamPath, ...], ...]:
    """Per boundary b (between ranks b and b + 1), the distinct longest paths for the weights of WEIGHTS of
    `schedule` with p ranks, m microbatches and v chunks. Beyond STEADY_AFTER(p) microbatches the paths are those of
    fewer microbatches with their steady state repeated: the counts grow by the same amount every two
    microbatches (tests/costmodel/test_stream_paths.py checks it against the full graph); a path whose growth
    differs between the last two steps (the longest path switched branch) is left out. Interleaved 1F1B does
    not repeat that way; it gets paths only up to INTERLEAVED_OPS rank-microbatches (none beyond)."""
    if schedule is Schedule.interleaved and p * m > INTERLEAVED_OPS:
        return tuple(() for _ in range(p - 1))
    shorter = m if schedule is Schedule.interleaved else m - 2 * max(0, (m - steady_after(p, schedule)) // 2)
    found = _longest_paths(build_actions(schedule, p, shorter, v))
    if shorter < m:
        runs = [_longest_paths(build_actions(schedule, p, shorter - 2 * k, v)) for k in (1, 2)]
        found = [[_extend(path, old, (m - shorter) // 2) for path, old, older in zip(now, was, earlier, strict=True)
                  if _growth(path, old) == _growth(old, older)]
                 for now, was, earlier in zip(found, *runs, strict=True)]
    return tuple(tuple(sorted(set(found[b]), key=lambda path: path.crossings)) for b in range(p - 1))


def steady_after(p: int, schedule: Schedule) -> int:
    """Microbatches past which a schedule on p ranks is in its steady state at every rank."""
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
    """Run the orders once with finish times as vectors over scenarios (b, X); backtrack each scenario's path."""
    ranks, last, chunks = actions.ranks, actions.stages - 1, actions.chunks
    scenarios = (ranks - 1) * len(WEIGHTS)
    extra = np.zeros((ranks, scenarios))
    for b in range(ranks - 1):
        extra[b, b * len(WEIGHTS):(b + 1) * len(WEIGHTS)] = WEIGHTS
    zero = np.zeros(scenarios)
    finish: list[np.ndarray] = []
    preds: list[tuple[int, int]] = []
    chose: list[np.ndarray | None] = []
    info: list[tuple[int, str, int]] = []
    """Per node: (rank, kind, crossing); kind "X" for a transfer."""

    def add(start: np.ndarray, late: np.ndarray | None, first: int, second: int, info_: tuple) -> int:
        if late is None:
            finish.append(start)
            chose.append(None)
        else:
            later = late > start
            finish.append(np.where(later, late, start))
            chose.append(later)
        preds.append((first, second))
        info.append(info_)
        return len(finish) - 1

    arrival: dict[tuple[str, int, int], int] = {}
    channel: dict[tuple[int, int], int] = {}
    position, previous = [0] * ranks, [-1] * ranks
    left = sum(len(ops) for ops in actions.order)
    while left:
        progressed = False
        for rank in range(ranks):
            ops = actions.order[rank]
            while position[rank] < len(ops):
                a = ops[position[rank]]
                need = (("fwd", a.stage - 1, a.microbatch) if a.kind == "F" and a.stage > 0 else
                        ("bwd", a.stage + 1, a.microbatch) if a.kind in ("I", "B") and a.stage < last else None)
                if need is not None and need not in arrival:
                    break
                clock = finish[previous[rank]] if previous[rank] >= 0 else zero
                late = finish[arrival[need]] if need is not None else None
                node = add(clock, late, previous[rank], arrival[need] if need is not None else -1, (rank, a.kind, -1))
                finish[node] = finish[node] + NOMINAL[a.kind] * (1 + TIE_BREAK * (rank + 1)) / chunks
                previous[rank] = node
                _send(actions, rank, a, node, finish, add, arrival, channel, extra)
                position[rank] += 1
                left -= 1
                progressed = True
        if not progressed:
            raise ValueError(f"schedule {actions.name} deadlocks")
    ops_nodes = [n for n, (_, kind, _) in enumerate(info) if kind != "X"]
    ends = np.stack([finish[n] for n in ops_nodes]).argmax(axis=0)
    found: list[list[StreamPath]] = [[] for _ in range(ranks - 1)]
    for k in range(scenarios):
        b = k // len(WEIGHTS)
        counts = [[0, 0, 0] for _ in range(ranks)]
        crossings, node = 0, ops_nodes[ends[k]]
        while node >= 0:
            rank, kind, crossing = info[node]
            if kind == "X":
                crossings += crossing == b
            else:
                for part in ("I", "W") if kind == "B" else (kind,):
                    counts[rank][KINDS.index(part)] += 1
            later = chose[node]
            node = preds[node][1] if later is not None and later[k] else preds[node][0]
        found[b].append(StreamPath(tuple(tuple(c) for c in counts), crossings))
    return found


def _send(actions: ScheduleActions, rank: int, a, node: int, finish: list, add, arrival: dict, channel: dict,
          extra: np.ndarray) -> None:
    """Add the transfer op `a` (node `node`) sends, after the channel's previous one; record its arrival."""
    if a.kind == "F" and a.stage < actions.stages - 1:
        key, lower = ("fwd", a.stage, a.microbatch), a.stage
    elif a.kind in ("I", "B") and a.stage > 0:
        key, lower = ("bwd", a.stage, a.microbatch), a.stage - 1
    else:
        return
    peer = actions.rank_of[lower + 1 if lower == a.stage else lower]
    if peer == rank:
        arrival[key] = node
        return
    crossing = _crossing(actions, lower)
    busy = channel.get((rank, peer))
    xfer = add(finish[node], finish[busy] if busy is not None else None, node, busy if busy is not None else -1,
               (rank, "X", crossing))
    if crossing >= 0:
        finish[xfer] = finish[xfer] + extra[crossing]
    channel[rank, peer] = xfer
    arrival[key] = xfer
