"""Steady-state cross-building sends (milp.formulation.pipeline): two-rank chains across a building boundary."""

from __future__ import annotations

import pyomo.environ as pyo
import pytest

from scaleacross_milp.costmodel.network import fastest_nic_byte_s, link_efficiency
from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.extract import extract_plan
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import HighsModel, polish, solve_milp
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Shape, SolveStats
from scaleacross_milp.verify.verifier import verify

HALLS = [{"name": "A", "gpus": 8, "gpu_type": "h100"}, {"name": "B", "gpus": 8, "gpu_type": "h100"}]
LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 100, "distance_km": 20}]


def pipeline_over_two_halls(tiny, schedule: str, microbatches: int, gbit_s: float = 100, km: float = 20) -> tuple:
    """Llama 3 8B, TP8 PP2 DP1, 16 + 16 layers, stage 0 in A and stage 1 in B, priced with the placement fixed."""
    link = [{**LINK[0], "capacity_gbit_s": gbit_s, "distance_km": km}]
    instance = tiny(buildings=HALLS, links=link, global_batch_sequences=microbatches,
                    search={"dp_modes": ["ddp"], "schedules": [schedule]})
    ctx = shape_context(instance, Shape(tp=8, pp=2, dp=1, micro_batch=1, microbatches=microbatches),
                        route_table(instance.topology))
    m = build_model(ctx)
    for j, hall in enumerate("AB"):
        m.n[j].fix(16)
        for k in m.K:
            m.x[j, k].fix(1 if k == hall else 0)
            m.y[j, k].fix(1 if k == hall else 0)
    highs = HighsModel(m)
    assert solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).status == "optimal"
    polish(highs, m.T, threads=1)
    return ctx, m


@pytest.mark.parametrize("microbatches", [4, 8])
def test_1f1b_pays_one_transfer_per_microbatch_across_the_boundary(tiny, microbatches):
    # 1F1B on two ranks: F0(x) -> send -> F1(x) -> B1(x) -> send -> B0(x) -> F0(x + 2) chains two microbatches
    # with two crossings, so with stage times C0, C1 (embedding, head) the makespan is m max + min (fill, drain)
    # + 2 (latency + one microbatch's transfer) for the first forward's and last backward's crossings, and the
    # chain's excess over the cycle, (C0 + C1) / 2 + latency + transfer - max, on the m - 2 microbatches between
    # (equal stages: (m + 1) C + m (latency + transfer)).
    ctx, m = pipeline_over_two_halls(tiny, "1f1b", microbatches)
    link = ctx.routes.links[0]
    (transport,) = [t for t in link.transports if pyo.value(m.z[0, t]) > 0.5]
    # one cell (8 GPUs x queue pairs connections) crosses: the price of a lone unit, the replay's for that send
    qp = link.queue_pairs_per_connection
    nic = fastest_nic_byte_s([ctx.instance.gpu_types["h100"]])
    transfer = ctx.costs.p2p_bytes / (link.capacity_byte_s * link_efficiency(link, transport, 8 * qp, nic / qp))
    latency = ctx.routes.latency_s["A", "B"]
    c0, c1 = (pyo.value(m.Cst[j]) for j in m.J)
    slow, fast = max(c0, c1), min(c0, c1)
    assert pyo.value(m.tx[0]) == pytest.approx(transfer, rel=1e-6)
    assert transfer < fast  # the link keeps up: the cycle is the slower stage, the chain adds the sends
    assert pyo.value(m.cycle) == pytest.approx(slow, rel=1e-6)
    send = latency + transfer
    expected = microbatches * slow + fast + 2 * send + (microbatches - 2) * ((c0 + c1) / 2 + send - slow)
    assert pyo.value(m.Tpipe) == pytest.approx(expected, rel=1e-6)


def test_zb_h1_hides_the_next_rank_s_weight_gradient_behind_the_sends(tiny):
    # ZB-H1: rank 1's W runs off the chain, so each crossing's excess over the cycle shrinks by half its W:
    # steady = (C0 + (1 - w) C1) / 2 + latency + transfer - cycle, w = W's share of a layer.
    # The rank paths' bubble rows leave the cycle free above the slower stage at this optimum (a stream path sets
    # Tpipe), so the row is read at the cycle the link leaves it, the slower stage's time.
    ctx, m = pipeline_over_two_halls(tiny, "zb-h1", 8)
    layer = ctx.gpu("A").layer
    share = layer.backward_weight_s / layer.total_s
    c0, c1 = (pyo.value(m.Cst[j]) for j in m.J)
    m.cycle.fix(max(c0, c1))
    highs = HighsModel(m)
    assert solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).status == "optimal"
    polish(highs, m.T, threads=1)
    excess = (c0 + (1 - share) * c1) / 2 + pyo.value(m.lat[0] + m.tx[0] - m.cycle)
    assert excess > 0
    assert pyo.value(m.steady[0]) == pytest.approx(excess, rel=1e-6)


