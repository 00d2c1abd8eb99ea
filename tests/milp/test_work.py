"""The work clock: every decision of the search reads charged work, so a solve's steps, plan, bound and gap do not
depend on how fast the machine runs them; the wall clock only stops it."""

from __future__ import annotations

import time

import numpy as np
import pyomo.environ as pyo
import pytest

from scaleacross_milp.milp import solve as solve_module
from scaleacross_milp.milp import work
from scaleacross_milp.milp.highs import HighsModel, MILPStatus
from scaleacross_milp.milp.solve import search_instance
from scaleacross_milp.milp.work import WorkClock

HALLS = [{"name": "A", "gpus": 16, "gpu_type": "h100"}, {"name": "B", "gpus": 16, "gpu_type": "h100"}]
THIN_LINK = [{"a": "A", "b": "B", "capacity_gbit_s": 100, "distance_km": 200}]


def market_split(rows: int = 3, columns: int = 20) -> pyo.ConcreteModel:
    """A market-split problem (Cornuejols and Dawande), hard for branch and bound: binaries x with sum_j a_ij x_j +
    up_i - down_i = b_i, b_i half of row i's sum, minimising the deviations."""
    a = np.random.default_rng(0).integers(0, 100, size=(rows, columns))
    m = pyo.ConcreteModel(name="market_split")
    m.x = pyo.Var(range(columns), domain=pyo.Binary)
    m.up = pyo.Var(range(rows), bounds=(0, None))
    m.down = pyo.Var(range(rows), bounds=(0, None))
    m.split = pyo.Constraint(range(rows), rule=lambda m, i: sum(int(a[i, j]) * m.x[j] for j in range(columns))
                             + m.up[i] - m.down[i] == int(a[i].sum()) // 2)
    m.objective = pyo.Objective(expr=sum(m.up[i] + m.down[i] for i in range(rows)))
    return m


def test_a_run_stops_at_its_work_cap_at_the_same_point_every_time():
    # HiGHS's interrupt callback counts the run's limit checks, which come at the same points of the same run: a cap of
    # a few checks' work stops a run of the same model where it stopped before, short of where the run goes uncapped
    # (each run on a fresh translation: HiGHS starts a later run of one model from what the earlier one left).
    models = [HighsModel(market_split()) for _ in range(3)]
    rows, nonzeros = models[0].highs.getNumRow(), models[0].highs.getNumNz()
    cap = work.checked_s(rows, nonzeros, 30)
    runs = [highs.run(threads=1, options={"mip_rel_gap": 0.0}, work_limit_s=cap) for highs in models[:2]]
    assert {run.status for run in runs} == {MILPStatus.work_limit}
    assert (runs[0].iterations, runs[0].nodes, runs[0].objective) == (runs[1].iterations, runs[1].nodes,
                                                                        runs[1].objective)
    assert runs[0].work_s == runs[1].work_s == work.run_s(rows, nonzeros, runs[0].iterations, runs[0].nodes)
    free = models[2].run(threads=1, options={"mip_rel_gap": 0.0})
    assert free.status is MILPStatus.optimal and free.nodes > runs[0].nodes


def test_a_search_takes_the_same_steps_on_a_slower_machine(tiny, monkeypatch):
    # The same solve with every HiGHS run and model build 20 ms slower (a busier machine) takes the same steps: the
    # same plan, bound, gap and work, a longer wall time. Its work budget, not its gap, ends it.
    instance = tiny(buildings=HALLS, links=THIN_LINK)

    def solved():
        return search_instance(instance, 1.0, 0.0, 1, None, WorkClock(1.0, 120.0))

    fast = solved()
    run, build = HighsModel.run, solve_module.build_model

    def slow_run(self, **kwargs):
        time.sleep(0.02)
        return run(self, **kwargs)

    def slow_build(*args):
        time.sleep(0.02)
        return build(*args)

    monkeypatch.setattr(HighsModel, "run", slow_run)
    monkeypatch.setattr(solve_module, "build_model", slow_build)
    slow = solved()
    assert fast.solve.status == slow.solve.status == "time limit" and not fast.solve.wall_bound
    assert slow.solve.wall_s > fast.solve.wall_s + 0.2
    assert slow.model_dump(exclude={"solve"}) == fast.model_dump(exclude={"solve"})
    same = ("incumbent_s", "bound_s", "rel_gap", "work_s", "shapes_solved", "shapes_pruned", "shapes_open")
    assert {k: getattr(slow.solve, k) for k in same} == {k: getattr(fast.solve, k) for k in same}


def test_a_search_the_wall_clock_ends_took_a_prefix_of_the_same_steps(tiny, monkeypatch):
    # A wall limit half the time the search takes: it stops at the wall (the outer promise), says the wall decided
    # it, still returns a plan with its bound, and every solve before its last is one the unhurried search made.
    instance = tiny(buildings=HALLS, links=THIN_LINK)
    solves: list[tuple] = []
    solve = solve_module.ShapeSearch.solve

    def recorded(self, i, nodes, rel_gap, work_limit_s=None, restricted=None, beat_by_gap=False):
        ctx = restricted[1] if restricted else self.ctx(i)
        outcome = solve(self, i, nodes, rel_gap, work_limit_s, restricted, beat_by_gap)
        solves.append((ctx.shape.label(), tuple(ctx.buildings), nodes, work_limit_s, outcome.status, outcome.incumbent))
        return outcome

    monkeypatch.setattr(solve_module.ShapeSearch, "solve", recorded)
    unhurried = search_instance(instance, 1.0, 0.0, 1, None, WorkClock(1.0, 120.0))
    steps, solves[:] = list(solves), []
    hurried = search_instance(instance, 1.0, 0.0, 1, None, WorkClock(1.0, unhurried.solve.wall_s / 2))
    assert hurried.solve.wall_bound and not unhurried.solve.wall_bound
    assert hurried.solve.bound_s <= hurried.solve.incumbent_s
    assert 1 < len(solves) < len(steps) and solves[:-1] == steps[:len(solves) - 1]


@pytest.mark.parametrize("tail", [0.0, 0.5])
def test_a_clock_has_left_the_least_of_its_work_and_wall_time(tail):
    clock = WorkClock(2.0, 1e6, spent_s=1.0)
    assert clock.work_left_s(tail) == pytest.approx(1.0 - tail)
    assert clock.left_s(tail) == pytest.approx(1.0 - tail) and not clock.wall_bound
    clock = WorkClock(1e6, 1.0, wall_start=time.perf_counter() - 2.0)
    assert clock.left_s(tail) < 0 and clock.wall_bound
