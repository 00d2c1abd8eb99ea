"""The HiGHS adapter: the only module that talks to HiGHS (highspy) and sets its options.

A shape's model is translated to HiGHS once (`HighsModel`: Pyomo's linear standard-form compiler, passed to highspy
as one column-wise matrix); its later solves (each pattern fixed, deeper node budgets, the polish LPs) send HiGHS
only the column bounds, which carry every fixing. Translating through pyomo.contrib.solver's persistent interface
took twice as long (a 16-building shape of 41,000 rows: 4.9 s against 2.7 s), and re-translating is what used to
dominate the search."""

from __future__ import annotations

import math
import os
import signal
import time
import warnings
from dataclasses import dataclass, replace
from enum import StrEnum
from multiprocessing.connection import Connection, Pipe

import highspy
import numpy as np
import pyomo.environ as pyo
import scipy.sparse
from pyomo.core.expr.numvalue import NumericValue
from pyomo.core.expr.visitor import identify_variables
from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler, _LinearStandardFormCompiler_impl
from pyomo.repn.standard_repn import generate_standard_repn

from scaleacross_milp.milp import work

# The compiler's array hooks (class attributes Pyomo leaves for others to set), set here so that the first translation
# inside a timed solve does not resolve Pyomo's deferred `scipy`, whose import pulls in scipy.stats: 1.1-1.9 s on
# 2 cores, once per process, spent within the first solve's time limit.
_LinearStandardFormCompiler_impl._to_vector = np.fromiter
_LinearStandardFormCompiler_impl._csc_matrix = scipy.sparse.csc_array
_LinearStandardFormCompiler_impl._csr_matrix = scipy.sparse.csr_array


class MILPStatus(StrEnum):
    """How one MILP solve ended, in the words the report prints."""

    optimal = "optimal"
    """Closed within the relative gap asked for."""
    infeasible = "infeasible"
    cut_off = "cut off"
    """Closed: no point beats the cutoff (the incumbent of another shape)."""
    node_limit = "node limit"
    time_limit = "time limit"
    work_limit = "work limit"
    """Stopped at its work budget (`work.checked_s`, held by HiGHS's interrupt callback)."""
    interrupted = "interrupted"
    """Stopped by HiGHS (an interrupt, or an error after a point was found: the point is kept)."""
    failed = "solver error"
    """HiGHS failed (an internal error) before it found a point: the solve proves nothing (`SolverFailure`)."""


_HMS = highspy.HighsModelStatus
STATUS: dict[highspy.HighsModelStatus, MILPStatus | None] = {
    _HMS.kOptimal: MILPStatus.optimal,
    _HMS.kInfeasible: MILPStatus.infeasible,
    _HMS.kUnboundedOrInfeasible: MILPStatus.infeasible,
    _HMS.kObjectiveBound: MILPStatus.cut_off,
    _HMS.kObjectiveTarget: MILPStatus.cut_off,
    _HMS.kSolutionLimit: MILPStatus.node_limit,
    _HMS.kIterationLimit: MILPStatus.node_limit,
    _HMS.kTimeLimit: MILPStatus.time_limit,
    _HMS.kInterrupt: MILPStatus.interrupted,
    _HMS.kHighsInterrupt: MILPStatus.interrupted,
    _HMS.kNotset: None,
    _HMS.kLoadError: None,
    _HMS.kModelError: None,
    _HMS.kPresolveError: None,
    _HMS.kSolveError: None,
    _HMS.kPostsolveError: None,
    _HMS.kModelEmpty: None,
    _HMS.kMemoryLimit: None,
    _HMS.kUnbounded: None,
    _HMS.kUnknown: None,
}
"""Explicit map from HiGHS's model status to ours (kSolutionLimit: the node budget; kObjectiveBound: nothing beats the
cutoff); None: HiGHS failed (an internal error)."""
CLOSED = (MILPStatus.optimal, MILPStatus.infeasible, MILPStatus.cut_off)
ABS_GAP = 1e-6
"""HiGHS's mip_abs_gap (its default, set explicitly): a solve closes once incumbent - bound <= this, in the
objective's unit (seconds, or dollars under the cost objective), whatever the relative gap asked for."""
NO_LIMIT_OPTIONS: dict[str, object] = {"objective_bound": math.inf, "mip_max_nodes": highspy.kHighsIInf,
                                       "time_limit": math.inf, "random_seed": 0, "mip_abs_gap": ABS_GAP,
                                       "mip_allow_restart": False, "mip_feasibility_tolerance": 1e-9,
                                       "mip_heuristic_run_rens": False}
