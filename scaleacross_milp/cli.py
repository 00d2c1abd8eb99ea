"""Command line: `scaleacross-milp solve | evaluate | baseline | validate | schema | calibrate | batch | frontier |
plot`.

Exit codes:
  0  success;
  1  no feasible layout found within the time limit (NoPlanFound: the instance may still be feasible);
  2  a problem with the input: unreadable or malformed file, invalid field, infeasible instance (e.g. the
     model does not fit in memory), existing output file without --force, bad option;
  3  internal error: the solver produced a plan that violates the plan contract, or any unexpected exception in
     any command (one line naming it, never a traceback; a bug, please report);
  130  `batch` interrupted by Ctrl-C (finished results kept). `frontier` exits 1 when no value of the range holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from scaleacross_milp.baselines.result import Kind
from scaleacross_milp.loader import load_instance
from scaleacross_milp.report.summary import render_plan, render_usage
from scaleacross_milp.report.verification import render_verification
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.jsonfile import FileProblems, InputError, error_lines, read_json, validate_json
from scaleacross_milp.spec.plan import Layout, Plan, Verification
from scaleacross_milp.spec.search import Objective

if TYPE_CHECKING:
    from scaleacross_milp.verify.layout import ResolvedLayout

EXIT_NO_PLAN = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 3


CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
"""Usage errors (bad option, missing argument) of the click typer runs on (its own copy since typer 0.2x)."""


class GuardedGroup(TyperGroup):
    """Every command runs under a guard: an unexpected exception prints one line naming it and exits 3."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, CLICK_ERROR):
            raise
        except Exception as exc:  # the promise: no traceback, whatever fails
            raise internal_error(exc) from None


def internal_error(exc: Exception) -> typer.Exit:
    """`error: internal error: Type: message` on one line of stderr, exit 3."""
    message = " ".join(str(exc).split())
    return fail(f"internal error: {type(exc).__name__}{': ' + message if message else ''} (please report)",
                EXIT_INTERNAL)


app = typer.Typer(
    cls=GuardedGroup,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Optimise LLM training layouts across data-center buildings (Pyomo + HiGHS).",
)


def console(stderr: bool = False) -> Console:
    """Plain text lines are not wrapped (they stay greppable); tables use the terminal width."""
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    console(stderr=True).print(f"[bold red]error:[/bold red] {escape(message)}")
    return typer.Exit(code)


def report_input_error(exc: InputError) -> typer.Exit:
    """One line per problem: `error: FILE: field: message`, or `error: FILE: N problems` and one line each."""
    if not isinstance(exc, FileProblems) or len(exc.lines) == 1:
        return fail(str(exc))
    err = console(stderr=True)
    err.print(f"[bold red]error:[/bold red] {escape(str(exc.source))}: {len(exc.lines)} problems")
    for line in exc.lines:
        err.print(f"  {line}", markup=False)
    return typer.Exit(EXIT_INPUT)


def load_or_exit(path: Path) -> Instance:
    try:
        return load_instance(path)
    except InputError as exc:
        raise report_input_error(exc) from None


def positive(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise typer.BadParameter(f"must be > 0, got {value:g}")
    return value


def fraction(value: float | None) -> float | None:
    if value is not None and not 0 <= value < 1:
        raise typer.BadParameter(f"must be in [0, 1), got {value:g}")
    return value


InstanceArg = Annotated[Path, typer.Argument(help="instance JSON file", dir_okay=False)]
ForceOpt = Annotated[bool, typer.Option("--force", help="overwrite existing output files")]
TraceOpt = Annotated[Path | None, typer.Option(
    "--trace", help="write a Chrome trace of the replay (chrome://tracing, Perfetto)")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="draw the replay's per-stage timeline (PNG)")]


