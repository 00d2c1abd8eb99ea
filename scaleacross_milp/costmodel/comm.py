"""Alpha-beta collective times and per-layer TP / CP / EP communication.

Collective on n ranks, payload S bytes (the full buffer: the all-reduce input, the all-gather output, the
reduce-scatter input, one rank's all-to-all send buffer), per-rank bandwidth B:
  all-reduce      2(n-1)/n * S/B + floor + 2(n-1) * alpha     (ring)
  all-gather, reduce-scatter, all-to-all   (n-1)/n * S/B + floor + (n-1) * alpha
  p2p             S/B + floor + alpha
`floor` is the measured small-message latency of one collective (~13 us inside an NVLink node, ~70 us
across nodes: DESIGN.md section 2), `alpha` an extra per ring step (NCCL's per-hop latency, order 1 us on
NVLink, a few us over the network). Overlap: TP exposed unless Training.tp_comm_overlap (tp_comm), CP
overlapped with the attention core (cp_comm), EP exposed (ep_comm).
"""

from __future__ import annotations

from dataclasses import dataclass

from scaleacross_milp.calibration.collective import Collective, CollectiveModel, Tier, bandwidth_factor, latency_steps
from scaleacross_milp.spec.hardware import GPUType

NIC_ACHIEVABLE_FRACTION = 0.92
"""nccl-tests sendrecv between two H100 nodes reaches 45.9 GB/s per GPU on 400 Gb/s NICs
(data/nccl-tests/nccl_h100-sxm-cluster01-2nodes_sendrecv_16gpus.txt): 45.9 / 50 = 0.92."""
LATENCY_FLOOR_S: dict[str, float] = {"nvlink": 13e-6, "fabric": 70e-6, "cross_building": 70e-6}
STEP_ALPHA_S: dict[str, float] = {"nvlink": 1e-6, "fabric": 3e-6, "cross_building": 3e-6}


@dataclass(frozen=True)
class AlphaBetaModel:
    """Per-tier bandwidth (bytes/s per rank) and latency, built from a GPUType with `from_gpu`."""

    bandwidth: dict[str, float]
    floor_s: dict[str, float]
    step_alpha_s: dict[str, float]

    @classmethod
    def from_gpu(
        cls, gpu: GPUType, cross_building_alpha_s: float = STEP_ALPHA_S["cross_building"]
    ) -> AlphaBetaModel:
        """nvlink: nvlink_gbyte_s; fabric and cross_building: nic_gbit_s/8 * NIC_ACHIEVABLE_FRACTION (the
        link's own capacity, balance and loss are applied by network.py). `cross_building_alpha_s` lets a
        caller add the link's one-way latency per step."""
        nic = gpu.nic_gbit_s * 1e9 / 8 * NIC_ACHIEVABLE_FRACTION
        return cls(
            bandwidth={"nvlink": gpu.nvlink_gbyte_s * 1e9, "fabric": nic, "cross_building": nic},
            floor_s=dict(LATENCY_FLOOR_S),
            step_alpha_s={**STEP_ALPHA_S, "cross_building": cross_building_alpha_s},
        )

    def time_s(self, collective: Collective, tier: Tier, ranks: int, nbytes: float,
               ranks_per_node: int | None = None) -> float:
        """`ranks_per_node` is ignored: the fabric bandwidth is already one NIC per rank."""
        if ranks <= 1 and collective != "p2p":
            return 0.0
        if nbytes <= 0:
            return 0.0
        return (
            bandwidth_factor(collective, ranks) * nbytes / self.bandwidth[tier]
            + self.floor_s[tier]
            + latency_steps(collective, ranks) * self.step_alpha_s[tier]
        )


def group_tier(group_gpus: int, gpu: GPUType) -> Tier:
    """nvlink when the group (e.g. tp*cp, or the cell tp*cp*ep) fits one NVLink domain, else fabric."""
    return "nvlink" if group_gpus <= gpu.nvlink_domain_gpus else "fabric"


@dataclass(frozen=True)
class LayerComm:
    """Exposed communication of one layer, one microbatch, per GPU (seconds)."""

    forward_s: float
    backward_input_s: float

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_input_s