"""HiGHS keeps an option until it is set again, so every solve of a translated model starts from these: no cutoff,
no node budget, no time limit, a fixed seed (the same answer on every run), ABS_GAP, no root restart: HiGHS
re-presolves after the root's fixings without looking at the time limit (a 4-building restriction of the 131k-GPU
Llama 3 405B instance ran 5.6-6.0 s under a 1 s limit, 1.0 s without the restart; HiGHS 1.15), and an integrality
tolerance of 1e-9 instead of 1e-6: a binary at 1 - 1e-6 relaxes a big-M row by M 1e-6, and the pipeline rows' M (an
upper bound on Tpipe over every layout of the shape) can be 10^4 times the iteration (generated medium seed 133: a
restriction's incumbent at 0.5105 s, 0.5302 s once its binaries are rounded, kept as the search's incumbent and cutoff
until the final polish), and no RENS heuristic: its sub-MIP's presolve (sparsify, then removeRowSingletons) segfaults
libhighs 1.15.1 on some models (tests/milp/data/rens_presolve_segfault.npz, a restriction of generated medium seed 22
with cut rows), which ends the user's whole solve; highspy 1.16 does not crash there but loops in RINS past its time
limit. Without RENS the 200-instance property suite returned 134 plans the same, 39 faster, 27 slower (replays -0.2 %
in geometric mean, README)."""
RETRY_FEASIBILITY = 1e-7
"""The mip_feasibility_tolerance of a second run when HiGHS rejects its own optimum (kSolveError: "MIP solver claims
optimality, but with ... primal infeasibilities" above NO_LIMIT_OPTIONS' 1e-9; generated medium seed 74's plan of
session 40, its layout held after a critical-path cut, 9.3e-9 on one row): `evaluate` then failed with exit 3 on a
valid layout, and the search's held solves after a cut run the same code. The retry's binaries may sit 1e-7 off,
relaxing a big-M row by M 1e-7."""
FEASIBLE = 2
"""HighsInfo.primal_solution_status of a feasible point (0: none, 1: infeasible)."""
FORKED_ROWS = 5_000
"""A MILP run on a model of this many rows or more, under a time limit, runs in a forked child process that is killed
at the limit (`HARD_CAP`): HiGHS checks neither its time limit nor an interrupt inside parts of its root (cut
separation, HiGHS 1.15.1), and a 17,970-row model of a generated 16-building DeepSeek-V3 instance ran 25 s under a
1 s limit, 35 LP iterations in all. The fork costs 5-10 ms, a few % of a run on such a model but as much as a whole
run on the small models below it, which have not been seen to overrun."""
HARD_CAP = (1.05, 0.05)
"""A forked run is killed (factor, seconds) after its time limit: limit x 1.05 + 0.05 s, time for HiGHS to stop on its
own and report; a killed run keeps no point and proves no bound."""


class SolverFailure(RuntimeError):
    """HiGHS failed on a model (an internal error) without a point (`solve_milp`)."""


@dataclass(frozen=True)
class HighsRun:
    """What one HiGHS run established: its status (None: HiGHS failed, `detail` says how), the objective of the point
    it holds (None without a feasible one), its lower bound (None when it proved none) and the point itself (column
    values, with the objective); the LP iterations and nodes it took (-1: not known, a killed run) and its work
    (`work.run_s`)."""

    status: MILPStatus | None
    objective: float | None
    bound: float | None
    point: np.ndarray | None = None
    detail: str = ""
    iterations: int = -1
    nodes: int = -1
    work_s: float = 0.0