def check_outputs(outputs: list[Path | None], inputs: list[Path], force: bool) -> None:
    """Before any work, refuse an output path that could not be written or would overwrite what the user gave:
    a directory, a missing or read-only directory, one path for two outputs, an input of the command, an
    existing file without --force."""
    read, written = {path.resolve() for path in inputs}, set()
    for path in (p for p in outputs if p is not None):
        if path.resolve() in read:
            raise fail(f"{path} is an input of this command; not overwriting it")
        if path.resolve() in written:
            raise fail(f"{path} is given for two outputs")
        written.add(path.resolve())
        if path.is_dir():
            raise fail(f"{path} is a directory; give a file name")
        if not path.parent.is_dir():
            raise fail(f"{path}: directory {path.parent} does not exist")
        if not os.access(path.parent, os.W_OK):
            raise fail(f"{path}: cannot write into directory {path.parent}")
        if path.exists() and not force:
            raise fail(f"{path} exists; not overwriting it (use --force)")


@app.command()
def solve(
    instance: InstanceArg,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write the plan JSON here")] = None,
    force: ForceOpt = False,
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", callback=positive,
        help="seconds > 0: the search's work budget, in seconds of the reference machine, and its wall-clock limit "
             "(default: search.time_limit_s)")] = None,
    gap: Annotated[float | None, typer.Option(
        "--gap", callback=fraction, help="relative MIP gap in [0, 1) (default: search.rel_gap)")] = None,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="HiGHS threads")] = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="skip the replay of the chosen plan")] = False,
    trace: TraceOpt = None,
    plot: PlotOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no live progress on stderr")] = False,
    compare: Annotated[bool, typer.Option(
        "--compare", help="also price every baseline (production, framework, single-dimension, exhaustive when "
                          "small enough) with the verifier and print the optimiser's speedup over each")] = False,
) -> None:
    """Find the fastest layout, replay it (unless --no-verify) and print both; write the plan JSON only with -o."""
    from scaleacross_milp.milp.solve import NoPlanFound, solve_instance
    from scaleacross_milp.report.attach import attach_usage
    from scaleacross_milp.report.progress import LiveProgress

    if no_verify and (trace or plot or compare):
        raise fail("--trace, --plot and --compare need the replay; drop --no-verify")
    check_outputs([output, trace, plot], [instance], force)
    spec = load_or_exit(instance)
    try:
        with LiveProgress(enabled=not quiet, cost=spec.search.objective is Objective.cost) as progress:
            plan = solve_instance(spec, time_limit_s=time_limit, rel_gap=gap, threads=threads, progress=progress)
    except InputError as exc:
        raise fail(f"{instance}: infeasible: {exc}") from None
    except NoPlanFound as exc:
        raise fail(str(exc), EXIT_NO_PLAN) from None
    except ValidationError as exc:  # the input was valid, so this is the solver's output failing the contract
        details = "; ".join(error_lines(exc))
        message = f"internal error: the solver built an invalid {exc.title}: {details}"
        raise fail(message, EXIT_INTERNAL) from None
    try:
        plan = attach_usage(spec, plan)
    except InputError as exc:
        raise solver_plan_error("check", exc) from None
    render_plan(plan, console())
    render_usage(plan.usage, console())
    if not no_verify:
        plan, verification = verify_and_report(spec, plan, Path(), trace, plot, force, internal=True)
        if compare:
            from scaleacross_milp.baselines.compare import compare as compare_baselines
            from scaleacross_milp.report.comparison import render_comparison

            rows = compare_baselines(spec, verification.tokens_per_s, time_limit)
            render_comparison(rows, verification, console())
            plan = plan.model_copy(update={"comparison": rows})
    if output is not None:
        write_plan(plan, output, force)


