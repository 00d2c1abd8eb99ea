"""Live progress: the search reports every phase in order, and its incumbent and bound only ever close in."""

from __future__ import annotations

import pytest

from scaleacross_milp.milp.progress import Phase, SearchProgress
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.report.progress import LiveProgress, progress_line

TWO = [{"name": "A", "gpus": 8, "gpu_type": "h100"}, {"name": "B", "gpus": 8, "gpu_type": "h100"}]
LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 400, "distance_km": 50}]


def test_phases_in_order_and_incumbent_and_bound_close_in(tiny):
    seen: list[SearchProgress] = []
    plan = solve_instance(tiny(buildings=TWO, links=LINK), progress=seen.append)
    phases = [p.phase for p in seen]
    order = [Phase.routes, Phase.seed, Phase.screening, Phase.patterns, Phase.shapes, Phase.polish]
    assert [phase for phase in order if phase in phases] == order
    assert phases == sorted(phases, key=order.index)
    incumbents = [p.incumbent_s for p in seen if p.incumbent_s is not None]
    assert incumbents == sorted(incumbents, reverse=True)
    assert all(p.bound_s <= p.incumbent_s * (1 + 1e-9) for p in seen if p.incumbent_s is not None)
    assert seen[-1].bound_s == pytest.approx(plan.solve.bound_s)
    stats = plan.solve
    assert seen[-1].shapes_done + seen[-1].shapes_left == stats.shapes_solved + stats.shapes_pruned + stats.shapes_open
    elapsed = [p.elapsed_s for p in seen]
    assert elapsed == sorted(elapsed)


def test_progress_line_states_every_figure_with_its_unit():
    line = progress_line(SearchProgress(Phase.shapes, 12.34, 4, 37, 1.25, 1.0))
    assert line.split() == ["shape", "MILPs", "12.3", "s", "shapes", "4", "done", "/", "37", "left", "incumbent",
                            "1.250", "s", "bound", "1.000", "s", "gap", "20.0", "%"]
    assert "no plan yet" in progress_line(SearchProgress(Phase.patterns, 2.0, 0, 5, None, 0.5))


def test_live_progress_is_inert_off_a_terminal():
    progress = LiveProgress()  # pytest captures stderr: not a terminal
    with progress:
        progress(SearchProgress(Phase.shapes, 5.0, 1, 1, 1.0, 0.5))
    assert not progress.enabled and progress.live is None