def finished_run(highs: highspy.Highs, mip: bool) -> HighsRun:
    """What the run `highs` just finished established."""
    info, status = highs.getInfo(), highs.getModelStatus()
    objective = info.objective_function_value if info.primal_solution_status == FEASIBLE else None
    proved = info.mip_dual_bound if mip and info.mip_node_count >= 0 else None
    bound = proved if proved is not None else objective if status == _HMS.kOptimal else None
    point = np.asarray(highs.getSolution().col_value) if objective is not None else None
    return HighsRun(STATUS.get(status), objective, bound, point, status.name, info.simplex_iteration_count,
                    info.mip_node_count)


def forked_run(highs: highspy.Highs, mip: bool, cap_s: float) -> HighsRun:
    """Run `highs` in a forked child (a copy-on-write image of this process) and return what it established, or a
    time-limit run without point or bound when it has not reported within `cap_s` seconds (the child is killed)."""
    reader, writer = Pipe(duplex=False)
    with warnings.catch_warnings():  # HiGHS's idle worker threads: the child only runs HiGHS, and is killed if stuck
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child
        try:
            reader.close()
            highspy.Highs.resetGlobalScheduler(True)  # the parent's worker threads do not exist here
            highs.run()
            writer.send(finished_run(highs, mip))
        finally:
            os._exit(0)
    writer.close()
    return _collect(reader, pid, cap_s)


def _collect(reader: Connection, pid: int, cap_s: float) -> HighsRun:
    """The child's report within `cap_s`; the child is reaped, killed first unless it reported."""
    reported = False
    try:
        if not reader.poll(cap_s):
            return HighsRun(MILPStatus.time_limit, None, None, detail="killed at its time limit")
        try:
            run = reader.recv()
        except EOFError:
            return HighsRun(None, None, None, detail="the HiGHS child process ended without a report")
        reported = True
        return run
    finally:
        reader.close()
        if not reported:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def resting_value(var: pyo.Var) -> float:
    """A variable no row reads: 0 within its bounds."""
    return min(max(0.0, -math.inf if var.lb is None else var.lb), math.inf if var.ub is None else var.ub)