@app.command(name="baseline")
def baseline_command(
    instance: InstanceArg,
    kind: Annotated[Kind, typer.Option("--kind", help="which baseline")] = Kind.production,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write the baseline's layout JSON here "
                                                                       "(evaluate reads it)")] = None,
    force: ForceOpt = False,
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", callback=positive, help="seconds per MILP solve of single-dimension's placement step")] = None,
) -> None:
    """Build a baseline layout (what the optimiser is measured against), replay it and print the verifier's report
    as `evaluate` does; write the layout with -o."""
    from scaleacross_milp.baselines import baseline
    from scaleacross_milp.report.comparison import baseline_lines
    from scaleacross_milp.report.usage import plan_usage

    check_outputs([output], [instance], force)
    spec = load_or_exit(instance)
    try:
        result = baseline(spec, kind, time_limit)
    except InputError as exc:
        raise fail(str(exc)) from None
    for line in baseline_lines(result):
        console().print(line)
    render_verification(result.verification, console())
    resolved = check_or_exit(spec, result.layout, Path(), internal=True)
    render_usage(plan_usage(spec, resolved, result.iteration_s), console())
    if output is not None:
        write_file(output, force, lambda handle: handle.write(result.layout.model_dump_json(indent=2, exclude_none=True)
                                                              + "\n"), "layout", binary=False)


def load_layout(path: Path) -> Layout:
    """A plan file (with the optimiser's report) or a bare layout; problems name the field."""
    data = read_json(path)
    return validate_json(Plan if isinstance(data, dict) and "prediction" in data else Layout, data, path)


def check_or_exit(spec: Instance, layout: Layout, base_dir: Path, internal: bool = False,
                  allow_infeasible: bool = False) -> ResolvedLayout:
    """verify.layout.check: exit 2 naming the inconsistent field, or the binding figure of what the hardware
    cannot run (memory, NVLink domain, building capacity), which `allow_infeasible` lets through to be priced.
    `internal`: the layout came from the solver, so a mismatch is a bug (exit 3) and infeasibility is only
    reported."""
    from scaleacross_milp.verify.layout import InfeasibleLayout, check

    try:
        return check(spec, layout, base_dir, allow_infeasible or internal)
    except InfeasibleLayout as exc:
        raise fail(f"infeasible layout: {exc} (--allow-infeasible prices it anyway)") from None
    except InputError as exc:
        if internal:
            raise solver_plan_error("check", exc) from None
        raise fail(str(exc)) from None


def solver_plan_error(step: str, exc: Exception) -> typer.Exit:
    """The solver's own plan failed `step` (check, replay): a bug, exit 3."""
    return fail(f"internal error: the solver's plan does not {step}: {exc}", EXIT_INTERNAL)


def verify_and_report(spec: Instance, layout: Layout, base_dir: Path, trace: Path | None, plot: Path | None,
                      force: bool, internal: bool = False, predicted_s: float | None = None
                      ) -> tuple[Layout, Verification]:
    """Replay `layout`, print the verification (against `predicted_s` for a layout that is not a Plan), write
    trace / plot; returns the layout (with the verification attached when it is a Plan) and the verification.
    `internal`: the layout came from the solver, so a mismatch is a bug (exit 3)."""
    from scaleacross_milp.report.attach import attach_verification
    from scaleacross_milp.verify.replay import DeadlockError

    try:
        layout, verification, run = attach_verification(spec, layout, base_dir, predicted_s)
    except (InputError, DeadlockError) as exc:
        if internal:
            raise solver_plan_error("replay", exc) from None
        raise fail(str(exc)) from None
    render_verification(verification, console())
    if trace is not None:
        from scaleacross_milp.verify.trace import chrome_trace

        events = chrome_trace(run.records)
        write_file(trace, force, lambda handle: json.dump(events, handle), "trace", binary=False)
    if plot is not None:
        from scaleacross_milp.report.timeline import draw_timeline

        title = f"{spec.name}: replayed iteration {verification.iteration_s:.3f} s"
        write_file(plot, force, lambda handle: draw_timeline(run.records, handle, title), "timeline", binary=True)
    return layout, verification


