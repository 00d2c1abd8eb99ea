"""Per-rank operation order of every pipeline schedule, and torchtitan's pipeline-schedule CSV.

An action is (virtual stage, kind, microbatch); kinds: F forward, B full backward (= I + W), I backward-input,
W backward-weight. With p ranks and v chunks per rank there are S = p v virtual stages:
  loop map (GPipe, 1F1B, interleaved, ZB-H1)  stage s on rank s mod p
  V map (ZB-V, v = 2)                         stage s on rank s for s < p, 2p - 1 - s otherwise
Orders follow Megatron-LM (1F1B, interleaved), Qi et al. 2024 (ZB-H1) and torch.distributed.pipelining's
ScheduleZBVZeroBubble (ZB-V); interleaved and ZB-H1 equal torch's ScheduleInterleaved1F1B and (at one stage per
rank) ScheduleInterleavedZeroBubble (tests/verify/test_actions.py pins all three against torch's algorithms).
The CSV format is what `PipelineScheduleMulti._dump_csv` writes: one row per
rank, one action string per step (`0F0`, `1I3`, `2W3`, `1B0`; empty cells are idle steps; the lowered format's
communication actions SEND_F / RECV_F / SEND_B / RECV_B / UNSHARD / RESHARD are accepted and skipped: the
replay derives communication from the placement).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from scaleacross_milp.costmodel.schedule import loop_map, v_map
from scaleacross_milp.spec.jsonfile import InputError
from scaleacross_milp.spec.search import Schedule

COMPUTE = ("F", "B", "I", "W")
COMM = ("SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD")
ACTION = re.compile(r"^(\d+)(UNSHARD|RESHARD|SEND_F|RECV_F|SEND_B|RECV_B|F|B|I|W)(\d*)$")


@dataclass(frozen=True)
class Action:
    stage: int
    kind: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"


@dataclass(frozen=True)
class ScheduleActions:
    """Per-rank action lists with the virtual-stage -> rank map."""

    name: str
    ranks: int
    stages: int
    microbatches: int
    rank_of: tuple[int, ...]
    order: tuple[tuple[Action, ...], ...]
    merged: bool = False
    """Whether the steady state's forward-backward pairs run merged (ScheduleOption.merged)."""

    @property
    def chunks(self) -> int:
        return self.stages // self.ranks

    def stages_of(self, rank: int) -> list[int]:
        return [s for s in range(self.stages) if self.rank_of[s] == rank]


def unpaired_ops(order: tuple[Action, ...]) -> set[int]:
    """Positions in one rank's `order` of the ops no merged forward-backward pair holds (Megatron-core's
    overlap_moe_expert_parallel_comm, Training): walking the order, an op pairs with the next when one is a forward
    and the other a backward (B or I) of another (stage, microbatch), the backward not waiting on that forward. So
    interleaved 1F1B pairs each steady-state F(k + w) with B(k) and leaves its w warm-up forwards and w cool-down
    backwards alone; with one rank (F0 B0 F1 B1 ...) B(i) pairs with F(i + 1), leaving F0 and the last B."""
    alone, k = set(), 0
    while k < len(order):
        a, b = order[k], order[k + 1] if k + 1 < len(order) else None
        kinds = {a.kind, b.kind} if b is not None else set()
        if kinds in ({"F", "B"}, {"F", "I"}) and (a.stage, a.microbatch) != (b.stage, b.microbatch):
            k += 2
        else:
            alone.add(k)
            k += 1
    return alone


def _one_f_one_b(p: int, m: int, r: int, split: bool, delay_w: int) -> list[Action]:
    """1F1B on rank r (warmup p-1-r forwards); with `split`, B becomes I and W, each W deferred by
    `delay_w` microbatches (ZB-H1 defers r on rank r: the fill a rank skips is spent on W later, so the
    cool-down bubble shrinks to (p-1)(F+I-W))."""
    warmup = min(p - 1 - r, m)
    ops = [Action(r, "F", i) for i in range(warmup)]
    done_w = 0
    for i in range(m):
        if warmup + i < m:
            ops.append(Action(r, "F", warmup + i))
        if not split:
            ops.append(Action(r, "B", i))
            continue
        ops.append(Action(r, "I", i))
        if i - delay_w >= 0:
            ops.append(Action(r, "W", i - delay_w))
            done_w += 1
    ops += [Action(r, "W", i) for i in range(done_w, m)] if split else []
    return ops