class HighsModel:
    """A Pyomo model and its HiGHS twin, translated once when this is made.

    Every active variable that appears in a row or the objective is a column (a variable fixed at translation is a
    column too, so it can be unfixed later); each run sends the columns' bounds, a fixed variable's as lb = ub =
    its value, and loads the point it finds only when asked (`load`). Rows and the objective are never re-read, so a
    caller that changes them tells HiGHS itself (`polish`)."""

    def __init__(self, model: pyo.ConcreteModel):
        self.model = model
        self.point: np.ndarray | None = None
        """The column values of the last run's point (None without one)."""
        held = [(var, var.value) for var in model.component_data_objects(pyo.Var, active=True) if var.fixed]
        for var, _ in held:
            var.unfix()
        try:
            form = LinearStandardFormCompiler().write(model, mixed_form=True, set_sense=None)
        finally:
            for var, value in held:
                var.fix(value)
        self.columns = list(form.columns)
        self.column = {id(var): i for i, var in enumerate(self.columns)}
        self.unused = [var for var in model.component_data_objects(pyo.Var, active=True)
                       if id(var) not in self.column]
        """Variables no row or objective reads (only ever with a zero coefficient): loaded as 0 within bounds."""
        self.cost = form.c.toarray()[0] if form.c.shape[0] else np.zeros(len(self.columns))
        self.mip = any(var.is_integer() for var in self.columns)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = len(self.columns), len(form.rows)
        lp.col_cost_ = self.cost
        lp.offset_ = float(form.c_offset[0]) if len(form.c_offset) else 0.0
        if form.objectives and form.objectives[0].sense == pyo.maximize:
            lp.sense_ = highspy.ObjSense.kMaximize
        lp.col_lower_, lp.col_upper_ = self._bounds()
        sense, rhs = np.array([row.bound_type for row in form.rows]), np.asarray(form.rhs, dtype=float)
        lp.row_lower_ = np.where(sense <= 0, rhs, -highspy.kHighsInf)  # -1: >= rhs, 0: == rhs, +1: <= rhs
        lp.row_upper_ = np.where(sense >= 0, rhs, highspy.kHighsInf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = form.A.indptr, form.A.indices, form.A.data
        lp.integrality_ = [highspy.HighsVarType.kInteger if var.is_integer() else highspy.HighsVarType.kContinuous
                           for var in self.columns]
        self.highs = highspy.Highs()
        self.highs.setOptionValue("output_flag", False)
        self.highs.passModel(lp)

    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Each column's (lower, upper): its value twice when fixed, else its bounds (infinite when None)."""
        lower = np.array([var.value if var.fixed else -highspy.kHighsInf if var.lb is None else var.lb
                          for var in self.columns], dtype=float)
        upper = np.array([var.value if var.fixed else highspy.kHighsInf if var.ub is None else var.ub
                          for var in self.columns], dtype=float)
        return lower, upper

    def run(self, *, threads: int | None, options: dict[str, object], work_limit_s: float | None = None) -> HighsRun:
        """One HiGHS run on the model as it stands (its variables' current fixings and bounds); nothing loaded. A MIP
        run with `work_limit_s` is interrupted at its first limit check past that work (`work.checked_s`): the
        checks come at the same points of the same run whatever the machine's load, so the run stops at the same
        point (status work_limit). Its work is `work.run_s` of what it took (the cap, or the wall seconds it ran,
        when it was killed at its time limit and reported nothing)."""
        # HiGHS keeps one thread scheduler per process, sized by the first solve; a later solve asking for another
        # thread count fails outright unless the scheduler is reset (we never run two solves at once).
        highspy.Highs.resetGlobalScheduler(True)
        lower, upper = self._bounds()
        self.highs.changeColsBounds(len(self.columns), np.arange(len(self.columns), dtype=np.int32), lower, upper)
        for name, value in (NO_LIMIT_OPTIONS | {"threads": threads or 0} | options).items():
            self.highs.setOptionValue(name, value)
        limit = float(self.highs.getOptionValue("time_limit")[1])
        rows, nonzeros = self.highs.getNumRow(), self.highs.getNumNz()
        capped = self.mip and work_limit_s is not None and math.isfinite(work_limit_s)
        if capped:
            self._cap(rows, nonzeros, work_limit_s)
        start = time.perf_counter()
        try:
            if self.mip and math.isfinite(limit) and rows >= FORKED_ROWS and hasattr(os, "fork"):
                run = forked_run(self.highs, self.mip, limit * HARD_CAP[0] + HARD_CAP[1])
            else:
                self.highs.run()
                run = finished_run(self.highs, self.mip)
        finally:
            if capped:
                self.highs.stopCallback(highspy.cb.HighsCallbackType.kCallbackMipInterrupt)
        seconds = (work.run_s(rows, nonzeros, run.iterations, run.nodes) if run.iterations >= 0
                   else work_limit_s if capped else time.perf_counter() - start)
        status = MILPStatus.work_limit if capped and run.status is MILPStatus.interrupted else run.status
        run = replace(run, status=status, work_s=seconds)
        self.point = run.point
        return run

    def _cap(self, rows: int, nonzeros: int, work_limit_s: float) -> None:
        """Interrupt the next MIP run at its first limit check past `work_limit_s` (`work.checked_s`)."""
        checks = 0

        def interrupt(kind: object, message: str, data_out: object, data_in: highspy.cb.HighsCallbackInput,
                      user_data: object) -> None:
            nonlocal checks
            checks += 1
            if work.checked_s(rows, nonzeros, checks) >= work_limit_s:
                data_in.user_interrupt = True

        self.highs.setCallback(interrupt, None)
        self.highs.startCallback(highspy.cb.HighsCallbackType.kCallbackMipInterrupt)

    def load(self) -> None:
        """Load the point of the last run into the model's variables."""
        if self.point is None:
            raise RuntimeError(f"the last HiGHS run on {self.model.name} holds no point to load")
        for var, value in zip(self.columns, self.point, strict=True):
            var.set_value(value, skip_validation=True)
        for var in self.unused:
            if not var.fixed:
                var.set_value(resting_value(var), skip_validation=True)

    def add_row(self, row: pyo.ConstraintData) -> None:
        """Send one more row of the model (lb <= body <= ub over its columns, already in the Pyomo model) to HiGHS,
        its variables read as columns even while fixed (a fixing reaches HiGHS as bounds, and is undone later)."""
        variables = list(identify_variables(row.body, include_fixed=True))
        self._add_columns([var for var in variables if id(var) not in self.column])
        fixed = [(var, var.value) for var in variables if var.fixed]
        for var, _ in fixed:
            var.unfix()
        try:
            columns, coefficients, constant = self.linear(row.body)
        finally:
            for var, value in fixed:
                var.fix(value)
        lower = -highspy.kHighsInf if row.lb is None else row.lb - constant
        upper = highspy.kHighsInf if row.ub is None else row.ub - constant
        self.highs.addRow(lower, upper, len(columns), np.array(columns, dtype=np.int32), np.array(coefficients))

    def _add_columns(self, variables: list[pyo.Var]) -> None:
        """Make columns of variables no row read at translation (`unused`) and that a row sent later reads (a
        critical-path cut reads tx[b] even where every other row left it out: PP 8 over 5 microbatches, where no
        steady send recurs; generated small seed 6 hit it with session 23's unlanded bubble rows, a KeyError
        mid-search): cost 0 and their integrality; their bounds reach HiGHS with every run (`run`), as all columns'."""
        if not variables:
            return
        added = {id(var) for var in variables}
        self.unused = [var for var in self.unused if id(var) not in added]
        for var in variables:
            self.column[id(var)] = len(self.columns)
            self.columns.append(var)
            self.highs.addCol(0.0, -highspy.kHighsInf, highspy.kHighsInf, 0, np.array([], dtype=np.int32),
                              np.array([], dtype=float))
            if var.is_integer():
                self.highs.changeColIntegrality(len(self.columns) - 1, highspy.HighsVarType.kInteger)
        self.cost = np.append(self.cost, np.zeros(len(variables)))
        self.mip = self.mip or any(var.is_integer() for var in variables)
        if self.point is not None:  # the last run's point, the new columns at rest
            self.point = np.append(self.point, [resting_value(var) for var in variables])

    def linear(self, expr: NumericValue) -> tuple[list[int], list[float], float]:
        """(columns, coefficients, constant) of a linear expression of the model's columns."""
        repn = generate_standard_repn(expr, compute_values=True)
        return ([self.column[id(var)] for var in repn.linear_vars], [float(c) for c in repn.linear_coefs],
                float(repn.constant))


@dataclass(frozen=True)
class MILPOutcome:
    """What one solve established: `incumbent` is None when no feasible point was found; `bound` is a valid
    lower bound on the objective (the cutoff itself when HiGHS proved nothing beats the cutoff)."""

    status: MILPStatus
    incumbent: float | None
    bound: float
    wall_s: float
    work_s: float = 0.0
    """Its runs' work (`HighsRun.work_s`)."""

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
    work_limit_s: float | None = None,
) -> MILPOutcome:
    """Solve to `rel_gap` within `time_limit_s` (wall), `max_nodes` branch-and-bound nodes and `work_limit_s` of work
    (`HighsModel.run`; both budgets in solver work: the same answer whatever the machine's load); with `cutoff`,
    points not better than it are pruned.
    Loads the incumbent into the model only when it beats `cutoff` (HiGHS may report a worse point it found
    before the cutoff pruned its subtree), so a model keeps the best solution loaded into it so far; never
    raises on time limit or infeasibility."""
    options: dict[str, object] = {"mip_rel_gap": rel_gap, "time_limit": max(time_limit_s, 0.1)}
    if cutoff is not None:
        options["objective_bound"] = cutoff
    if max_nodes is not None:
        options["mip_max_nodes"] = max_nodes
    start = time.perf_counter()
    run = highs.run(threads=threads, options=options, work_limit_s=work_limit_s)
    spent = run.work_s
    if run.status is None and run.detail == _HMS.kSolveError.name:
        run = highs.run(threads=threads, options=options | {"mip_feasibility_tolerance": RETRY_FEASIBILITY},
                        work_limit_s=work_limit_s)
        spent += run.work_s
    wall = time.perf_counter() - start
    feasible = run.objective is not None and (cutoff is None or run.objective < cutoff)
    if feasible:
        highs.load()
    if run.status is None and not feasible:
        raise SolverFailure(f"HiGHS failed on {highs.model.name} ({run.detail}); run with fewer threads or report it")
    if run.status in CLOSED and not feasible:
        closed = MILPStatus.infeasible if cutoff is None else MILPStatus.cut_off  # nothing beats the cutoff
        return MILPOutcome(closed, None, math.inf if cutoff is None else cutoff, wall, spent)
    bound = run.bound
    bound = max(bound, 0.0) if bound is not None and bound == bound else 0.0
    bound = bound if cutoff is None else min(bound, cutoff)
    return MILPOutcome(run.status or MILPStatus.interrupted, run.objective if feasible else None, bound, wall, spent)


