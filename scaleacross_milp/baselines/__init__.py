"""Baselines the optimiser is measured against, each a Layout priced by the verifier (never by the MILP).

    production         DP outermost, FSDP without reshard, interleaved 1F1B, ECMP, TP 8 (production.py)
    framework          torchtitan's mesh [pp, dp, cp, tp]: contiguous rank blocks per stage, 1F1B, FSDP (framework.py)
    single-dimension   coordinate descent over placement, schedule and DP mode, transports (single_dimension.py)
    exhaustive         every layout of the searched space, replayed; small instances only (exhaustive.py)
"""

from __future__ import annotations

from scaleacross_milp.baselines.result import BaselineResult, Kind, Step
from scaleacross_milp.spec.instance import Instance

__all__ = ["BaselineResult", "Kind", "Step", "baseline"]


def baseline(instance: Instance, kind: Kind, time_limit_s: float | None = None) -> BaselineResult:
    """The `kind` baseline of `instance`, replayed by the verifier; `time_limit_s` bounds each MILP solve of
    single-dimension's placement step."""
    from scaleacross_milp.baselines.exhaustive import exhaustive
    from scaleacross_milp.baselines.framework import framework
    from scaleacross_milp.baselines.production import production
    from scaleacross_milp.baselines.single_dimension import single_dimension

    kind = Kind(kind)
    if kind is Kind.single_dimension:
        return single_dimension(instance, time_limit_s)
    return {Kind.production: production, Kind.framework: framework, Kind.exhaustive: exhaustive}[kind](instance)