def test_zb_v_hides_one_chunk_s_backward_behind_the_sends_and_pays_the_rest(tiny):
    # ZB-V on a thin link: each rank runs F, I, W of both chunks per microbatch; the chain across the boundary
    # leaves out one chunk's W and the smaller of its F and I, so each crossing's excess over the cycle is
    # (1 - (W + min(F, I)) / (2 C)) (C0 + C1) / 2 + latency + transfer - cycle, paid on m - 2 microbatches
    # (steady_makespan holds it); the stream paths add the warm-up and cool-down sends, and the replay agrees.
    ctx, m = pipeline_over_two_halls(tiny, "zb-v", 8, gbit_s=50)
    layer = ctx.gpu("A").layer
    share = 1 - (layer.backward_weight_s + min(layer.forward_s, layer.backward_input_s)) / (2 * layer.total_s)
    c0, c1 = (pyo.value(m.Cst[j]) for j in m.J)
    excess = share * (c0 + c1) / 2 + pyo.value(m.lat[0] + m.tx[0] - m.cycle)
    assert pyo.value(m.steady[0]) >= excess - 1e-9
    steady_state = pyo.value(8 * m.cycle + m.bubble + m.fill_sends + 4 * m.lat[0]) + 6 * max(excess, 0.0)
    assert pyo.value(m.Tpipe) >= steady_state - 1e-9
    predicted, replay = replayed(ctx, m)
    assert predicted == pytest.approx(replay, rel=0.02)


def test_gpipe_on_a_link_slower_than_its_stages_pays_every_send_of_both_phases(tiny):
    # GPipe sends every forward one way, then every backward the other way; a rank's sends to its peer run in
    # order, so over a link slower than the stages each phase takes m transfers, and each stage's forward and
    # backward of one microbatch fall outside the link's busy run: Tpipe >= m (x+ + x-) + C0 + C1.
    ctx, m = pipeline_over_two_halls(tiny, "gpipe", 8, gbit_s=5)
    transfer = pyo.value(m.xfer[0, 1])
    assert transfer == pytest.approx(pyo.value(m.xfer[0, -1])) and transfer > max(pyo.value(m.Cst[j]) for j in m.J)
    assert pyo.value(m.Tpipe) >= 8 * 2 * transfer + sum(pyo.value(m.Cst[j]) for j in m.J) - 1e-9


def test_gpipe_replay_queues_a_rank_s_sends_to_its_peer(tiny):
    # The same pipeline replayed: with sends in order per rank pair, the iteration is at least m transfers per
    # phase, and the MILP's prediction (which charges exactly that, plus fill and drain) agrees within 3 %.
    ctx, m = pipeline_over_two_halls(tiny, "gpipe", 8, gbit_s=5)
    predicted, replay = replayed(ctx, m)
    assert replay >= 2 * 8 * pyo.value(m.xfer[0, 1])
    assert replay == pytest.approx(predicted, rel=0.03)


def replayed(ctx, m) -> tuple[float, float]:
    """(the MILP's iteration time, the verifier's) of the fixed pipeline."""
    plan = extract_plan(m, ctx, SolveStats(status="optimal", incumbent_s=pyo.value(m.T), bound_s=pyo.value(m.T),
                                           rel_gap=0.0, wall_s=0.0, shapes_total=1, shapes_solved=1,
                                           shapes_pruned=0, variables=0, binaries=0, integers=0, constraints=0))
    return plan.prediction.iteration_s, verify(ctx.instance, plan)[0].iteration_s