def _interleaved(p: int, m: int, v: int, r: int, merged: bool = False) -> list[Action]:
    """Megatron-LM interleaved 1F1B: forward k runs chunk (k // p) % v of microbatch (k // (p v)) p + k % p,
    backward k the same with chunks reversed; warmup 2 (p - r - 1) + (v - 1) p forwards, one more when the pairs
    run `merged` (Megatron-core's overlap_moe_expert_parallel_comm)."""
    total = m * v

    def forward(k: int) -> Action:
        chunk = (k // p) % v
        return Action(chunk * p + r, "F", (k // (p * v)) * p + k % p)

    def backward(k: int) -> Action:
        chunk = v - 1 - (k // p) % v
        return Action(chunk * p + r, "B", (k // (p * v)) * p + k % p)

    warmup = min(2 * (p - r - 1) + (v - 1) * p + merged, total)
    ops = [forward(k) for k in range(warmup)]
    for k in range(total - warmup):
        ops += [forward(warmup + k), backward(k)]
    ops += [backward(k) for k in range(total - warmup, total)]
    return ops


def _zb_v(p: int, m: int, r: int) -> list[Action]:
    """ZB-V (torch ScheduleZBVZeroBubble): chunk 0 is stage r, chunk 1 stage 2p-1-r; built for at least 2p-1
    microbatches and then restricted to the real ones."""
    n = max(2 * p - 1, m)
    c0, c1 = r, 2 * p - 1 - r
    ops: list[Action] = []
    f0 = f1 = b0 = b1 = 0
    for _ in range(2 * (p - r) - 1):
        ops.append(Action(c0, "F", f0))
        f0 += 1
    for _ in range(r):
        ops += [Action(c1, "F", f1), Action(c0, "F", f0)]
        f1, f0 = f1 + 1, f0 + 1
    for _ in range(p - r):
        ops += [Action(c1, "F", f1), Action(c1, "I", b1), Action(c1, "W", b1)]
        f1, b1 = f1 + 1, b1 + 1
    while f1 < f0 or f0 < n:
        if f0 < n:
            ops.append(Action(c0, "F", f0))
            f0 += 1
        ops += [Action(c0, "I", b0), Action(c0, "W", b0)]
        b0 += 1
        ops += [Action(c1, "F", f1), Action(c1, "I", b1), Action(c1, "W", b1)]
        f1, b1 = f1 + 1, b1 + 1
    w0, w1 = b0, b1
    for _ in range(r):
        ops += [Action(c0, "I", b0), Action(c1, "I", b1)]
        b0, b1 = b0 + 1, b1 + 1
    for _ in range(p - r):
        ops += [Action(c0, "I", b0), Action(c0, "W", w0)]
        b0, w0 = b0 + 1, w0 + 1
    ops += [Action(c1, "W", i) for i in range(w1, b1)]
    ops += [Action(c0, "W", i) for i in range(w0, b0)]
    return [a for a in ops if a.microbatch < m]


@lru_cache(maxsize=64)
def build_actions(schedule: Schedule, p: int, m: int, v: int = 1, merged: bool = False) -> ScheduleActions:
    """The action lists of a named schedule (v is the interleave chunk count; ZB-V always has 2; `merged`:
    ScheduleOption.merged, one more warm-up forward under interleaving)."""
    if schedule is Schedule.gpipe:
        order = [[Action(r, "F", i) for i in range(m)] + [Action(r, "B", i) for i in range(m)] for r in range(p)]
        return _checked(ScheduleActions("gpipe", p, p, m, loop_map(p, 1), _freeze(order)))
    if schedule is Schedule.one_f_one_b:
        order = [_one_f_one_b(p, m, r, split=False, delay_w=0) for r in range(p)]
        return _checked(ScheduleActions("1f1b", p, p, m, loop_map(p, 1), _freeze(order), merged))
    if schedule is Schedule.zb_h1:
        order = [_one_f_one_b(p, m, r, split=True, delay_w=min(r, m)) for r in range(p)]
        return _checked(ScheduleActions("zb-h1", p, p, m, loop_map(p, 1), _freeze(order)))
    if schedule is Schedule.interleaved:
        if v < 2 or m % p:
            raise InputError(f"interleaved needs interleave >= 2 and microbatches ({m}) divisible by pp ({p})")
        order = [_interleaved(p, m, v, r, merged) for r in range(p)]
        return _checked(ScheduleActions(f"interleaved v={v}", p, p * v, m, loop_map(p, v), _freeze(order), merged))
    if schedule is Schedule.zb_v:
        order = [_zb_v(p, m, r) for r in range(p)]
        return _checked(ScheduleActions("zb-v", p, 2 * p, m, v_map(p), _freeze(order)))
    raise InputError(f"unknown schedule {schedule!r}")


@dataclass(frozen=True)
class GatherWindow:
    """What a steady-state op's parameter re-gather (FSDP / HSDP) overlaps: the gather is issued when the op two
    before ends (`verify.replay`), so it runs beside that op's sends, the op just before (`previous`, a virtual stage
    and kind) and its sends; `sends` counts those sends (each occupies the rank for one intra-building send)."""

    stage: int
    previous: tuple[int, str]
    sends: int


@lru_cache(maxsize=256)
def gather_windows(schedule: Schedule, p: int, m: int, v: int = 1,
                   merged: bool = False) -> tuple[tuple[tuple[GatherWindow, float], ...], ...]:
    """Per rank, each distinct `GatherWindow` of its ops that need a re-gather (every F, I and B) with how many there
    are per microbatch, over the rank's steady state (from its first backward to its last forward, per forward in
    it), or over its whole order but the first op (the start's gather) per microbatch when they do not interleave (as
    under GPipe, or 1F1B with no more microbatches than stages): a rank of 1F1B over 2 stages and 2 microbatches runs
    F0 F1 B0 B1, three windows for two microbatches, which per forward in them were three per microbatch and priced
    a TP 8 PP 2 FSDP layout split over two halls 23 % above its replay."""
    actions = build_actions(schedule, p, m, v, merged)
    last, rank_of = actions.stages - 1, actions.rank_of
    windows = []
    for rank, order in enumerate(actions.order):
        kinds = [a.kind for a in order]
        stages = [a.stage for a in order]
        peers = [s + 1 if k == "F" and s < last else s - 1 if k in ("I", "B") else -1
                 for k, s in zip(kinds, stages, strict=True)]
        sent = [int(0 <= peer <= last and rank_of[peer] != rank) for peer in peers]
        first = next(k for k, kind in enumerate(kinds) if kind in ("I", "B"))
        final = len(kinds) - 1 - kinds[::-1].index("F")
        span = range(max(1, first), final + 1) if first < final else range(1, len(kinds))
        found = Counter((stages[k], stages[k - 1], kinds[k - 1], (sent[k - 2] if k > 1 else 0) + sent[k - 1])
                        for k in span if kinds[k] != "W")
        per_microbatch = sum(kinds[k] == "F" for k in (span if first < final else range(len(kinds)))) / actions.chunks
        windows.append(tuple((GatherWindow(stage, (before, kind), sends), count / per_microbatch)
                             for (stage, before, kind, sends), count in found.items()) if per_microbatch else ())
    return tuple(windows)


def _freeze(order: list[list[Action]]) -> tuple[tuple[Action, ...], ...]:
    return tuple(tuple(ops) for ops in order)


def _checked(actions: ScheduleActions, where: str = "schedule") -> ScheduleActions:
    """Every (stage, microbatch) has exactly one F and one B or one I + one W, on the stage's rank."""
    problems = check_actions(actions)
    if problems:
        raise InputError(f"{where}: " + "; ".join(problems))
    return actions


def check_actions(actions: ScheduleActions, line_of: dict[int, int] | None = None) -> list[str]:
    """Problems with an action list: missing, duplicated or misplaced actions (rank r is CSV line r+1)."""
    line_of = line_of or {r: r + 1 for r in range(actions.ranks)}
    seen: dict[tuple[int, str, int], int] = {}
    problems = []
    for r, ops in enumerate(actions.order):
        for a in ops:
            if not 0 <= a.stage < actions.stages:
                problems.append(f"line {line_of[r]}: action {a} names stage {a.stage} (stages 0..{actions.stages - 1})")
            elif not 0 <= a.microbatch < actions.microbatches:
                problems.append(f"line {line_of[r]}: action {a} names microbatch {a.microbatch} "
                                f"(microbatches 0..{actions.microbatches - 1})")
            elif actions.rank_of[a.stage] != r:
                problems.append(f"line {line_of[r]}: action {a} runs stage {a.stage}, which rank "
                                f"{actions.rank_of[a.stage]} (line {line_of[actions.rank_of[a.stage]]}) holds")
            elif (a.stage, a.kind, a.microbatch) in seen:
                problems.append(f"line {line_of[r]}: action {a} is duplicated (first on line "
                                f"{seen[a.stage, a.kind, a.microbatch]})")
            else:
                seen[a.stage, a.kind, a.microbatch] = line_of[r]
    for s in range(actions.stages):
        line = line_of[actions.rank_of[s]]
        for mb in range(actions.microbatches):
            has = {k for k in COMPUTE if (s, k, mb) in seen}
            if "F" not in has:
                problems.append(f"line {line}: action {s}F{mb} is missing")
            if "B" in has and has & {"I", "W"}:
                problems.append(f"line {line}: stage {s} microbatch {mb} has both B and I/W")
            elif not has & {"B", "I", "W"}:
                problems.append(f"line {line}: action {s}B{mb} (or {s}I{mb} and {s}W{mb}) is missing")
            elif "B" not in has:
                problems += [f"line {line}: action {s}{k}{mb} is missing" for k in ("I", "W") if k not in has]
    return problems


def read_csv(path: Path, ranks: int, microbatches: int) -> ScheduleActions:
    """Read a compute-only (or lowered) pipeline-schedule CSV: row r lists rank r's actions in order."""
    try:
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if len(rows) != ranks:
        raise InputError(f"{path}: {len(rows)} ranks (rows) but the layout has pp = {ranks}")
    order: list[list[Action]] = []
    rank_of: dict[int, int] = {}
    for r, row in enumerate(rows):
        ops = []
        for col, cell in enumerate(row, start=1):
            text = cell.strip()
            if not text:
                continue
            match = ACTION.match(text)
            if match is None:
                raise InputError(f"{path}: line {r + 1}, column {col}: '{text}' is not an action "
                                 f"([stage][F|B|I|W][microbatch], e.g. 2F0)")
            stage, kind, mb = int(match[1]), match[2], match[3]
            if kind in COMM:
                continue
            if not mb:
                raise InputError(f"{path}: line {r + 1}, column {col}: '{text}' has no microbatch")
            if kind == "F" and rank_of.setdefault(stage, r) != r:
                raise InputError(f"{path}: line {r + 1}, column {col}: stage {stage} runs forwards on two ranks "
                                 f"(lines {rank_of[stage] + 1} and {r + 1})")
            ops.append(Action(stage, kind, int(mb)))
        order.append(ops)
    stages = max(rank_of, default=-1) + 1
    missing = [s for s in range(stages) if s not in rank_of]
    if not stages or missing:
        raise InputError(f"{path}: stages {missing or [0]} have no forward action")
    if stages % ranks:
        raise InputError(f"{path}: {stages} stages do not divide over {ranks} ranks")
    per_rank = [sum(1 for s in range(stages) if rank_of[s] == r) for r in range(ranks)]
    if len(set(per_rank)) > 1:
        raise InputError(f"{path}: ranks hold unequal numbers of stages {per_rank}")
    rank_map = tuple(rank_of[s] for s in range(stages))
    actions = ScheduleActions(f"custom ({path.name})", ranks, stages, microbatches, rank_map, _freeze(order))
    return _checked(actions, str(path))


def write_csv(actions: ScheduleActions, path: Path) -> None:
    """Write in the compute-only format read_csv accepts (one row per rank)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        for ops in actions.order:
            writer.writerow([str(a) for a in ops])
