"""Critical-path cuts (milp.path_cuts): cut at an incumbent whose stages each sit in one building, not where a stage
is split."""

from __future__ import annotations

import pytest

from scaleacross_milp.loader import load_instance
from scaleacross_milp.milp.highs import HighsModel, solve_milp
from scaleacross_milp.milp.path_cuts import cut_critical_path, price_with_cuts
from scaleacross_milp.milp.price import fixed_layout_model
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.spec.plan import Layout
from tests.conftest import ROOT

PP_OUT = ROOT / "instances" / "pp-out-2b-thin-link-llama3-70b.json"


def zb_v_layout(split: bool) -> Layout:
    """pp-out-2b's ZB-V layout of 16 stages of 2 to 6 layers, 8 in each hall (`split`: stages 7 and 8 half in each,
    half the pipelines crossing after stage 6 and half after stage 8)."""
    layers = [2, 4, 4, 6, 6, 6, 6, 6, 6, 6, 4, 6, 6, 4, 6, 2]
    cells = [{"A" if j < 8 else "B": 8} for j in range(16)]
    routes = [{"buildings": ["A"] * 8 + ["B"] * 8, "pipelines": 8}]
    if split:
        cells[7] = cells[8] = {"A": 4, "B": 4}
        routes = [{"buildings": ["A"] * 9 + ["B"] * 7, "pipelines": 4},
                  {"buildings": ["A"] * 7 + ["B"] * 9, "pipelines": 4}]
    return Layout.model_validate({
        "shape": {"tp": 2, "cp": 2, "ep": 1, "pp": 16, "dp": 8, "micro_batch": 1, "microbatches": 32},
        "schedule": "zb-v", "interleave": 2, "dp_mode": "fsdp-no-reshard",
        "transports": {"A-B": "ecmp_selective_repeat"},
        "stages": [{"stage": j, "layers": n, "cells_per_building": cells[j]} for j, n in enumerate(layers)],
        "pipelines": routes})


@pytest.mark.parametrize("split", [False, True])
def test_a_path_longer_than_tpipe_is_cut_only_where_no_stage_is_split(split):
    # Unsplit, every pipeline runs at the model's stage and transfer times, and its longest path (4.569 s) is above
    # Tpipe (4.226 s): cut, and Tpipe rises to it. Split, Cst and tx are the worst copy's and arc's: no cut.
    instance = load_instance(PP_OUT)
    ctx, model = fixed_layout_model(instance, zb_v_layout(split), route_table(instance.topology))
    highs = HighsModel(model)
    before = solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).incumbent
    assert before is not None
    assert cut_critical_path(highs, ctx) is not split
    assert len(model.critical_path) == (0 if split else 1)
    after = solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).incumbent
    assert after == pytest.approx(before) if split else after > before * 1.05


def test_a_point_priced_with_no_time_left_still_has_its_longest_path_cut():
    # A search solve can end with its time spent (a pattern solve at its cap): the first round of cuts still runs,
    # its held solve at solve_milp's floor, so the incumbent it returns is priced along its own longest path.
    instance = load_instance(PP_OUT)
    ctx, model = fixed_layout_model(instance, zb_v_layout(False), route_table(instance.topology))
    highs = HighsModel(model)
    before = solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).incumbent
    held, _ = price_with_cuts(highs, ctx, time_limit_s=0.0, threads=1)
    assert held is not None and held.incumbent > before * 1.05
    assert not cut_critical_path(highs, ctx)
