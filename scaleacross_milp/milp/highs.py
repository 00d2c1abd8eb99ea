"""The HiGHS adapter: the only module that sets solver options (through pyomo.contrib.solver).

A shape's model is translated to HiGHS once (`HighsModel`, pyomo.contrib.solver's persistent interface); its later
solves (each pattern fixed, deeper node budgets, the polish LPs) send HiGHS only the variable bounds that changed.
Re-translating is what used to dominate: on a 131,072-GPU shape of 32,000 rows one translation takes 3-4 s, while
the bound updates between two solves take milliseconds."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from enum import StrEnum

import highspy
import pyomo.environ as pyo
from pyomo.contrib.solver.common.results import SolutionStatus, TerminationCondition
from pyomo.contrib.solver.solvers.highs import Highs
from pyomo.core.expr.numvalue import NumericValue


class MILPStatus(StrEnum):
    """How one MILP solve ended, in the words the report prints."""

    optimal = "optimal"
    """Closed within the relative gap asked for."""
    infeasible = "infeasible"
    cut_off = "cut off"
    """Closed: no point beats the cutoff (the incumbent of another shape)."""
    node_limit = "node limit"
    time_limit = "time limit"
    interrupted = "interrupted"
    """Stopped by HiGHS (an interrupt, or an error after a point was found: the point is kept)."""


TERMINATION: dict[TerminationCondition, MILPStatus | None] = {
    TerminationCondition.convergenceCriteriaSatisfied: MILPStatus.optimal,
    TerminationCondition.provenInfeasible: MILPStatus.infeasible,
    TerminationCondition.infeasibleOrUnbounded: MILPStatus.infeasible,
    TerminationCondition.locallyInfeasible: MILPStatus.infeasible,
    TerminationCondition.objectiveLimit: MILPStatus.cut_off,
    TerminationCondition.iterationLimit: MILPStatus.node_limit,
    TerminationCondition.maxTimeLimit: MILPStatus.time_limit,
    TerminationCondition.interrupted: MILPStatus.interrupted,
    TerminationCondition.minStepLength: None,
    TerminationCondition.unbounded: None,
    TerminationCondition.error: None,
    TerminationCondition.licensingProblems: None,
    TerminationCondition.emptyModel: None,
    TerminationCondition.unknown: None,
}
"""Explicit map from pyomo's termination condition (itself mapped from HiGHS's model status: kOptimal ->
convergenceCriteriaSatisfied, kObjectiveBound -> objectiveLimit, kSolutionLimit (the node budget) and
kIterationLimit -> iterationLimit, kTimeLimit -> maxTimeLimit) to ours; None: HiGHS failed (an internal error)."""
CLOSED = (MILPStatus.optimal, MILPStatus.infeasible, MILPStatus.cut_off)
NO_LIMIT_OPTIONS: dict[str, object] = {"objective_bound": math.inf, "mip_max_nodes": highspy.kHighsIInf,
                                       "time_limit": math.inf, "random_seed": 0}
"""HiGHS keeps an option until it is set again, so every solve of a persistent model starts from these: no cutoff,
no node budget, no time limit, a fixed seed (the same answer on every run)."""


class HighsModel:
    """A Pyomo model and its HiGHS twin, translated once when this is made.

    Only variable changes reach HiGHS between solves (fixings and bounds, `auto_updates.update_vars`; a fixed
    variable is a column with lb = ub, `treat_fixed_vars_as_params=False`); rows and the objective are never
    re-read, so a caller that adds or removes a row or swaps the objective tells the solver itself (`polish`)."""

    def __init__(self, model: pyo.ConcreteModel):
        self.model = model
        self.shortest_run_s = math.inf
        """The shortest HiGHS run on this model so far (what one polish LP takes at most, roughly)."""
        self.solver = Highs(treat_fixed_vars_as_params=False)
        updates = self.solver.config.auto_updates
        for check in ("check_for_new_or_removed_constraints", "check_for_new_or_removed_vars",
                      "check_for_new_or_removed_params", "check_for_new_objective", "update_constraints",
                      "update_parameters", "update_named_expressions", "update_objective"):
            setattr(updates, check, False)
        self.solver.set_instance(model)

    def run(self, *, threads: int | None, options: dict[str, object]):
        """One HiGHS run on the model as it stands; pyomo's results, nothing loaded."""
        # HiGHS keeps one thread scheduler per process, sized by the first solve; a later solve asking for another
        # thread count fails outright unless the scheduler is reset (we never run two solves at once).
        highspy.Highs.resetGlobalScheduler(True)
        start = time.perf_counter()
        results = self.solver.solve(self.model, threads=threads, solver_options=NO_LIMIT_OPTIONS | options,
                                    load_solutions=False, raise_exception_on_nonoptimal_result=False)
        self.shortest_run_s = min(self.shortest_run_s, time.perf_counter() - start)
        return results


@dataclass(frozen=True)
class MILPOutcome:
    """What one solve established: `incumbent` is None when no feasible point was found; `bound` is a valid
    lower bound on the objective (the cutoff itself when HiGHS proved nothing beats the cutoff)."""

    status: MILPStatus
    incumbent: float | None
    bound: float
    wall_s: float

    @property
    def finished(self) -> bool:
        """The solve closed (optimal within the gap, infeasible or cut off) rather than stopping at a limit."""
        return self.status in CLOSED


