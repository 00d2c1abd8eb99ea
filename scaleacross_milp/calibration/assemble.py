"""Build a Profile from nccl-tests logs: settle each table's collective, ranks, nodes, tier and GPU model, merge
tables of the same (collective, tier, ranks), fit each.

Rules (a value the user gives must agree with what the log states, else LogError):
- collective, ranks, nodes, GPU model: what the log states or implies (nccl_tests), else the user's value;
- tier: nvlink when all ranks sit on one node, fabric when they span nodes; with the node count unknown,
  fabric if ranks > gpus_per_node (they cannot share one node), else the user's --tier or --nodes is needed.
  No log measures the cross-building tier (see calibration.model);
- GPU model: the first model-like token of the `Rank` lines' device name ("NVIDIA H100 80GB HBM3" -> "H100");
- several tables of one key: their sizes are pooled; a size measured twice takes the mean time;
- one profile describes one cluster: logs that state different NCCL library versions or GPU device names are
  refused; logs of several files that do not all state their NCCL version are fitted with a caveat saying so.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scaleacross_milp.calibration.collective import Collective
from scaleacross_milp.calibration.fit import fit_alpha_beta, significant
from scaleacross_milp.calibration.nccl_tests import LogError, Test, parse_log
from scaleacross_milp.calibration.profile import Curve, MeasuredTier, Point, Profile

GPUS_PER_NODE = 8
"""HGX / DGX nodes: 8 GPUs per NVLink domain (set gpus_per_node for NVL72-class systems)."""
_GPU_MODEL = re.compile(r"\b([A-Z]{1,2}\d{2,3}[A-Z]?)\b")


@dataclass(frozen=True)
class Given:
    """What the user states about a log (None: infer from the log)."""

    collective: Collective | None = None
    ranks: int | None = None
    nodes: int | None = None
    tier: MeasuredTier | None = None
    gpu_model: str | None = None


@dataclass(frozen=True)
class Table:
    """A test with every attribute settled."""

    test: Test
    collective: Collective
    tier: MeasuredTier
    ranks: int
    nodes: int | None
    gpu_model: str

    @property
    def source(self) -> str:
        return f"{Path(self.test.file).name}:{self.test.line}"


def gpu_model_of(gpu_name: str | None) -> str | None:
    match = _GPU_MODEL.search(gpu_name or "")
    return match.group(1) if match else None


def _settle(test: Test, what: str, stated, given, hint: str):
    if stated is not None and given is not None and str(stated).lower() != str(given).lower():
        raise LogError(test.file, test.line, f"{what}: the log says {stated}, but {given} was given")
    value = stated if stated is not None else given
    if value is None:
        raise LogError(test.file, test.line, f"cannot tell the {what} from this log; {hint}")
    return value


def settle(test: Test, given: Given, gpus_per_node: int = GPUS_PER_NODE) -> Table:
    """The test's collective, ranks, nodes, tier and GPU model (module rules)."""
    collective = _settle(test, "collective", test.collective, given.collective, "pass --collective")
    ranks = _settle(test, "rank count", test.ranks, given.ranks, "pass --ranks")
    if ranks < 2:
        raise LogError(test.file, test.line, f"{ranks} rank: a collective needs at least 2")
    nodes = test.nodes if test.nodes is not None else given.nodes
    if test.nodes is not None:
        _settle(test, "node count", test.nodes, given.nodes, "")
    implied: MeasuredTier | None = None
    if nodes is not None:
        implied = "nvlink" if nodes == 1 else "fabric"
    elif ranks > gpus_per_node:
        implied = "fabric"
    tier = _settle(test, "tier", implied, given.tier,
                   f"{ranks} ranks may share one {gpus_per_node}-GPU node: pass --tier or --nodes")
    model = _settle(test, "GPU model", gpu_model_of(test.gpu_name), given.gpu_model,
                    "no '# Rank ... on HOST device ...' lines name the GPU: pass --gpu-model")
    return Table(test, collective, tier, ranks, nodes, model.upper())


def curve_of(tables: Sequence[Table]) -> Curve:
    """Pool the tables' sizes (mean time per size) and fit them."""
    first = tables[0]
    times: dict[int, list[float]] = defaultdict(list)
    for table in tables:
        for row in table.test.rows:
            times[row.bytes].append(row.time_s)
    sizes = sorted(times)
    means = [significant(sum(times[s]) / len(times[s]), 9) for s in sizes]
    fit = fit_alpha_beta(first.collective, first.ranks, sizes, means)
    nodes = {t.nodes for t in tables}
    return Curve(
        collective=first.collective,
        tier=first.tier,
        ranks=first.ranks,
        nodes=nodes.pop() if len(nodes) == 1 else None,
        alpha_s=fit.alpha_s,
        bus_bandwidth_bytes_s=fit.bus_bandwidth_bytes_s,
        points=[Point(bytes=s, time_s=t, fit_rel_error=e)
                for s, t, e in zip(sizes, means, fit.rel_errors, strict=True)],
        sources=[t.source for t in tables],
    )


def check_one_cluster(tables: Sequence[Table]) -> None:
    """LogError at the first table whose stated NCCL library version or GPU device name differs from the first
    table stating it."""
    facts = (("NCCL", lambda t: t.test.nccl_version), ("GPU", lambda t: t.test.gpu_name))
    for what, fact in facts:
        stating = [table for table in tables if fact(table) is not None]
        for table in stating[1:]:
            if fact(table) != fact(stating[0]):
                raise LogError(table.test.file, table.test.line,
                               f"{what} {fact(table)}, but {stating[0].source} ran {what} {fact(stating[0])}: logs "
                               f"from different clusters or software; calibrate them separately")


def build_profile(tables: Sequence[Table], name: str, description: str = "") -> Profile:
    """One curve per (collective, tier, ranks), ordered by collective, tier, ranks, from the logs of one cluster."""
    check_one_cluster(tables)
    for table in tables[1:]:
        if table.gpu_model != tables[0].gpu_model:
            raise LogError(table.test.file, table.test.line, f"GPU model {table.gpu_model} differs from "
                           f"{tables[0].gpu_model} ({tables[0].source}); one profile describes one GPU model")
    groups: dict[tuple[str, str, int], list[Table]] = defaultdict(list)
    for table in tables:
        groups[(table.collective, table.tier, table.ranks)].append(table)
    curves = [curve_of(groups[key]) for key in sorted(groups)]
    return Profile(name=name, description=description, gpu_model=tables[0].gpu_model, curves=curves)


def cluster_caveat(tables: Sequence[Table]) -> str | None:
    """What cannot be checked when several files are merged: which of them do not state their NCCL version."""
    files = sorted({Path(t.test.file).name for t in tables})
    silent = sorted({Path(t.test.file).name for t in tables if t.test.nccl_version is None})
    if len(files) < 2 or not silent:
        return None
    return (f"cannot check that the {len(files)} logs come from one cluster: {', '.join(silent)} "
            f"{'does' if len(silent) == 1 else 'do'} not state the NCCL version (a '# nccl-tests version ... "
            f"nccl-library=' line)")


def profile_from_logs(paths: Sequence[Path], name: str, given: Given = Given(), description: str = "",
                      gpus_per_node: int = GPUS_PER_NODE) -> tuple[Profile, str | None]:
    """Parse every log, settle every table with `given`, build the profile; with it the cluster_caveat."""
    tables = [settle(test, given, gpus_per_node) for path in paths for test in parse_log(path)]
    return build_profile(tables, name, description), cluster_caveat(tables)