def test_gpipe_over_a_far_boundary_pays_each_send_s_latency_in_turn(tiny):
    # 1,500 km (7.4 ms one way) between stage 0 and the other seven: a rank's sends to its peer run one after
    # another, each waiting for the one before to arrive, so each phase's run over the boundary is at least
    # m (latency + transfer) (a stream path states it; here the makespan rows already reach it), and the replay
    # agrees within the verifier's tolerance.
    ctx, m = eight_stages_over_two_halls(tiny, "gpipe", 8, gbit_s=3200, km=1500)
    latency, transfer = pyo.value(m.lat[0]), pyo.value(m.tx[0])
    assert latency == pytest.approx(ctx.routes.latency_s["A", "B"]) and latency > 5 * transfer
    assert pyo.value(m.Tpipe) >= sum(pyo.value(m.Cst[j]) for j in m.J) + 2 * 8 * (latency + transfer) - 1e-9
    predicted, replay = replayed(ctx, m)
    assert replay == pytest.approx(predicted, rel=0.1)


def eight_stages_over_two_halls(tiny, schedule: str, microbatches: int, gbit_s: float, km: float = 20,
                                in_a: int = 1) -> tuple:
    """Llama 3 8B, TP8 PP8 DP1, 4 layers per stage, stages 0 to in_a - 1 in A (8 GPUs each) and the others in B,
    placement fixed."""
    halls = [{**HALLS[0], "gpus": 8 * in_a}, {**HALLS[1], "gpus": 8 * (8 - in_a)}]
    instance = tiny(buildings=halls, links=[{**LINK[0], "capacity_gbit_s": gbit_s, "distance_km": km}],
                    global_batch_sequences=microbatches, search={"dp_modes": ["ddp"], "schedules": [schedule]})
    ctx = shape_context(instance, Shape(tp=8, pp=8, dp=1, micro_batch=1, microbatches=microbatches),
                        route_table(instance.topology))
    m = build_model(ctx)
    for j in m.J:
        m.n[j].fix(4)
        for k in m.K:
            m.x[j, k].fix(1 if k == ("A" if j < in_a else "B") else 0)
            m.y[j, k].fix(1 if k == ("A" if j < in_a else "B") else 0)
    highs = HighsModel(m)
    assert solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).status == "optimal"
    polish(highs, m.T, threads=1)
    return ctx, m


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_the_gradient_stream_waits_for_the_warm_up_forwards_to_cross(tiny, schedule):
    # Boundary 0 of 8 stages crosses a link slower than the stages. Rank 1 runs six warm-up forwards before its first
    # backward, so its first gradient leaves after seven of rank 0's forwards have crossed, and its m gradients then
    # cross one after another: Tpipe >= C0 + (m + 7)(latency + transfer) (stream_path); the replay agrees within
    # the verifier's tolerance.
    ctx, m = eight_stages_over_two_halls(tiny, schedule, 8, gbit_s=5)
    send = pyo.value(m.lat[0] + m.tx[0])
    assert pyo.value(m.tx[0]) > max(pyo.value(m.Cst[j]) for j in m.J)
    assert pyo.value(m.Tpipe) >= pyo.value(m.Cst[0]) + 15 * send - 1e-9
    predicted, replay = replayed(ctx, m)
    assert replay == pytest.approx(predicted, rel=0.1)


@pytest.mark.parametrize("microbatches", [16, 32])
def test_zb_v_keeps_2p_minus_j_microbatches_in_flight_behind_a_far_boundary(tiny, microbatches):
    # ZB-V's rank j runs 2p - j chunk-0 forwards before its first chunk-0 input backward (torch's ZBVZeroBubble
    # order, `costmodel.actions`), so its round trip (chunk 0 out to rank p - 1, chunk 1 back to rank 0 and both
    # backward: every boundary crossed twice, those at or beyond j four times) bounds the cycle far less than 1F1B's
    # p - j microbatches in flight would: with a 2,800 km boundary (13.7 ms one way) after stage 5, p - j = 3 would
    # hold the cycle at (sum_{j >= 5} C_j + 4 latency) / 3, above every stage's time (the MILP 4.2 % and 6.1 % above
    # the replay); with 2p - j = 11 the MILP agrees with the replay.
    ctx, m = eight_stages_over_two_halls(tiny, "zb-v", microbatches, gbit_s=12800, km=2800, in_a=6)
    latency, stages = pyo.value(m.lat[5]), [pyo.value(m.Cst[j]) for j in m.J]
    assert latency > 0.013 and (sum(stages[5:]) + 4 * latency) / 3 > max(stages)
    predicted, replay = replayed(ctx, m)
    assert predicted == pytest.approx(replay, rel=0.01)
