"""The verifier's terminal report, rendered from hand-built verifications (no replay)."""

from __future__ import annotations

import io

from rich.console import Console

from scaleacross_milp.report.verification import render_verification
from scaleacross_milp.spec.plan import Verification


def verification(**overrides) -> Verification:
    data = {
        "iteration_s": 2.5, "predicted_s": 2.0, "difference_s": 0.5, "relative_difference": 0.25,
        "breakdown": {"compute_s": 1.5, "exposed_tp_cp_s": 0.2, "exposed_ep_s": 0.05, "bubble_s": 0.25,
                      "exposed_pp_s": 0.1, "exposed_dp_s": 0.39, "optimizer_s": 0.01},
        "tokens_per_s": 1000.0, "patterns": 2, "pipelines": 64,
        "links": [{"a": "A", "b": "B", "transport": "ecmp_go_back_n", "pp_gbyte": 12.5, "dp_gbyte": 3.0,
                   "busy_s": 0.125, "utilisation": 0.05}],
        "effects": [{"name": "all-gathers not hidden", "seconds": 0.3, "detail": "fsdp all-gathers outlast"}],
        "residual_s": 0.2, "tolerance": 0.1, "notes": ["2 distinct pipeline pattern(s)"], "replay_wall_s": 0.5,
    }
    return Verification.model_validate(data | overrides)


def rendered(v: Verification) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    render_verification(v, console)
    return console.export_text()


def test_side_by_side_with_units_and_breakdown():
    text = rendered(verification())
    assert "MILP predicted: 2.000 s" in text and "Verifier: 2.500 s" in text
    assert "Difference: +500.0 ms (+25.0 %)" in text
    for row in ("compute", "EP all-to-all (exposed)", "pipeline bubble", "optimizer step"):
        assert row in text
    assert "all-gathers not hidden" in text and "+300.0 ms" in text
    assert "A->B" in text and "12.5 GB" in text and "5.0 %" in text


def test_residual_outside_tolerance_is_flagged():
    assert "(+12.5 %), OUTSIDE the ±10 % tolerance" in rendered(verification(residual_s=0.25))
    assert "within the ±10 % tolerance" in rendered(verification(residual_s=-0.1))


def test_evaluate_without_prediction_shows_verifier_only():
    text = rendered(verification(predicted_s=None, difference_s=None, relative_difference=None, residual_s=None,
                                 tolerance=None, effects=[]))
    assert "MILP predicted" not in text and "Residual" not in text
    assert "Verifier: 2.500 s" in text