@app.command()
def evaluate(
    instance: InstanceArg,
    plan: Annotated[Path, typer.Argument(help="plan or layout JSON file (placement optional)", dir_okay=False)],
    force: ForceOpt = False,
    trace: TraceOpt = None,
    plot: PlotOpt = None,
    allow_infeasible: Annotated[bool, typer.Option(
        "--allow-infeasible", help="price a layout that does not fit in memory, puts TP beyond the NVLink domain "
                                   "or overfills a building (marked infeasible in the report)")] = False,
) -> None:
    """Price a fixed plan or layout without optimising: check it as `solve` would, replay it and print the
    verifier's report (beside the MILP's price of the layout, every decision held fixed) and what it leaves
    unused."""
    from scaleacross_milp.milp.price import price_layout
    from scaleacross_milp.report.usage import plan_usage

    check_outputs([trace, plot], [instance, plan], force)
    spec = load_or_exit(instance)
    try:
        layout = load_layout(plan)
    except InputError as exc:
        raise report_input_error(exc) from None
    resolved = check_or_exit(spec, layout, plan.parent, allow_infeasible=allow_infeasible)
    predicted = None
    if isinstance(layout, Plan):
        render_plan(layout, console())
    elif resolved.schedule is not None and not resolved.infeasible:
        predicted = price_layout(spec, resolved.placed())
    _, verification = verify_and_report(spec, layout, plan.parent, trace, plot, force, predicted_s=predicted)
    stats = layout.solve if isinstance(layout, Plan) else None
    render_usage(plan_usage(spec, resolved, verification.iteration_s, stats), console())


def write_file(output: Path, force: bool, write: Callable[[IO], None], what: str, binary: bool) -> None:
    """Write through `write`; an existing file is kept unless `force`."""
    mode = ("w" if force else "x") + ("b" if binary else "")
    try:
        with output.open(mode) as handle:
            write(handle)
    except FileExistsError:
        raise fail(f"{output} exists; not overwriting it (use --force)") from None
    except OSError as exc:
        raise fail(f"{output}: cannot write ({exc.strerror})") from None
    console().print(f"{what.capitalize()} written to {escape(str(output))}")


def write_plan(plan: Plan, output: Path, force: bool) -> None:
    write_file(output, force, lambda handle: handle.write(plan.model_dump_json(indent=2) + "\n"), "plan",
               binary=False)


def degrees(values) -> str:
    return ", ".join(str(v) for v in sorted(set(values))) or "none"


def search_lines(spec: Instance) -> list[str]:
    """The degrees actually searched: those of the enumerated shapes (before memory and capacity screens)."""
    from scaleacross_milp.milp.shapes import enumerate_shapes

    search, shapes = spec.search, enumerate_shapes(spec)
    return [
        f"  searched: {len(shapes):,} shapes; TP {degrees(s.tp for s in shapes)}; "
        f"CP {degrees(s.cp for s in shapes)}; EP {degrees(s.ep for s in shapes)}; "
        f"PP {degrees(s.pp for s in shapes)}; "
        f"micro-batch {degrees(s.micro_batch for s in shapes)}",
        f"  schedules {', '.join(s.value for s in search.schedules)}; "
        f"DP modes {', '.join(m.value for m in search.dp_modes)}; time limit {search.time_limit_s:g} s, "
        f"gap {search.rel_gap:.2%}",
    ]


def instance_lines(spec: Instance) -> list[str]:
    model, training = spec.model_spec, spec.training
    kind = f"MoE {model.moe.experts} experts top-{model.moe.top_k}" if model.moe else "dense"
    lines = [
        f"Instance {spec.name}: model {model.name} ({model.layers} layers, hidden {model.hidden}, {kind})",
        f"  training: seq {training.seq_len}, global batch {training.batch_sequences} sequences, "
        f"{training.precision.value}, recompute {training.recompute.value}",
    ]
    lines += [f"  building {b.name}: {b.gpus:,} GPUs {b.gpu_type}" for b in spec.topology.buildings]
    lines += [f"  link {link.a}-{link.b}: {link.capacity_gbit_s:,g} Gbit/s, "
              f"{link.one_way_latency_s * 1e3:.3f} ms one way" for link in spec.topology.links]
    return lines + search_lines(spec)


