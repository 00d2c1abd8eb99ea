"""Solve every bundled instance (and the generated agreement instances of tests/verify), replay each plan and
print replay time, the MILP's prediction, the verifier's time, their difference, the measured effects and the
residual; then the median and worst difference and residual.

    python benchmarks/verify_instances.py [--time-limit S] [--no-generated] [INSTANCE ...]

Target (issue 3, 2 cores): replay of the 131,072-GPU instance under 5 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from scaleacross_milp.loader import load_instance
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.verify.verifier import verify

ROOT = Path(__file__).resolve().parents[1]


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated() -> list[Instance]:
    """The small instances the agreement tests generate (tests/verify/test_agreement.py)."""
    builder = _module(ROOT / "tests" / "conftest.py", "tests_conftest")._small_instance
    tiny = _module(ROOT / "tests" / "verify" / "conftest.py", "verify_conftest").TINY
    agreement = _module(ROOT / "tests" / "verify" / "test_agreement.py", "verify_agreement")
    out = []
    for name, kwargs in sorted(agreement.GENERATED.items()):
        kwargs = dict(kwargs)
        instance = builder(kwargs.pop("buildings", None), kwargs.pop("links", None), kwargs.pop("search", None),
                           **tiny, **kwargs)
        out.append(instance.model_copy(update={"name": f"generated: {name}"}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instances", nargs="*", type=Path, default=sorted((ROOT / "instances").glob("*.json")))
    parser.add_argument("--time-limit", type=float, default=None, help="solve seconds; default: each instance's")
    parser.add_argument("--no-generated", action="store_true", help="bundled instances only")
    args = parser.parse_args()

    instances = [load_instance(path) for path in args.instances] + ([] if args.no_generated else generated())
    table = Table(title="scaleacross-milp: MILP prediction vs verifier replay")
    for column in ("instance", "GPUs", "patterns", "replay s", "MILP s", "verifier s", "difference", "effects",
                   "residual"):
        table.add_column(column, justify="left" if column in ("instance", "effects") else "right")
    console = Console(width=220)
    differences, residuals = [], []
    for instance in instances:
        plan = solve_instance(instance, time_limit_s=args.time_limit)
        v, _ = verify(instance, plan)
        differences.append(v.relative_difference)
        residuals.append(v.residual_s / v.predicted_s)
        gpus = sum(b.gpus for b in instance.topology.buildings)
        effects = ", ".join(f"{e.name} {e.seconds:+.3f} s" for e in v.effects) or "-"
        table.add_row(instance.name, f"{gpus:,}", str(v.patterns), f"{v.replay_wall_s:.2f}", f"{v.predicted_s:.3f}",
                      f"{v.iteration_s:.3f}", f"{v.relative_difference:+.1%}", effects, f"{residuals[-1]:+.1%}")
        console.print(f"{instance.name}: solve {plan.solve.wall_s:.1f} s, replay {v.replay_wall_s:.2f} s")
    console.print(table)
    worst = max(differences, key=abs)
    worst_residual = max(residuals, key=abs)
    console.print(f"difference (verifier - MILP) / MILP: median {statistics.median(differences):+.1%}, "
                  f"worst {worst:+.1%}")
    console.print(f"residual after measured effects: median {statistics.median(residuals):+.1%}, "
                  f"worst {worst_residual:+.1%}")


if __name__ == "__main__":
    main()