def model_size(model: pyo.ConcreteModel) -> dict[str, int]:
    variables = list(model.component_data_objects(pyo.Var, active=True))
    return {
        "variables": len(variables),
        "binaries": sum(v.is_binary() for v in variables),
        "integers": sum(v.is_integer() and not v.is_binary() for v in variables),
        "constraints": sum(1 for _ in model.component_data_objects(pyo.Constraint, active=True)),
    }


def solve_milp(
    highs: HighsModel,
    *,
    time_limit_s: float,
    rel_gap: float,
    threads: int | None,
    cutoff: float | None = None,
    max_nodes: int | None = None,
) -> MILPOutcome:
    """Solve to `rel_gap` within `time_limit_s` and `max_nodes` branch-and-bound nodes (a budget in solver work:
    the same answer whatever the machine's load); with `cutoff`, points not better than it are pruned.
    Loads the incumbent into the model only when it beats `cutoff` (HiGHS may report a worse point it found
    before the cutoff pruned its subtree), so a model keeps the best solution loaded into it so far; never
    raises on time limit or infeasibility."""
    options: dict[str, object] = {"mip_rel_gap": rel_gap, "time_limit": max(time_limit_s, 0.1)}
    if cutoff is not None:
        options["objective_bound"] = cutoff
    if max_nodes is not None:
        options["mip_max_nodes"] = max_nodes
    start = time.perf_counter()
    results = highs.run(threads=threads, options=options)
    wall = time.perf_counter() - start
    feasible = results.solution_status in (SolutionStatus.feasible, SolutionStatus.optimal)
    feasible = feasible and (cutoff is None or results.incumbent_objective < cutoff)
    if feasible:
        results.solution_loader.load_vars()
    status = TERMINATION.get(results.termination_condition)
    if status is None and not feasible:
        raise RuntimeError(f"HiGHS failed on {highs.model.name} ({results.termination_condition.name}); run with fewer "
                           "threads or report it")
    if status in CLOSED and not feasible:
        closed = MILPStatus.infeasible if cutoff is None else MILPStatus.cut_off  # nothing beats the cutoff
        return MILPOutcome(closed, None, math.inf if cutoff is None else cutoff, wall)
    bound = results.objective_bound
    bound = max(bound, 0.0) if bound is not None and bound == bound else 0.0
    bound = bound if cutoff is None else min(bound, cutoff)
    return MILPOutcome(status or MILPStatus.interrupted, results.incumbent_objective if feasible else None, bound,
                       wall)


def snapshot(model: pyo.ConcreteModel) -> list[float | None]:
    """The values of every variable of `model`, in component order: an incumbent kept apart from the model, which
    later solves (other patterns fixed on the same model) overwrite."""
    return [v.value for v in model.component_data_objects(pyo.Var)]


def restore(model: pyo.ConcreteModel, values: list[float | None]) -> None:
    """Load values taken by `snapshot` back into `model`."""
    for var, value in zip(model.component_data_objects(pyo.Var), values, strict=True):
        var.set_value(value, skip_validation=True)


def _solve_lp(highs: HighsModel, threads: int | None) -> bool:
    """Solve the model (its integers fixed) as an LP and load the solution; False when HiGHS finds no solution."""
    results = highs.run(threads=threads, options={})
    if results.solution_status not in (SolutionStatus.feasible, SolutionStatus.optimal):
        return False
    results.solution_loader.load_vars()
    return True


def polish(highs: HighsModel, objective: NumericValue, threads: int | None) -> float:
    """Make the loaded solution exact and slack-free; returns its exact objective.

    With every integer variable fixed at its rounded value, (1) re-solve the LP: a MILP incumbent may use the
    integrality tolerance (a binary at 1 - 1e-7 relaxes a big-M row by M 1e-7), so the exact objective can be a
    little higher; (2) hold the objective there and minimise the sum of the continuous variables. They are all
    epigraph variables (lower-bounded times and loads), so each ends at the smallest value its rows allow and the
    plan's breakdown reads what binds, not slack. A step HiGHS declares infeasible (a point that only held within
    the tolerances) is skipped: the values of the step before stay loaded."""
    model, solver = highs.model, highs.solver
    variables = [v for v in model.component_data_objects(pyo.Var, active=True) if not v.fixed]
    discrete = [v for v in variables if v.is_integer()]
    kept = snapshot(model)
    for var in discrete:
        var.fix(round(pyo.value(var)))
    original = next(model.component_data_objects(pyo.Objective, active=True))
    held = False
    try:
        if not _solve_lp(highs, threads):
            restore(model, kept)
            return pyo.value(objective)
        exact = pyo.value(objective)
        kept = snapshot(model)
        original.deactivate()
        model.polish_hold = pyo.Constraint(expr=objective <= exact * (1 + 1e-9) + 1e-12)
        model.polish_objective = pyo.Objective(expr=sum(v for v in variables if not v.is_integer()))
        solver.add_constraints([model.polish_hold])
        held = True
        solver.set_objective(model.polish_objective)
        if not _solve_lp(highs, threads):
            restore(model, kept)
    finally:
        if held:
            solver.remove_constraints([model.polish_hold])
            solver.set_objective(original)
        for name in ("polish_objective", "polish_hold"):
            if hasattr(model, name):
                model.del_component(name)
        original.activate()
        for var in discrete:
            var.unfix()
    return exact
