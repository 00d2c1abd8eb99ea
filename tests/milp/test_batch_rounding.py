"""Shapes whose DP x micro-batch does not divide the batch, under each training.batch_rounding, and the search's
ranking of shapes that run different batches (time per requested batch, T x B_requested / B_run)."""

from __future__ import annotations

import pytest

from scaleacross_milp.milp.shapes import enumerate_shapes
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.report.usage import plan_usage
from scaleacross_milp.verify.layout import check
from scaleacross_milp.verify.verifier import verify

SOLVE = {"time_limit_s": 30, "rel_gap": 0.0}


def prime(small_instance, rounding: str, tolerance: float = 0.05):
    """509 sequences (prime) on 256 H100s, TP 8 x PP 4 (32 GPUs per replica, DP <= 8), micro-batch 1."""
    return small_instance(gpus=256, batch=509, search_defaults=SOLVE,
                          search={"tp_degrees": [8], "cp_degrees": [1], "pp_degrees": [4], "micro_batch_sizes": [1]},
                          batch_rounding=rounding, batch_tolerance=tolerance)


# m per DP d for B = 509: down floor(509 / d), up ceil(509 / d), nearest the nearer (d = 2: 508 and 510 tie, up).
# Every run is within 5 % (25.45 sequences) of 509: the farthest, 504 (d = 6, 7, 8 down), is -0.98 %.
@pytest.mark.parametrize(("rounding", "microbatches"), [
    ("exact", [509]),
    ("down", [509, 254, 169, 127, 101, 84, 72, 63]),
    ("up", [509, 255, 170, 128, 102, 85, 73, 64]),
    ("nearest", [509, 255, 170, 127, 102, 85, 73, 64]),
])
def test_prime_batch_shapes_per_rounding(small_instance, rounding, microbatches):
    shapes = enumerate_shapes(prime(small_instance, rounding))
    assert [(s.dp, s.microbatches) for s in shapes] == list(enumerate(microbatches, start=1))


def test_tolerance_drops_the_shapes_that_change_the_batch_too_much(small_instance):
    # 0.5 % of 509 is 2.545 sequences: down keeps d = 1..4 (509, 508, 507, 508), drops d = 5 (505, -4)
    shapes = enumerate_shapes(prime(small_instance, "down", 0.005))
    assert [(s.dp, s.batch_sequences) for s in shapes] == [(1, 509), (2, 508), (3, 507), (4, 508)]


def eight(small_instance, batch: int, micro_batches: list[int], rounding: str, tolerance: float):
    """8 H100s, TP 4, no PP, DDP: DP 1 or 2."""
    return small_instance(gpus=8, batch=batch, search_defaults=SOLVE,
                          search={"tp_degrees": [4], "cp_degrees": [1], "pp_degrees": [1],
                                  "micro_batch_sizes": micro_batches, "dp_modes": ["ddp"]},
                          batch_rounding=rounding, batch_tolerance=tolerance)


def test_rounding_down_a_prime_batch_uses_the_gpus_exact_leaves_idle(small_instance):
    # 13 sequences: exact allows DP 1 only (4 GPUs, 13 microbatches); down with 10 % runs DP 2 x 6 = 12 (-7.7 %)
    exact = solve_instance(eight(small_instance, 13, [1], "exact", 0.1))
    down_instance = eight(small_instance, 13, [1], "down", 0.1)
    down = solve_instance(down_instance)
    assert (exact.shape.gpus, exact.shape.batch_sequences) == (4, 13)
    assert (down.shape.gpus, down.shape.dp, down.shape.microbatches) == (8, 2, 6)
    assert down.prediction.iteration_s / 12 < exact.prediction.iteration_s / 13
    assert down.solve.bound_s <= down.solve.incumbent_s + 1e-9 and down.solve.status == "optimal"
    batch = plan_usage(down_instance, check(down_instance, down), down.prediction.iteration_s).batch
    assert (batch.requested_sequences, batch.run_sequences) == (13, 12)
    assert batch.change == pytest.approx(-1 / 13)
    assert batch.tokens_per_s == pytest.approx(12 * 8192 / down.prediction.iteration_s)
    assert down.prediction.tokens_per_s == pytest.approx(batch.tokens_per_s)
    verification, _ = verify(down_instance, down)
    assert verification.tokens_per_s == pytest.approx(12 * 8192 / verification.iteration_s)


def test_shapes_running_different_batches_are_ranked_per_sequence(small_instance):
    # 7 sequences, down within 90 %, DP 2: micro-batch 1 runs 3 microbatches (6 sequences), micro-batch 2 one
    # (4 sequences). The 4-sequence step is shorter, but its optimizer step and DP sync are spread over fewer
    # sequences: per requested batch (T x 7 / B_run) the 6-sequence step wins, and the search returns it.
    both = solve_instance(eight(small_instance, 7, [1, 2], "down", 0.9))
    pairs = solve_instance(eight(small_instance, 7, [2], "down", 0.9))
    assert (pairs.shape.dp, pairs.shape.batch_sequences) == (2, 4)
    assert (both.shape.micro_batch, both.shape.batch_sequences) == (1, 6)
    assert pairs.prediction.iteration_s < both.prediction.iteration_s
    assert both.prediction.iteration_s / 6 < pairs.prediction.iteration_s / 4
    # the bound is stated at the plan's batch: gap 0 means no shape runs a sequence faster
    assert both.solve.bound_s == pytest.approx(both.solve.incumbent_s, rel=1e-9)