@app.command()
def validate(instance: InstanceArg) -> None:
    """Check an instance file and print a short summary, or every problem found (exit 2)."""
    spec = load_or_exit(instance)
    out = console()
    for line in instance_lines(spec):
        out.print(line, markup=False)
    out.print("OK")


class PerfName(str, Enum):
    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"
    alltoall = "alltoall"
    sendrecv = "sendrecv"


class MeasuredTierName(str, Enum):
    nvlink = "nvlink"
    fabric = "fabric"


@app.command()
def calibrate(
    logs: Annotated[list[Path] | None, typer.Argument(help="nccl-tests output files", dir_okay=False)] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="profile JSON to write (a directory with --rebuild-defaults)")] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite existing output")] = False,
    name: Annotated[str | None, typer.Option(help="profile name (default: the output file's stem)")] = None,
    collective: Annotated[PerfName | None, typer.Option(help="for logs that do not name it")] = None,
    ranks: Annotated[int | None, typer.Option(min=2, help="for logs without '# Rank' lines")] = None,
    nodes: Annotated[int | None, typer.Option(min=1, help="for logs without '# Rank ... on HOST' lines")] = None,
    tier: Annotated[MeasuredTierName | None, typer.Option(help="nvlink (one node) or fabric (several)")] = None,
    gpu_model: Annotated[str | None, typer.Option(help="e.g. H100, for logs that do not name the GPU")] = None,
    gpus_per_node: Annotated[int, typer.Option(min=1, help="GPUs per node / NVLink domain")] = 8,
    rebuild_defaults: Annotated[Path | None, typer.Option(
        "--rebuild-defaults", file_okay=False, help="rebuild the bundled profiles from this nccl-tests folder")] = None,
) -> None:
    """Fit collective profiles from nccl-tests logs and print the fit quality at every measured size. The
    given --collective/--ranks/--nodes/--tier/--gpu-model apply to every LOG and must agree with what a log
    states."""
    from scaleacross_milp.calibration import defaults
    from scaleacross_milp.calibration.assemble import Given, profile_from_logs
    from scaleacross_milp.calibration.nccl_tests import PERF_NAMES, LogError
    from scaleacross_milp.calibration.report import render_fit

    if rebuild_defaults is not None:
        if logs or output is None:
            raise fail("--rebuild-defaults takes no LOG and needs -o DIR (the folder to write the profiles to)")
        if not output.is_dir():
            raise fail(f"{output}: not a directory (--rebuild-defaults writes one profile per bundled name into it)")
        targets = {n: output / f"{n}.json" for n in defaults.bundled_names()}
    elif not logs:
        raise fail("give at least one nccl-tests LOG (or --rebuild-defaults DIR)")
    else:
        targets = {name or (output.stem if output else "profile"): output}
    check_outputs(list(targets.values()), logs or [], force)
    given = Given(PERF_NAMES[collective.value] if collective else None, ranks, nodes,
                  tier.value if tier else None, gpu_model)
    try:
        if rebuild_defaults is not None:
            profiles, caveat = [defaults.build_bundle(n, rebuild_defaults) for n in targets], None
        else:
            profile, caveat = profile_from_logs(logs, next(iter(targets)), given, gpus_per_node=gpus_per_node)
            profiles = [profile]
    except (LogError, InputError) as exc:
        raise fail(str(exc)) from None
    if caveat is not None:
        console(stderr=True).print(f"[bold yellow]warning:[/bold yellow] {escape(caveat)}")
    out = console()
    for profile in profiles:
        render_fit(profile, out, detail=rebuild_defaults is None)
        target = targets[profile.name]
        if target is not None:
            text = profile.to_json()
            write_file(target, force, lambda handle, text=text: handle.write(text), "profile", binary=False)


