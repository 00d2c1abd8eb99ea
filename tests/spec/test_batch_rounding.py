"""training.batch_rounding / batch_tolerance: validation naming the field, and the microbatch count per rule."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scaleacross_milp.spec.plan import Shape
from scaleacross_milp.spec.training import BatchRounding, Training


def training(batch: int = 509, **fields) -> Training:
    return Training.model_validate({"seq_len": 8192, "global_batch_sequences": batch, **fields})


def test_exact_is_the_default():
    spec = training()
    assert (spec.batch_rounding, spec.batch_tolerance) == (BatchRounding.exact, 0.05)


@pytest.mark.parametrize(("fields", "message"), [
    ({"batch_rounding": "sideways"}, r"batch_rounding\n  Input should be 'exact', 'down', 'up' or 'nearest'"),
    ({"batch_tolerance": 1.0}, r"batch_tolerance\n  Input should be less than 1"),
    ({"batch_tolerance": -0.01}, r"batch_tolerance\n  Input should be greater than or equal to 0"),
])
def test_bad_values_name_the_field(fields, message):
    with pytest.raises(ValidationError, match=message):
        training(**fields)


# B = 509 (prime). DP x micro-batch q = 8: 509 / 8 = 63.6, floor 63 -> 504 (-0.98 %), ceil 64 -> 512 (+0.59 %).
# q = 100: floor 5 -> 500 (-1.8 %), ceil 6 -> 600 (+17.9 %, beyond 5 %). q = 600: floor 0, ceil 1 -> 600.
@pytest.mark.parametrize(("rounding", "q", "tolerance", "m"), [
    ("exact", 8, 0.05, None), ("exact", 509, 0.0, 1),
    ("down", 8, 0.05, 63), ("up", 8, 0.05, 64), ("nearest", 8, 0.05, 64),
    ("down", 8, 0.009, None),  # 5 / 509 = 0.98 % > 0.9 %
    ("down", 100, 0.05, 5), ("up", 100, 0.05, None), ("up", 100, 0.18, 6), ("nearest", 100, 0.05, 5),
    ("down", 600, 0.5, None), ("up", 600, 0.05, None), ("up", 600, 0.18, 1),
])
def test_microbatch_count_per_rule(rounding, q, tolerance, m):
    assert training(batch_rounding=rounding, batch_tolerance=tolerance).rounded_microbatches(q) == m


def test_nearest_breaks_ties_upward():
    # 10 / 4 = 2.5: 8 and 12 are both 2 sequences away
    assert training(10, batch_rounding="nearest", batch_tolerance=0.2).rounded_microbatches(4) == 3


def test_largest_batch_is_the_requested_one_under_exact_and_the_tolerance_above_it_otherwise():
    assert training().largest_batch_sequences == 509
    assert training(batch_rounding="up").largest_batch_sequences == 534  # floor(509 x 1.05 = 534.45)


def test_shape_runs_its_own_batch_and_compares_per_requested_batch():
    shape = Shape(tp=8, pp=4, dp=8, micro_batch=1, microbatches=64)
    assert shape.batch_sequences == 512
    assert shape.batch_factor(509) == pytest.approx(509 / 512)