def snapshot(model: pyo.ConcreteModel) -> list[float | None]:
    """The values of every variable of `model`, in component order: an incumbent kept apart from the model, which
    later solves (other patterns fixed on the same model) overwrite."""
    return [v.value for v in model.component_data_objects(pyo.Var)]


def restore(model: pyo.ConcreteModel, values: list[float | None]) -> None:
    """Load values taken by `snapshot` back into `model`."""
    for var, value in zip(model.component_data_objects(pyo.Var), values, strict=True):
        var.set_value(value, skip_validation=True)


def _solve_lp(highs: HighsModel, threads: int | None, deadline: float) -> bool:
    """Solve the model (its integers fixed) as an LP by `deadline` (perf_counter seconds) and load the solution;
    False when HiGHS does not solve it to optimality in time."""
    run = highs.run(threads=threads, options={"time_limit": max(deadline - time.perf_counter(), 0.01)})
    if run.status is not MILPStatus.optimal or run.objective is None:
        return False
    highs.load()
    return True


def polish(highs: HighsModel, objective: NumericValue, threads: int | None, time_limit_s: float = math.inf) -> float:
    """Make the loaded solution exact and slack-free; returns its exact objective.

    With every integer variable fixed at its rounded value, (1) re-solve the LP: a MILP incumbent may use the
    integrality tolerance (a binary at 1 - 1e-7 relaxes a big-M row by M 1e-7), so the exact objective can be a
    little higher; (2) hold the objective there (one row added to HiGHS) and minimise the sum of the continuous
    variables. They are all epigraph variables (lower-bounded times and loads), so each ends at the smallest value
    its rows allow and the plan's breakdown reads what binds, not slack. A step HiGHS declares infeasible (a point
    that only held within the tolerances), or does not finish within `time_limit_s` of the call, is skipped: the
    values of the step before stay loaded."""
    deadline = time.perf_counter() + time_limit_s
    model, solver = highs.model, highs.highs
    discrete = [v for v in highs.columns if v.is_integer() and not v.fixed]
    continuous = [i for i, v in enumerate(highs.columns) if not v.is_integer() and not v.fixed]
    kept = snapshot(model)
    for var in discrete:
        var.fix(round(pyo.value(var)))
    everything = np.arange(len(highs.columns), dtype=np.int32)
    held = False
    try:
        if not _solve_lp(highs, threads, deadline):
            restore(model, kept)
            return pyo.value(objective)
        exact = pyo.value(objective)
        kept = snapshot(model)
        columns, coefficients, constant = highs.linear(objective)
        solver.addRow(-highspy.kHighsInf, exact * (1 + 1e-9) + 1e-12 - constant, len(columns),
                      np.array(columns, dtype=np.int32), np.array(coefficients))
        held = True
        sum_of_continuous = np.zeros(len(highs.columns))
        sum_of_continuous[continuous] = 1.0
        solver.changeColsCost(len(everything), everything, sum_of_continuous)
        if not _solve_lp(highs, threads, deadline):
            restore(model, kept)
    finally:
        if held:
            solver.deleteRows(1, np.array([solver.getNumRow() - 1], dtype=np.int32))
            solver.changeColsCost(len(everything), everything, highs.cost)
        for var in discrete:
            var.unfix()
    return exact