class SchemaKind(str, Enum):
    instance = "instance"
    plan = "plan"
    layout = "layout"
    sweep = "sweep"


@app.command()
def schema(kind: Annotated[SchemaKind, typer.Argument(help="which contract")] = SchemaKind.instance) -> None:
    """Print the JSON Schema of an instance (default), a plan, a layout (what evaluate reads) or a sweep (what
    batch reads)."""
    from scaleacross_milp.sweep.spec import Sweep

    model = {SchemaKind.instance: Instance, SchemaKind.plan: Plan, SchemaKind.layout: Layout,
             SchemaKind.sweep: Sweep}[kind]
    typer.echo(json.dumps(model.model_json_schema(), indent=2))


EXIT_INTERRUPTED = 130
"""Ctrl-C during a batch (128 + SIGINT, as shells report it)."""
WorkersOpt = Annotated[int | None, typer.Option("--workers", min=1, help="solves at once (default: CPUs)")]
BatchLimitOpt = Annotated[float | None, typer.Option(
    "--time-limit", callback=positive, help="seconds > 0 per scenario (default: each scenario's search.time_limit_s); "
                                            "a scenario still running at twice this is killed")]
RayOpt = Annotated[str | None, typer.Option(
    "--ray", help="run on Ray: 'auto' (the running cluster), an address, or 'local' (start one here with --workers "
                  "CPUs); needs the ray extra")]
RetriesOpt = Annotated[int, typer.Option("--retries", min=0, help="runs again of a crashed or timed-out scenario")]


def output_dir(path: Path) -> Path:
    """The results folder, created if missing; exit 2 when it is a file or cannot be created."""
    if path.exists() and not path.is_dir():
        raise fail(f"{path} is a file; give a folder for the results")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"{path}: cannot create the results folder ({exc.strerror})") from None
    return path


def executor_or_exit(ray: str | None, workers: int | None):
    """A LocalPool of `workers` spawned processes, or a RayPool on `ray`; exit 2 when Ray is asked but missing."""
    from scaleacross_milp.batch.local import LocalPool
    from scaleacross_milp.batch.ray_cluster import RayPool, RayUnavailable

    count = workers or os.cpu_count() or 1
    if ray is None:
        return LocalPool(count)
    try:
        return RayPool(ray, cpus=count)
    except (RayUnavailable, ConnectionError) as exc:  # not installed; no cluster at that address
        raise fail(f"--ray {ray}: {exc}") from None


@app.command()
def batch(
    sweep: Annotated[Path, typer.Argument(help="sweep JSON file (schema: `schema sweep`)", dir_okay=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="results folder (created; re-running resumes)")],
    workers: WorkersOpt = None,
    time_limit: BatchLimitOpt = None,
    ray: RayOpt = None,
    retries: RetriesOpt = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no live progress on stderr")] = False,
) -> None:
    """Solve every scenario of a sweep and replay its plan: one result JSON per scenario as it finishes, then
    summary.csv and summary.parquet. Re-running resumes: finished scenarios are kept, crashed or timed-out ones
    run again. Every broken scenario is reported before anything is solved (exit 2)."""
    from scaleacross_milp.batch.display import BatchProgress, batch_lines
    from scaleacross_milp.batch.runner import run_batch
    from scaleacross_milp.sweep.expand import load_scenarios

    try:
        scenarios, merged = load_scenarios(sweep)
    except InputError as exc:
        raise report_input_error(exc) from None
    out = console()
    out.print(f"Sweep {escape(str(sweep))}: {len(scenarios):,} scenarios"
              + (f" ({merged:,} duplicates merged)" if merged else ""))
    folder = output_dir(output)
    with executor_or_exit(ray, workers) as executor, BatchProgress(enabled=not quiet) as progress:
        report = run_batch(scenarios, folder, executor, time_limit, retries, progress)
    for line in batch_lines(report, {s.id: s.label() for s in scenarios}, folder):
        out.print(line, markup=False)
    if report.interrupted:
        raise fail("interrupted: running solves killed; finished results kept (re-run the command to resume)",
                   EXIT_INTERRUPTED)


