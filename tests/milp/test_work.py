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
    # The same solve with every HiGHS run and model build half as slow again (a busier machine) takes the same steps:
    # the same plan, bound, gap and work, a longer wall time. Its work budget, not its gap, ends it. The steps' wall
    # caps (work.STEP_SLACK) are lifted: on a machine slower than the reference by more than they allow they would
    # end some step first (test_a_step_of_work_takes_its_share_of_the_wall_at_the_solves_pace).
    monkeypatch.setattr(work, "STEP_SLACK", float("inf"))
    instance = tiny(buildings=HALLS, links=THIN_LINK)

    def solved():
        return search_instance(instance, 1.0, 0.0, 1, None, WorkClock(1.0, 120.0))

    fast = solved()
    run, build = HighsModel.run, solve_module.build_model
    slept: dict[str, float] = {"run": 0.0, "build_model": 0.0}

    def slower(step, name):
        def slow(*args, **kwargs):
            start = time.perf_counter()
            result = step(*args, **kwargs)
            pause = 0.5 * (time.perf_counter() - start)
            time.sleep(pause)
            slept[name] += pause
            return result
        return slow

    monkeypatch.setattr(HighsModel, "run", slower(run, "run"))
    monkeypatch.setattr(solve_module, "build_model", slower(build, "build_model"))

    slow = solved()
    assert fast.solve.status == slow.solve.status == "time limit" and not fast.solve.wall_bound
    # Both slowed steps ran, and their pauses are in the slow run's wall time (the wall times of the two runs are not
    # compared: on a loaded machine the first run's own noise is larger than the pauses).
    assert min(slept.values()) > 0 and slow.solve.wall_s > sum(slept.values())
    assert slow.model_dump(exclude={"solve"}) == fast.model_dump(exclude={"solve"})
    same = ("incumbent_s", "bound_s", "rel_gap", "work_s", "shapes_solved", "shapes_pruned", "shapes_open")
    assert {k: getattr(slow.solve, k) for k in same} == {k: getattr(fast.solve, k) for k in same}


def test_a_search_the_wall_clock_ends_took_a_prefix_of_the_same_steps(tiny, monkeypatch):
    # A wall limit half the time the search takes: it stops at the wall (the outer promise), says the wall decided
    # it, still returns a plan with its bound, and every solve until the wall first decided a step (a solve it
    # ended, a build it refused) is one the unhurried search made (the steps' wall caps lifted, as above).
    monkeypatch.setattr(work, "STEP_SLACK", float("inf"))
    instance = tiny(buildings=HALLS, links=THIN_LINK)
    solves: list[tuple] = []
    solve = solve_module.ShapeSearch.solve

    def recorded(self, i, nodes, rel_gap, work_limit_s=None, restricted=None, beat_by_gap=False):
        ctx = restricted[1] if restricted else self.ctx(i)
        decided = self.clock.wall_bound
        outcome = solve(self, i, nodes, rel_gap, work_limit_s, restricted, beat_by_gap)
        if not decided:
            solves.append((ctx.shape.label(), tuple(ctx.buildings), nodes, work_limit_s, outcome.status,
                           outcome.incumbent))
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


def test_a_step_of_work_takes_its_share_of_the_wall_at_the_solves_pace():
    # Three wall seconds for one second of work so far: the solve runs at a third of the reference's pace. A step
    # given 0.5 s of work may run STEP_SLACK times that, one given 2 s no longer than the 2 s of wall left. Before a
    # tail of 0.2 s, a build of 0.25 s of work (0.75 s at this pace) fits in half of the 1.8 s left; one of 0.5 s
    # would take 1.5 s, more than half, and is refused as a wall-clock decision.
    clock = WorkClock(10.0, 5.0, spent_s=1.0, wall_start=time.perf_counter() - 3.0)
    assert clock.pace() == pytest.approx(3.0, rel=0.01)
    assert clock.step_wall_s(0.5) == pytest.approx(0.5 * work.STEP_SLACK)
    assert clock.step_wall_s(2.0) == pytest.approx(2.0, abs=0.01)
    assert clock.wall_allows(0.25, 0.5, tail_s=0.2) and not clock.wall_bound
    assert not clock.wall_allows(0.5, 0.5, tail_s=0.2) and clock.wall_bound
    assert WorkClock(10.0, 5.0, spent_s=2.0, wall_start=time.perf_counter() - 1.0).pace() == 1.0  # never below 1


def test_builds_slower_than_the_rest_are_judged_at_their_own_pace():
    # The solve runs at a third of the reference's pace (as above), but the one build so far (its seed's, absorbed)
    # took six times its charge: a build of 0.25 s of work now takes 1.5 s at that pace, more than half the 1.8 s
    # left, and is refused; one of 0.1 s (0.6 s) still fits.
    clock = WorkClock(10.0, 5.0, spent_s=1.0, wall_start=time.perf_counter() - 3.0)
    seed = WorkClock(1.0, 2.0)
    seed.record_build(0.1, 0.6)
    clock.absorb(seed)
    assert clock.build_pace() == pytest.approx(6.0)
    assert clock.wall_allows(0.1, 0.5, tail_s=0.2) and not clock.wall_bound
    assert not clock.wall_allows(0.25, 0.5, tail_s=0.2) and clock.wall_bound
