"""Chrome trace (chrome://tracing, Perfetto) of a replay: one track per simulated rank (compute stream and
comm stream), one per link direction, with compute, sends, collectives and idle gaps as complete events."""

from __future__ import annotations

from collections import defaultdict

from scaleacross_milp.verify.replay import Record

PROCESSES = {"rank": (1, "pipeline ranks"), "link": (2, "inter-building links"), "stage": (3, "DP groups")}


def idle_gaps(records: list[Record]) -> list[Record]:
    """Idle time between consecutive operations of each rank's compute stream."""
    by_track: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if " rank " in r.track and not r.track.endswith(" comm"):
            by_track[r.track].append(r)
    gaps = []
    for track, ops in by_track.items():
        ops.sort(key=lambda r: r.start)
        end = 0.0
        for op in ops:
            if op.start > end + 1e-9:
                gaps.append(Record(track, "idle", "idle", end, op.start))
            end = max(end, op.finish)
    return gaps


def chrome_trace(records: list[Record]) -> dict:
    """The trace as a JSON-ready dict (times in microseconds)."""
    tids: dict[str, int] = {}
    events: list[dict] = []
    for r in sorted(records + idle_gaps(records), key=lambda r: (r.track, r.start)):
        if r.finish - r.start <= 0 and r.category != "send":
            continue
        pid, _ = PROCESSES[_kind(r.track)]
        tid = tids.setdefault(r.track, len(tids) + 1)
        events.append({"name": r.name, "cat": r.category, "ph": "X", "ts": r.start * 1e6,
                       "dur": (r.finish - r.start) * 1e6, "pid": pid, "tid": tid})
    for track, tid in tids.items():
        pid, _ = PROCESSES[_kind(track)]
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": track}})
    for pid, label in PROCESSES.values():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": label}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _kind(track: str) -> str:
    if track.startswith("link "):
        return "link"
    if track.startswith("stage "):
        return "stage"
    return "rank"