@app.command(name="frontier")
def frontier_command(
    instance: InstanceArg,
    vary: Annotated[str, typer.Option("--vary", help="link_capacity_scale, building_gpus_scale, buildings "
                                                     "(least value wanted), link_distance_km, loss_rate (most)")],
    within: Annotated[float, typer.Option("--within", callback=positive,
                                          help="percent of the instance's own verified iteration time")],
    lo: Annotated[float | None, typer.Option("--lo", help="low end of the range searched")] = None,
    hi: Annotated[float | None, typer.Option("--hi", help="high end of the range searched")] = None,
    steps: Annotated[int, typer.Option("--steps", min=1, help="bisection steps after the two ends")] = 6,
    results: Annotated[Path | None, typer.Option(
        "--results", help="folder of result files to reuse and add to (a batch's -o folder works)")] = None,
    time_limit: BatchLimitOpt = None,
) -> None:
    """Find the least capacity (or the most distance, loss) that keeps the optimal verified iteration time within
    --within percent of the instance's own, by bisection over solves; print the curve walked and the answer with
    its bracket."""
    import tempfile

    from scaleacross_milp.batch.display import frontier_lines
    from scaleacross_milp.batch.frontier import FrontierError, frontier
    from scaleacross_milp.batch.local import LocalPool

    spec = load_or_exit(instance)
    out = console()
    with tempfile.TemporaryDirectory() as scratch, LocalPool(1) as pool:
        folder = output_dir(results) if results is not None else Path(scratch)
        try:
            found = frontier(spec, instance, vary, within / 100, pool, folder, time_limit, lo, hi, steps)
        except FrontierError as exc:
            raise fail(str(exc)) from None
    for line in frontier_lines(found, within):
        out.print(line, markup=False)
    if found.answer is None:
        raise typer.Exit(EXIT_NO_PLAN)


class PlotFormat(str, Enum):
    png = "png"
    svg = "svg"


@app.command()
def plot(
    results: Annotated[Path, typer.Argument(help="a batch's results folder (reads summary.parquet)", file_okay=False)],
    x: Annotated[str, typer.Option("--x", help="summary column on the x axis (an axis of the sweep)")],
    y: Annotated[str, typer.Option("--y", help="summary column on the y axis (e.g. verified_iteration_s)")],
    output: Annotated[Path, typer.Option("--output", "-o", help="image to write: .png or .svg")],
    color: Annotated[str | None, typer.Option("--color", help="one series per value of this column")] = None,
    force: ForceOpt = False,
) -> None:
    """Draw a sweep: --y against --x, one series per --color value (dp_mode, pattern, another axis)."""
    from scaleacross_milp.batch.summary import SUMMARY_PARQUET, read_summary
    from scaleacross_milp.report.sweep_plot import PlotError, draw_sweep, series

    fmt = output.suffix.lower().lstrip(".")
    if fmt not in {f.value for f in PlotFormat}:
        raise fail(f"{output}: give a .png or .svg file name")
    check_outputs([output], [], force)
    if not (results / SUMMARY_PARQUET).is_file():
        raise fail(f"{results}: no {SUMMARY_PARQUET} (run `batch SWEEP -o {results}` first)")
    rows = read_summary(results)
    try:
        series(rows, x, y, color)
    except PlotError as exc:
        raise fail(f"{results / SUMMARY_PARQUET}: {exc}") from None
    title = f"{results.name}: {y} against {x}"
    write_file(output, force, lambda handle: draw_sweep(rows, x, y, color, handle, fmt, title), "plot", binary=True)


if __name__ == "__main__":  # pragma: no cover
    app()