def tp_comm(model: CollectiveModel, tier: Tier, tp: int, act_bytes: float, full_recompute: bool,
            sequence_parallel: bool = True, gemm_s: tuple[float, float, float, float] | None = None) -> LayerComm:
    """Megatron TP with sequence parallelism: forward 2 all-gathers (ag) + 2 reduce-scatters (rs) of
    S = b*s*h*beta/cp; without it 2 all-reduces of S; backward the same; full recompute repeats the forward ones in
    the backward. Exposed whole, unless `gemm_s` gives the per-GPU times (g_qkv, g_proj, g_fc1, g_fc2) of the
    GEMMs they pair with (Training.tp_comm_overlap, sequence parallelism only): Transformer Engine's userbuffers
    overlap (Megatron-LM --tp-comm-overlap; Wang et al., "Overlap Communication with Dependent Computation via
    Decomposition in Large Deep Learning Models", ASPLOS 2023) splits each collective into tp chunks exchanged
    around a ring while the GEMM works on the chunk already there, so each op exposes only max(0, comm - GEMM):
      forward   max(0, ag - g_qkv) + max(0, rs - g_proj) + max(0, ag - g_fc1) + max(0, rs - g_fc2)
                (all-gather before QKV and FC1, reduce-scatter after the output projection and FC2)
      backward  max(0, ag - g_proj) + max(0, rs - g_qkv) + max(0, ag - g_fc2) + max(0, rs - g_fc1)
                (the output gradient gathered before the row-parallel dgrad GEMMs, the input gradient
                reduce-scattered behind the column-parallel ones; a dgrad GEMM costs its forward GEMM)
    The GEMMs are taken at their undisturbed speed (the ring exchange runs on copy engines)."""
    if not sequence_parallel:
        fwd = 2 * model.time_s("all_reduce", tier, tp, act_bytes)
        return LayerComm(forward_s=fwd, backward_input_s=fwd * (2 if full_recompute else 1))
    ag, rs = model.time_s("all_gather", tier, tp, act_bytes), model.time_s("reduce_scatter", tier, tp, act_bytes)
    if gemm_s is None:
        fwd = bwd = 2 * ag + 2 * rs
    else:
        qkv, proj, fc1, fc2 = gemm_s
        fwd = sum(max(0.0, c - g) for c, g in ((ag, qkv), (rs, proj), (ag, fc1), (rs, fc2)))
        bwd = sum(max(0.0, c - g) for c, g in ((ag, proj), (rs, qkv), (ag, fc2), (rs, fc1)))
    return LayerComm(forward_s=fwd, backward_input_s=bwd + (fwd if full_recompute else 0.0))


def cp_comm(
    model: CollectiveModel, tier: Tier, cp: int, kv_block_bytes: float, fwd_core_s: float, bwd_core_s: float
) -> LayerComm:
    """Ring attention: cp-1 p2p sends of one rank's K,V block (b*(s/cp)*2*g*d*beta/tp) in the forward and
    2x that (K,V and dK,dV) in the backward; each step overlaps with the attention core of the previous
    block, so only max(0, comm - core compute) is exposed."""
    if cp <= 1:
        return LayerComm(0.0, 0.0)
    step = model.time_s("p2p", tier, 2, kv_block_bytes)
    fwd, bwd = (cp - 1) * step, 2 * (cp - 1) * step
    return LayerComm(max(0.0, fwd - fwd_core_s), max(0.0, bwd - bwd_core_s))


def ep_comm(model: CollectiveModel, tier: Tier, ep: int, dispatch_bytes: float) -> LayerComm:
    """Per MoE layer two all-to-alls forward (dispatch, combine) and two backward, each with per-rank
    buffer S = b*s*k*h*beta/(tp*cp) (moving (ep-1)/ep of it). Exposed, but for what merged forward-backward pairs
    hide under Training.overlap_moe_expert_parallel_comm (`ep_hidden`)."""
    one = model.time_s("all_to_all", tier, ep, dispatch_bytes)
    return LayerComm(2 * one, 2 * one)


def ep_hidden(ep_forward_s: float, ep_backward_s: float, compute_s: float) -> tuple[float, float]:
    """What one merged steady-state pair hides of one layer's EP all-to-alls under
    Training.overlap_moe_expert_parallel_comm: the pair runs a layer's forward and another microbatch's backward,
    each one's all-to-alls on the comm stream behind the other's compute, so it hides
        h = min(e_F + e_B, c)    (e_F, e_B: the forward's and the backward's all-to-alls; c: the pair's compute,
                                  F + I + W less e_F + e_B)
    returned split over the forward and the backward in proportion to e_F and e_B."""
    exposed = ep_forward_s + ep_backward_s
    if exposed <= 0:
        return 0.0, 0.0
    share = min(exposed, max(0.0, compute_s)) / exposed
    return ep_forward_s * share, ep_backward_s * share
