import pytest

from scaleacross_milp.costmodel.comm import AlphaBetaModel, tp_comm
from scaleacross_milp.costmodel.costs import DPVariant
from scaleacross_milp.costmodel.dp import IntraDPSync, chunk_sync_s, dp_cross_phases, exchange_connections
from scaleacross_milp.spec.hardware import GPUType
from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.search import DPMode
from scaleacross_milp.spec.topology import Building

H100 = GPUType(peak_dense_tflops={"bf16": 989}, hbm_gib=80, hbm_tbyte_s=3.35, nvlink_gbyte_s=370)


def test_all_reduce_matches_formula():
    m = AlphaBetaModel.from_gpu(H100)
    s, n = 1e9, 8
    # 2(n-1)/n * S/B + floor + 2(n-1) alpha, B = 370 GB/s
    expected = 2 * 7 / 8 * 1e9 / 370e9 + 13e-6 + 14 * 1e-6
    assert m.time_s("all_reduce", "nvlink", n, s) == pytest.approx(expected)
    # fabric: B = 400 Gb/s / 8 * 0.92 = 46 GB/s; all-gather moves (n-1)/n
    assert m.time_s("all_gather", "fabric", 4, s) == pytest.approx(0.75 * 1e9 / 46e9 + 70e-6 + 3 * 3e-6)
    assert m.time_s("all_reduce", "nvlink", 1, s) == 0.0


def test_tp_without_sequence_parallelism_all_reduces():
    m = AlphaBetaModel.from_gpu(H100)
    sp = tp_comm(m, "nvlink", 8, 1e8, full_recompute=True)
    plain = tp_comm(m, "nvlink", 8, 1e8, full_recompute=True, sequence_parallel=False)
    assert sp.forward_s == pytest.approx(2 * m.time_s("all_gather", "nvlink", 8, 1e8)
                                         + 2 * m.time_s("reduce_scatter", "nvlink", 8, 1e8))
    assert plain.forward_s == pytest.approx(2 * m.time_s("all_reduce", "nvlink", 8, 1e8))
    assert plain.backward_input_s == pytest.approx(2 * plain.forward_s)  # full recompute repeats the forward's


def test_dp_cross_phases():
    assert dp_cross_phases(DPVariant(DPMode.ddp), 8).grad_copies == 2
    assert dp_cross_phases(DPVariant(DPMode.fsdp_no_reshard), 8).grad_copies == pytest.approx(1.5)
    fsdp = dp_cross_phases(DPVariant(DPMode.fsdp), 8)
    assert (fsdp.gather_phases, fsdp.reduce_phases) == (16, 1)


def test_stage_dp_sync_is_one_collective_per_chunk_buffer_or_one_per_layer():
    # DDP / fsdp-no-reshard: c collectives over a chunk's n/c layers of gradients; FSDP / HSDP: n per-layer ones.
    comm = AlphaBetaModel.from_gpu(GPUType(peak_dense_tflops={"bf16": 989}, hbm_gib=80, hbm_tbyte_s=3.35,
                                           nvlink_gbyte_s=370, nic_gbit_s=400))
    shape = Shape(tp=8, pp=2, dp=16, micro_batch=1, microbatches=8)
    big, small = Building(name="a", gpus=256, gpu_type="h100"), Building(name="b", gpus=128, gpu_type="h100")

    def sync(mode: DPMode, expert: float = 0.0, building: Building = big) -> IntraDPSync:
        return IntraDPSync(comm, shape, building, DPVariant(mode), 1e8, expert, 8)

    ddp, fsdp = sync(DPMode.ddp), sync(DPMode.fsdp)
    # Each hall rings over the DP members it can hold: 16 ranks of 16 GPUs in the big one, 8 in the small one.
    assert ddp.collective_s(1e9, 0.0) == comm.time_s("all_reduce", "fabric", 16, 1e9, 1)
    assert sync(DPMode.ddp, building=small).collective_s(1e9, 0.0) == comm.time_s("all_reduce", "fabric", 8, 1e9, 1)
    # The cost tables let a ring span the largest building's GPUs: the small flat hall then rings 16 too.
    spread = IntraDPSync(comm, shape, small, DPVariant(DPMode.ddp), 1e8, 0.0, 8, ring_gpus=256)
    assert spread.collective_s(1e9, 0.0) == ddp.collective_s(1e9, 0.0)
    assert ddp.stage_s(10) == pytest.approx(ddp.collective_s(1e9, 0.0))
    assert ddp.stage_s(10, chunks=2) == pytest.approx(2 * ddp.collective_s(5e8, 0.0))
    assert ddp.stage_s(10) < 10 * ddp.stage_s(1)  # latency paid once per buffer, not per layer
    assert fsdp.stage_s(10) == pytest.approx(10 * fsdp.collective_s(1e8, 0.0)) == fsdp.stage_s(10, chunks=2)
    moe = sync(DPMode.ddp, expert=3e8)
    assert chunk_sync_s([ddp, moe]) == pytest.approx(ddp.collective_s(2e8, 3e8))
    assert chunk_sync_s([fsdp, fsdp]) == pytest.approx(fsdp.stage_s(2))


@pytest.mark.parametrize(("cells_from", "cells_to", "pairs"), [(1, 1, 1), (3, 1, 3), (1, 3, 3), (2, 4, 4), (2, 3, 4)])
def test_a_dp_exchange_connects_every_pair_of_members_whose_slices_overlap(cells_from, cells_to, pairs):
    # 2 slices against 3 over the same range: [0, 1/2) meets [0, 1/3) and [1/3, 2/3), [1/2, 1) meets [1/3, 2/3) and
    # [2/3, 1): 4 pairs. Equal counts pair one to one; 2 against 4 pairs each half with its two quarters.
    assert exchange_connections(cells_from, cells_to) == pairs
