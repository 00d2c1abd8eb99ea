"""The final reprice (milp.solve.reprice) holds the incumbent's layout, lets its links' transports move and cuts
its point's own longest paths."""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.milp.highs import HighsModel, polish, solve_milp
from scaleacross_milp.milp.path_cuts import cut_critical_path
from scaleacross_milp.milp.price import fixed_layout_model
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.solve import reprice
from scaleacross_milp.milp.work import WorkClock
from scaleacross_milp.spec.plan import Layout
from scaleacross_milp.spec.topology import Transport


def test_reprice_moves_a_pipeline_off_go_back_n_on_a_lossy_link(bundled):
    # The bundled lossy instance's plan, Llama 3 70B PP-out over an 80 km link at 1e-4 loss, priced with its
    # pipeline sends left on go-back-N (an incumbent a solve stopped at its gap can hold): the reprice keeps the
    # layout and finds the selective-repeat transport, which costs the same layout less.
    instance = bundled("lossy-2b-llama3-70b")
    layout = Layout.model_validate({
        "shape": {"tp": 4, "cp": 2, "pp": 8, "dp": 32, "micro_batch": 1, "microbatches": 16}, "schedule": "zb-v",
        "dp_mode": "fsdp-no-reshard", "transports": {"A-B": "ecmp_go_back_n"},
        "stages": [{"stage": j, "layers": 10, "cells_per_building": {"A" if j < 4 else "B": 32}} for j in range(8)],
        "pipelines": [{"buildings": ["A"] * 4 + ["B"] * 4, "pipelines": 32}]})
    ctx, m = fixed_layout_model(instance, layout, route_table(instance.topology))
    highs = HighsModel(m)
    assert solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1).status == "optimal"
    held = pyo.value(m.T)
    for var in m.z.values():
        var.unfix()
    reprice(highs, ctx, held, WorkClock(30.0, 30.0), 0.0, threads=1)
    chosen = [t for (_, t), var in m.z.items() if round(pyo.value(var)) == 1]
    assert chosen != [Transport.ecmp_go_back_n]
    assert pyo.value(m.T) < held * (1 - 1e-3)


def test_reprice_prices_the_plan_s_point_along_its_own_longest_path(bundled):
    # A ZB-V plan one search order returned on the bundled pp-out instance, reported at 4.358 s: its point had no
    # path cut (the search cut those of the points it solved), and its longest path runs above Tpipe; its layout's
    # price with that path cut is 4.415 s (the replay: 4.506 s). The reprice cuts it, the polish's LP prices it.
    instance = bundled("pp-out-2b-thin-link-llama3-70b")
    layers = [2, 4, 6, 6, 6, 6, 6, 4, 4, 6, 4, 6, 6, 4, 4, 6]
    layout = Layout.model_validate({
        "shape": {"tp": 2, "cp": 2, "pp": 16, "dp": 8, "micro_batch": 1, "microbatches": 32}, "schedule": "zb-v",
        "dp_mode": "fsdp-no-reshard",
        "stages": [{"stage": j, "layers": n, "cells_per_building": {"A" if j < 8 else "B": 8}}
                   for j, n in enumerate(layers)],
        "pipelines": [{"buildings": ["A"] * 8 + ["B"] * 8, "pipelines": 8}]})
    ctx, m = fixed_layout_model(instance, layout, route_table(instance.topology))
    highs = HighsModel(m)
    solve_milp(highs, time_limit_s=30, rel_gap=0.0, threads=1)
    uncut = pyo.value(m.T)
    reprice(highs, ctx, uncut, WorkClock(30.0, 30.0), 0.0, threads=1)
    assert polish(highs, m.objective.expr, threads=1) > uncut * 1.01  # the plan's price, as `solve` reports it
    assert not cut_critical_path(highs, ctx)  # no path at the polished point runs above Tpipe
