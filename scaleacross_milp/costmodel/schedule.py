"""Pipeline-schedule formulas shared by the MILP and the verifier.

With p ranks, m microbatches and per-rank time C = F + B + W per microbatch (F forward, B backward-input,
W backward-weight), the schedules differ in bubble, stage-boundary crossings and activations in flight:

| schedule    | bubble / ((p-1) C)          | crossings per boundary | wrap crossings | in flight at rank r      |
|-------------|-----------------------------|------------------------|----------------|--------------------------|
| GPipe       | 1                           | 1                      | 0              | m                        |
| 1F1B        | 1                           | 1                      | 0              | p - r                    |
| interleaved | 1 / v                       | v                      | v - 1          | (2(p-r-1) + (v-1)p + 1)/v |
| ZB-H1       | (F + B - W) / C             | 1                      | 0              | p - r                    |
| ZB-V        | (F + B - 2W) / (2C)         | 2                      | 0              | p                        |

(ZB-H1 / ZB-V bubbles from Qi et al., "Zero Bubble Pipeline Parallelism", with op times per chunk; in-flight
counts are capped at m.) A wrap crossing is interleaving's hop from the last rank back to rank 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from scaleacross_milp.costmodel.costs import OpTimes
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import Schedule
from scaleacross_milp.spec.training import Training


@lru_cache(maxsize=1024)
def loop_map(p: int, v: int) -> tuple[int, ...]:
    """Virtual stage s of p * v on rank s mod p (1F1B, GPipe, ZB-H1, interleaved)."""
    return tuple(s % p for s in range(p * v))


@lru_cache(maxsize=1024)
def v_map(p: int) -> tuple[int, ...]:
    """Virtual stage s of 2p on rank s for s < p and on rank 2p - 1 - s above (ZB-V)."""
    return tuple(s if s < p else 2 * p - 1 - s for s in range(2 * p))


def flow_coefficients(share: float, piece: float) -> tuple[tuple[float, float], ...]:
    """(a, b) of the rows a R_in + b R_x whose largest is the time chunks of `piece` of a stage each, `share` of it in
    all, take to reduce inside their buildings (R_in for the stage) and then across (R_x), each chunk's cross-building
    part after its own intra-building one and beside the next chunk's, a two-stage flow of equal jobs:
    share max(R_in, R_x) + piece min(R_in, R_x) (one row when share = piece: R_in + R_x for one chunk)."""
    return tuple(dict.fromkeys(((share, piece), (piece, share))))


@dataclass(frozen=True)
class ScheduleOption:
    """A schedule with its chunks per rank (v for interleaved, 2 for ZB-V, 1 otherwise), and whether its steady-state
    forwards and backwards run merged in pairs (`merged`: Training.overlap_moe_expert_parallel_comm on a shape with
    EP > 1, `overlaps_ep`), which under interleaving takes one more warm-up forward, as Megatron-core does so that
    each pair's forward and backward belong to different microbatches, and under 1F1B on one rank holds two
    microbatches (the forward of one beside the backward of the one before)."""

    schedule: Schedule
    chunks: int = 1
    merged: bool = False

    def label(self) -> str:
        return f"{self.schedule.value} v={self.chunks}" if self.schedule is Schedule.interleaved else (
            self.schedule.value
        )

    def stage_map(self, p: int) -> tuple[int, ...]:
        """The rank of each virtual stage: ZB-V's V map (s on rank s for s < p, 2p - 1 - s above, as torch's
        ScheduleZBVZeroBubble), else the loop map (s on rank s mod p)."""
        if self.schedule is Schedule.zb_v:
            return v_map(p)
        return loop_map(p, self.chunks)

    def bubble_coefficient(self, layer: OpTimes) -> float:
        """Bubble time as a multiple of (p - 1) x the per-rank time of one microbatch."""
        f, b, w = layer.forward_s, layer.backward_input_s, layer.backward_weight_s
        c = f + b + w
        if self.schedule is Schedule.interleaved:
            return 1.0 / self.chunks
        if self.schedule is Schedule.zb_h1:
            return max(0.0, f + b - w) / c
        if self.schedule is Schedule.zb_v:
            return max(0.0, f + b - 2 * w) / (2 * c)
        return 1.0

    def has_rank_paths(self, p: int) -> bool:
        """Whether `rank_paths` bound this option's bubble on p ranks (ZB-H1 with p > 1)."""
        return self.schedule is Schedule.zb_h1 and p > 1

    def rank_paths(self, p: int, m: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """Per rank r, the (F, I, W) ops per rank of the longest path of ZB-H1's graph (`costmodel.actions`) through
        all of r's ops but its warm-up forwards, transfers aside: microbatch 0's forwards on the ranks before r,
        its round trip through the ranks after r (each one F and one I), then r's remaining ops back to back. Any
        path bounds the makespan from below; these are the longest ones at equal stage times and when one rank is
        clearly the slowest (tests/costmodel/test_rank_paths.py checks them against the replayed graph; at stage
        times a few per cent apart a path through two ranks' steady states can be longer, which `milp.path_cuts`
        cuts). None under the other schedules, whose bubble is `bubble_coefficient`'s."""
        if not self.has_rank_paths(p):
            return ()
        return tuple(tuple((1, 0, 0) if j < r else (m - (p - 1 - r), m, m) if j == r else (1, 1, 0)
                           for j in range(p)) for r in range(p))

    @property
    def boundary_crossings(self) -> int:
        """Times one microbatch crosses each stage boundary per direction."""
        if self.schedule is Schedule.interleaved:
            return self.chunks
        return 2 if self.schedule is Schedule.zb_v else 1

    @property
    def wrap_crossings(self) -> int:
        """Times one microbatch hops from the last rank back to rank 0 per direction."""
        return self.chunks - 1 if self.schedule is Schedule.interleaved else 0

    def reduction_suffixes(self, p: int, layer: OpTimes, rank: int = 0) -> tuple[tuple[float, float], ...]:
        """(share, credit) per suffix of the chunks whose gradients `rank` reduces last: the last chunks of the
        suffix hold a share of its DP reduction that can hide behind `credit` x its stage's time per microbatch
        (F + I + W of all its chunks), the ops the rank runs after the suffix's first chunk's gradients start to
        become final. Each chunk reduces once the op that finalises it ends (fused backward I + W, or W when the
        schedule splits it off), overlapping that op layer by layer; the exposed reduction is at least
        max_i share_i R - credit_i C (R the reduction's time, C the stage's time per microbatch). From the orders
        of costmodel.actions (f, i, w: a layer's op times, c = f + i + w):
          interleaved  the cool-down runs the last p microbatches chunk by chunk (Megatron's groups of p), so the
                       j-th of v chunks from the end finishes j p chunk-backwards before the last:
                       ((j + 1) / v, (j p + 1) (i + w) / (v c)) for j < v
          ZB-V         rank 0's last chunk (virtual stage 0, the embedding's) runs p I and W after the last W of
                       its other chunk (virtual stage 2p - 1, the LM head's):
                       (1/2, w / (2 c)) and (1, (p (i + w) + w) / (2 c));
                       rank r > 0 runs only r W of its last chunk (virtual stage r) after the W finalising its other
                       one (virtual stage 2p - 1 - r): (1/2, w / (2 c)) and (1, (r + 1) w / (2 c)), rank 1 the least
          others       one chunk, the whole reduction behind the last op: (1, (i + w) / c), ZB-H1 (1, w / c);
                       every rank alike.
        R holds the embedding's and the LM head's own collectives (`formulation.iteration._stage_curves`); with both
        on rank 0 (ZB-V) and of one size, each chunk holds half of R. Under interleaving the suffixes take R in equal
        chunks; the embedding's whole collective sits in the last one, which the MILP adds as a row of its own
        (`formulation.iteration.add_dp_overlap`, dp_embedding_last)."""
        f, i, w = layer.forward_s, layer.backward_input_s, layer.backward_weight_s
        c = f + i + w
        if self.schedule is Schedule.interleaved:
            v = self.chunks
            return tuple(((j + 1) / v, (j * p + 1) * (i + w) / (v * c)) for j in range(v))
        if self.schedule is Schedule.zb_v:
            return (0.5, w / (2 * c)), (1.0, ((p * (i + w) if rank == 0 else rank * w) + w) / (2 * c))
        return ((1.0, (w if self.schedule is Schedule.zb_h1 else i + w) / c),)

    def regathers_behind_suffixes(self, p: int) -> tuple[int, ...]:
        """Per suffix of rank 0's `reduction_suffixes`, how many ops needing a parameter gather every rank still runs
        after the suffix's first chunk starts to finalise, beyond one already prefetched (FSDP re-gathers before each
        forward and backward, issued two ops ahead): under interleaving rank 0 runs j p chunk-backwards after the
        j-th suffix's first op and rank r < p ends r of them earlier, so (j - 1) p of them (none below 0); none
        under the other schedules (one chunk, whose window is its last op; ZB-V's later ranks run only weight
        backwards after their last chunk's)."""
        if self.schedule is not Schedule.interleaved:
            return (0,) * (2 if self.schedule is Schedule.zb_v else 1)
        return tuple(max(0, (j - 1) * p) for j in range(self.chunks))

    def drain_lead(self, layer: OpTimes, rank: int) -> tuple[float, float, float] | None:
        """(a, b, k): rank 0's last op ends at least a sum_{r < j} C_r + b C_0 - k C_j after the last op of rank
        j = `rank` > 0 (C_r: rank r's stage time per microbatch). The last microbatch's backward runs from rank j
        down to rank 0 (I, or the fused B: a), rank 0 closing with what its order runs after it (b) and rank j with
        k of its own (from the orders of costmodel.actions; i, w: a layer's input and weight backward, c its F + I + W):
          1F1B, GPipe  the last op is B(m - 1) on every rank: a = (i + w) / c, b = k = 0
          ZB-H1        rank j defers its W by j microbatches, so j + 1 W follow its last I: a = i / c, b = w / c,
                       k = (j + 1) w / c
          ZB-V         rank j follows its last I (virtual stage j) with 2 j + 1 W, rank 0 closes with its W:
                       a = i / (2 c), b = w / (2 c), k = (2 j + 1) w / (2 c) (where i < 2 w, at equal stages rank j
                       ends j (2 w - i) / (2 c) C after rank 0, rank p - 1 last: `lags`)
          interleaved  None (every rank ends its chunks p chunk-backwards apart, as rank 0 does).
        At equal stages rank j leads by a j C + b C - k C, which can be negative under ZB-H1 (i < w): the MILP takes
        it at 0 then, and as it is under ZB-V (`formulation.iteration.add_drain_leads`)."""
        i, w, c = layer.backward_input_s, layer.backward_weight_s, layer.total_s
        if self.schedule in (Schedule.one_f_one_b, Schedule.gpipe):
            return (i + w) / c, 0.0, 0.0
        if self.schedule is Schedule.zb_h1:
            return i / c, w / c, (rank + 1) * w / c
        if self.schedule is Schedule.zb_v:
            return i / (2 * c), w / (2 * c), (2 * rank + 1) * w / (2 * c)
        return None

    def chunk_forward_share(self, layer: OpTimes) -> float:
        """f / (v (f + i + w)): one chunk's forward as a share of a rank's time per microbatch, the op before a later
        chunk's first forward, which its parameter gather hides behind (`formulation.iteration.add_chunk_gather_waits`,
        `milp.bounds.fill_gathers_floor_s`)."""
        return layer.forward_s / (self.chunks * layer.total_s)

    @property
    def lags(self) -> bool:
        """Whether rank 0 can end before the pipeline's last op by the drain lead of rank p - 1 when negative
        (`drain_lead`; ZB-V: at equal stages rank j ends j (2 w - i) / (2 c) C after rank 0 when i < 2 w), which the
        MILP then takes off rank 0's DP reduction and lets every rank's lead be negative
        (`formulation.iteration.add_rank_zero_lag`)."""
        return self.schedule is Schedule.zb_v

    @property
    def reduction_piece(self) -> float | None:
        """One chunk's share of a rank's DP reduction when its chunks reduce inside their buildings and then across
        one after another, a two-stage flow (`flow_coefficients`): 1 / v under interleaving and ZB-V, whose rank 0
        finalises its chunks apart (interleaving p chunk-backwards, ZB-V p I and W: `reduction_suffixes`), so one
        chunk's cross-building part runs beside the next one's intra-building part; None with one chunk. (Priced as
        one block under ZB-V, generated medium seed 102's plan, 104 replicas of 4 stages over two buildings, took
        rank 0's 125 ms intra-building reduction and all 85 ms of the busiest link's after it, 52 ms over the
        replay, whose head chunk's cross-building part runs while the embedding's chunk reduces inside.)"""
        return 1.0 / self.chunks if self.schedule in (Schedule.interleaved, Schedule.zb_v) else None

    def reduction_rows(self, p: int, layer: OpTimes) -> tuple[tuple[float, float, float], ...]:
        """(a, b, credit) per row a R_in + b R_x - credit C0, the largest of which is rank 0's exposed DP reduction:
        per suffix of `reduction_suffixes`, share (R_in + R_x), or its chunks' two-stage flow
        (`flow_coefficients`, `reduction_piece`)."""
        return tuple(dict.fromkeys((a, b, credit) for share, credit in self.reduction_suffixes(p, layer)
                                   for a, b in flow_coefficients(share, self.reduction_piece or share)))

    def unpaired_pairs(self, p: int) -> float:
        """What the ops outside the merged forward-backward pairs (the warm-up forwards, the cool-down backwards) add
        to the makespan under Training.overlap_moe_expert_parallel_comm, in units of one rank's hidden EP time per
        microbatch (one pair per chunk): p, whatever the chunks per rank, as replaying the orders with compute alone
        finds (the fill and the drain cross every rank outside pairs; tests/verify/test_ep_overlap.py pins it for p
        of 1-8 and v of 1-4)."""
        return float(p)

    @property
    def layer_granularity(self) -> int:
        """Layers per rank must be a multiple of this (one whole layer per chunk at least)."""
        return self.chunks

    @property
    def steady_state_latency_bound(self) -> bool:
        """Whether each rank waits on its own microbatch's round trip every cycle (all but GPipe)."""
        return self.schedule is not Schedule.gpipe

    def inflight_microbatches(self, pp: int, rank: int, microbatches: int) -> float:
        """Peak activations held by `rank`, in units of one microbatch through the rank's whole stage."""
        if self.schedule is Schedule.gpipe:
            held = float(microbatches)
        elif self.schedule is Schedule.interleaved:
            v = self.chunks
            held = (2 * (pp - rank - 1) + (v - 1) * pp + 1 + self.merged) / v
        elif self.schedule is Schedule.zb_v:
            held = float(pp)
        else:
            held = float(pp - rank + (self.merged and pp == 1))
        return min(held, float(microbatches))


def schedule_options(
    schedules: list[Schedule], interleave_chunks: list[int], pp: int, microbatches: int, ep_overlap: bool = False
) -> list[ScheduleOption]:
    """Schedules applicable to a shape. Without pipelining (pp == 1) there is a single option (1F1B
    degenerates to gradient accumulation); interleaving needs microbatches % pp == 0 (as in Megatron-LM);
    ZB-H1 needs microbatches >= pp, below which no weight-gradient work fills the bubble, and ZB-V
    microbatches >= 2 pp - 1, below which its V-shaped order idles well beyond the bubble formula (the verifier's
    replay of p = 7, m = 8 idles 2.6x the formula). With `ep_overlap` (`overlaps_ep`) only interleaving, as
    Megatron-core asserts for its merged forward-backward pairs when pp > 1."""
    if pp == 1:
        return [ScheduleOption(Schedule.one_f_one_b, merged=ep_overlap)]
    options = []
    for schedule in schedules:
        if ep_overlap and schedule is not Schedule.interleaved:
            continue
        if schedule is Schedule.interleaved:
            if microbatches % pp == 0:
                options += [ScheduleOption(schedule, v, ep_overlap) for v in sorted(set(interleave_chunks)) if v > 1]
        elif schedule is Schedule.zb_h1:
            if microbatches >= pp:
                options.append(ScheduleOption(schedule))
        elif schedule is Schedule.zb_v:
            if microbatches >= 2 * pp - 1:
                options.append(ScheduleOption(schedule, 2))
        else:
            options.append(ScheduleOption(schedule))
    return options


def overlaps_ep(training: Training, shape: Shape) -> bool:
    """Whether `shape` merges its steady-state forward and backward pairs to hide their EP all-to-alls
    (Training.overlap_moe_expert_parallel_comm, with EP > 1 as Megatron-core requires)."""
    return training.overlap_moe_expert_parallel_comm and shape.ep > 1


def searched_options(instance: Instance, shape: Shape) -> list[ScheduleOption]:
    """`schedule_options` of `shape` over the instance's search.schedules and search.interleave_chunks."""
    search = instance.search
    return schedule_options(search.schedules, search.interleave_chunks, shape.pp, shape.microbatches,
                            overlaps_ep(instance.training, shape))
